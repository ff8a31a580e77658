"""What one request tries next, and what the router reads to know what it may try.

Shared by the JSON route (:meth:`LadderRouter.answer`) and the streams of the
OpenAI-compatible routes (:class:`~ray_ladder.serve.llm.streams.StreamDriver`), so both
move the same way when a rung fails under them.
"""

from __future__ import annotations

from collections.abc import Mapping

from ray_ladder.core.selector import Selector
from ray_ladder.serve.core import RouterState


def next_rung(state: RouterState, selector: Selector, tried: set[str]) -> str | None:
    """The rung a request tries next: the selector's current rung, else the best
    obtainable eligible compute rung not tried yet (the selector may still be on a rung
    this request saw fail), else the first cache or shed rung not tried; ``None`` when
    nothing is left.

    Example:
        >>> next_rung(state, selector, tried={"h100"})  # doctest: +SKIP
        'a100'
    """
    current = selector.current
    if current is not None and current not in tried:
        return current
    target = state.hedge_target(selector, tried)
    if target is not None:
        return target
    below = [n for n in selector.eligible
             if n not in tried and not state.ladder.rung(n).is_compute]
    return below[0] if below else None


#: Replica states that take requests: a replica on a draining node is PENDING_MIGRATION
#: and still serves until Serve stops it (before the drain deadline).
SERVING_STATES = frozenset({"RUNNING", "PENDING_MIGRATION"})


def running_replicas(app_name: str, deployments: Mapping[str, str]) -> dict[str, int]:
    """Serving replicas per rung (rung -> its deployment's name) of Serve app
    ``app_name``, from the Serve controller (``serve.status()``: one call)."""
    from ray import serve

    app = serve.status().applications.get(app_name)
    running: dict[str, int] = {}
    for rung, deployment in deployments.items():
        status = app.deployments.get(deployment) if app is not None else None
        states = status.replica_states if status is not None else {}
        running[rung] = sum(n for s, n in states.items()
                            if getattr(s, "value", s) in SERVING_STATES)
    return running

