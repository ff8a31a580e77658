"""The oracle as a bound: say so, loudly, wherever a policy's figures beat it.

The oracle (the selector at hysteresis 1, no switching cost, no standby) serves the best
obtainable rung at every tick, so no policy serves more hours or more quality-weighted
availability, and none serves the same at a lower bill per served hour, unless its *model*
gives it something the traces do not (GKE's ``ScaleUpAnyway`` node, taken to be always
there) or it buys the same quality on a cheaper rung the oracle passes over (the oracle
takes rungs in ladder order, not by price). :func:`oracle_notes` names each such row and
why, so a report never prints a row above its bound in silence.
"""

from __future__ import annotations

from collections.abc import Iterable

from ray_ladder.simulate.report import Note, PolicyReport

_EPS = 1e-9


def _more(a: float, b: float) -> bool:
    return a > b + _EPS * max(1.0, abs(b))


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= _EPS * max(1.0, abs(b))


def oracle_notes(oracle: PolicyReport,
                 rows: Iterable[tuple[PolicyReport, str | None]]) -> list[Note]:
    """One ``"above_oracle"`` :class:`Note` per figure of a policy that beats the
    oracle's, saying which and why.

    Args:
        oracle: The oracle's report.
        rows: Each policy's report with the reason its model can serve beyond the
            traces (``None``: it cannot, so a row above the bound is a defect to report).

    Example:
        >>> oracle_notes(report.oracle, [(p, None) for p in report.policies])  # doctest: +SKIP
        []
    """
    texts: list[tuple[str, str]] = []
    for p, why in rows:
        label = p.label
        beyond = why or ("not expected of this model: the traces allow no more; report "
                         "it as a defect")
        if _more(p.served_hours, oracle.served_hours):
            texts.append((label, f"{label} serves {p.served_hours:.4g} h, more than the "
                                 f"oracle's {oracle.served_hours:.4g} h: {beyond}"))
        if _more(p.quality_weighted_availability, oracle.quality_weighted_availability):
            texts.append((label, f"{label} has quality x availability "
                                 f"{p.quality_weighted_availability:.4f}, above the oracle's "
                                 f"{oracle.quality_weighted_availability:.4f}: {beyond}"))
        cph, best = p.cost_per_served_hour, oracle.cost_per_served_hour
        if (cph is not None and best is not None and _more(best, cph)
                and _same(p.served_hours, oracle.served_hours)
                and _same(p.quality_weighted_availability,
                          oracle.quality_weighted_availability)):
            texts.append((label, f"{label} serves as many hours at the oracle's quality for "
                                 f"{cph:.2f} per served hour against the oracle's {best:.2f}: "
                                 "it serves a rung of equal quality that costs less, which the "
                                 "oracle (the best rung in ladder order, not the cheapest) "
                                 "passes over"))
    return [Note("above_oracle", label, text) for label, text in texts]
