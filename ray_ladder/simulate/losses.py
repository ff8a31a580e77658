"""Where the ladder loses: each figure a peer beats it on, both values, and why, as data.

For every ladder row and every peer row of a comparison, each headline figure (quality x
availability, regret, time below the best rung, time not served, flaps, cost per served
hour) on which the peer does better, at the precision the report prints, becomes a
:class:`~ray_ladder.simulate.loss.Loss`. Its ``cause`` and ``why`` come from the two rows'
own figures (time per rung, shed time, climbs, the standby bill), never from a sentence
written per trace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ray_ladder.simulate.loss import Loss
from ray_ladder.simulate.report import PolicyReport

Getter = Callable[[PolicyReport], "float | None"]

#: figure -> (label, getter, higher is better, digits compared, spread key, complement)
FIGURES: dict[str, tuple[str, Getter, bool, int, str | None, bool]] = {
    "quality_weighted_availability": ("q x avail", lambda p: p.quality_weighted_availability,
                                      True, 4, None, False),
    "regret": ("regret", lambda p: p.regret, False, 4, "regret", False),
    "below_best_fraction": ("below best", lambda p: p.below_best_fraction, False, 3, None,
                            False),
    "not_served": ("not served", lambda p: 1 - p.served_fraction, False, 4, "served_fraction",
                   True),
    "flaps": ("flaps", lambda p: float(p.flaps), False, 0, None, False),
    "cost_per_served_hour": ("$ per served h", lambda p: p.cost_per_served_hour, False, 2,
                             "cost_per_served_hour", False),
}


def where_ladder_loses(ladders: Sequence[PolicyReport], peers: Sequence[PolicyReport],
                       rungs: Sequence[dict[str, Any]]) -> list[Loss]:
    """Every figure on which a peer beats a ladder row, with its cause.

    Args:
        ladders: The ladder's rows.
        peers: The other policies' rows.
        rungs: The report's rung rows (name, quality, cost_per_hour).

    Example:
        >>> [(x.peer, x.figure) for x in where_ladder_loses(  # doctest: +SKIP
        ...     [report.compared("ladder")], [report.compared("karpenter")], report.rungs)]
        [('karpenter', 'flaps'), ('karpenter', 'cost_per_served_hour')]
    """
    out = []
    for lad in ladders:
        for peer in peers:
            for figure, (_, get, higher, digits, key, complement) in FIGURES.items():
                a, b = get(lad), get(peer)
                if a is None or b is None or round(a, digits) == round(b, digits):
                    continue
                if (b > a) != higher:
                    continue
                cause, rung, why = _why(figure, lad, peer, rungs)
                out.append(Loss(figure, lad.label, peer.label, a, b, cause, rung, why,
                                _overlap(lad, peer, key, complement)))
    return out


def _overlap(a: PolicyReport, b: PolicyReport, key: str | None, complement: bool,
             ) -> bool | None:
    ia, ib = (None, None) if key is None else (a.spread.get(key), b.spread.get(key))
    if ia is None or ib is None:
        return None
    return not (ia[0] > ib[1] or ib[0] > ia[1])  # a complement flips both ends alike


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _why(figure: str, lad: PolicyReport, peer: PolicyReport,
         rungs: Sequence[dict[str, Any]]) -> tuple[str, str | None, str]:
    """The cause of one loss, from the two rows' figures."""
    if figure == "flaps":
        return ("climbs", None, f"fewer flaps: climbs {peer.climbs_per_day:.2f}/day vs "
                                f"{lad.climbs_per_day:.2f}/day")
    if figure == "cost_per_served_hour":
        return _cost_why(lad, peer, rungs)
    if figure == "not_served":
        return ("sheds", None, f"serves more of the time: the ladder sheds "
                               f"{_pct(lad.shed_fraction)} and has no rung "
                               f"{_pct(lad.unserved_fraction)}, vs "
                               f"{_pct(peer.shed_fraction)} and {_pct(peer.unserved_fraction)}")
    # Quality figures: the rung whose extra time adds the most quality to the peer,
    # unless the ladder's extra time shedding or with no rung is the larger difference.
    gains = [(r["quality"] * (peer.rung_fraction.get(r["name"], 0.0)
                              - lad.rung_fraction.get(r["name"], 0.0)), r["name"]) for r in rungs]
    gain, name = max(gains, default=(0.0, ""))
    label = FIGURES[figure][0]
    idle = (lad.shed_fraction + lad.unserved_fraction) - (peer.shed_fraction
                                                          + peer.unserved_fraction)
    more = peer.rung_fraction.get(name, 0.0) - lad.rung_fraction.get(name, 0.0)
    if gain <= 0 or idle > more:
        return ("sheds", None, f"better {label}: the ladder sheds {_pct(lad.shed_fraction)} "
                               f"and has no rung {_pct(lad.unserved_fraction)}, vs "
                               f"{_pct(peer.shed_fraction)} and {_pct(peer.unserved_fraction)}")
    return ("more_time_on", name, f"better {label}: serves on {name} "
                                  f"{_pct(peer.rung_fraction[name])} vs "
                                  f"{_pct(lad.rung_fraction.get(name, 0.0))} of the time")


def _cost_why(lad: PolicyReport, peer: PolicyReport,
              rungs: Sequence[dict[str, Any]]) -> tuple[str, str | None, str]:
    """Which part of the bill per served hour makes the ladder's dearer: a rung's time,
    the standby, or replicas starting (the largest difference per served hour)."""
    hours = lad.replay.ticks * lad.replay.tick_s / 3600.0

    def per_served(p: PolicyReport, dollars: float) -> float:
        return dollars / p.served_hours if p.served_hours > 0 else 0.0

    terms: list[tuple[float, str, str | None]] = [
        (per_served(lad, lad.cost_standby) - per_served(peer, peer.cost_standby), "standby", None),
        (per_served(lad, lad.cost_starting) - per_served(peer, peer.cost_starting), "starting",
         None)]
    for r in rungs:
        c, name = r["cost_per_hour"] * hours, r["name"]
        terms.append((per_served(lad, c * lad.rung_fraction.get(name, 0.0))
                      - per_served(peer, c * peer.rung_fraction.get(name, 0.0)),
                      "less_time_on", name))
    _, cause, name = max(terms, key=lambda x: x[0])
    if cause == "standby":
        why = (f"cheaper per served hour: no standby bill like the ladder's "
               f"{lad.cost_standby:,.0f} ({per_served(lad, lad.cost_standby):.2f} per served "
               f"h) vs {peer.cost_standby:,.0f}")
    elif cause == "starting":
        why = (f"cheaper per served hour: pays {peer.cost_starting:,.0f} for replicas "
               f"starting vs the ladder's {lad.cost_starting:,.0f}")
    else:
        assert name is not None
        why = (f"cheaper per served hour: serves on {name} "
               f"{_pct(peer.rung_fraction.get(name, 0.0))} vs "
               f"{_pct(lad.rung_fraction.get(name, 0.0))} of the time")
    return cause, name, why
