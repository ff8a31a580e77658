"""`ray-ladder simulate`'s sections under the tables: where the ladder loses, and what a
policy's requests pay (LiteLLM's tries of dead deployments), as lines of text."""

from __future__ import annotations

from typing import Any

from ray_ladder.simulate.loss import Loss
from ray_ladder.simulate.losses import FIGURES
from ray_ladder.simulate.report import SimulationReport

_RULES = {
    "connection_error": "never cooled down: APIConnectionError",
    "below_threshold": "never cooled down: under 1,000 failed calls a minute",
    "threshold": "cooled down once 1,000 calls failed in the minute",
    "allowed_fails": "cooled down after allowed_fails",
    "forced": "cooled down (cooldown_dead)",
}


def _value(figure: str, x: float) -> str:
    if figure in ("below_best_fraction", "not_served"):
        return f"{100 * x:.2f}%"
    if figure == "flaps":
        return str(round(x))
    return f"{x:.{FIGURES[figure][3]}f}"


def _spread(loss: Loss) -> str:
    if loss.overlap is None:
        return ""
    return " (90% intervals overlap)" if loss.overlap else " (90% intervals apart)"


def loss_lines(report: SimulationReport) -> list[str]:
    """The "where the ladder loses" section: one line per figure a peer beats a ladder
    row on, with both values and why; one line saying so when it loses on none.

    Example:
        >>> loss_lines(report)[1]  # doctest: +SKIP
        '  karpenter: $ per served h 3.81 vs the ladder's 7.22 (90% intervals apart): ...'
    """
    if not report.comparison:
        return []
    head = "Where the ladder loses (a peer's figure better than the ladder's, as printed):"
    if not report.losses:
        names = ", ".join(label for label, *_ in FIGURES.values())
        return [head, f"  nowhere: no peer beats the ladder on {names}."]
    several = len({x.ladder for x in report.losses}) > 1
    lines = [head]
    for x in report.losses:
        who = f"{x.peer} vs {x.ladder}" if several else x.peer
        lines.append(f"  {who}: {FIGURES[x.figure][0]} {_value(x.figure, x.peer_value)} vs "
                     f"the ladder's {_value(x.figure, x.ladder_value)}{_spread(x)}: {x.why}")
    return lines


def _cost(d: dict[str, Any]) -> str:
    return f"{d['seconds']:.1f} s ({_RULES.get(d['rule'], d['rule'])})"


def request_lines(report: SimulationReport) -> list[str]:
    """What each policy with request figures pays for dead deployments (LiteLLM).

    Example:
        >>> request_lines(report)  # doctest: +SKIP
        ['litellm: at 1 req/s, 1,877 requests an hour (52.1%) try a dead deployment ...']
    """
    lines = []
    for p in report.comparison:
        r = p.requests
        if not r:
            continue
        lines.append(
            f"{p.policy}: at {r['requests_per_s']:g} req/s, {r['dead_first_per_hour']:,.0f} "
            f"requests an hour ({100 * r['dead_first_share']:.1f}%) try a dead deployment "
            f"first and lose {r['added_s_per_dead_first']:.1f} s each on average "
            f"({r['added_hours']:,.0f} request-hours in all); each gone deployment costs "
            f"a request {_cost(r['gone'])}, each starting one {_cost(r['starting'])}")
    return lines
