"""What a ladder app bound to a fleet team asks the arbiter for (pure): units per rung."""

from __future__ import annotations

from ray_ladder.core.placement import standby_replicas
from ray_ladder.serve.state import RouterState


def wanted_units(state: RouterState) -> dict[str, int]:
    """Units of each compute rung the app wants now: the replicas it runs there, and at
    least its standby replicas on every rung at or above the one it serves from (it
    would climb there), at least one on the best eligible rung.

    Example:
        >>> wanted_units(state)  # doctest: +SKIP
        {'h100': 1, 'a100': 2}
    """
    ladder = state.ladder
    selector = state.selectors_in_use()[0]
    current = selector.current
    eligible = [n for n in selector.eligible if ladder.rung(n).is_compute]
    above = eligible if current not in eligible else eligible[:eligible.index(current) + 1]
    out = {r.name: state.replicas(r.name) for r in ladder.rungs if r.is_compute}
    for i, name in enumerate(above):
        floor = max(standby_replicas(ladder, ladder.rung(name)), 1 if i == 0 else 0)
        out[name] = max(out[name], floor)
    return out
