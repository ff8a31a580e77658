"""What a Tune run on a ladder publishes for ``ray-ladder status`` (one entry per ladder)."""

from __future__ import annotations

import logging
import time
import weakref
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

from ray.tune.experiment import Trial

from ray_ladder.cluster.board import PUBLISH_S, LadderBoard
from ray_ladder.cluster.event_log import log_event
from ray_ladder.core.events import TransitionEvent

if TYPE_CHECKING:
    from ray_ladder.tune._state import TrialState, View
    from ray_ladder.tune.trainable import LadderTrialSpec


class RunSource(Protocol):
    """What the board reads of its scheduler (``LadderScheduler`` provides it)."""

    def _view(self, spec: LadderTrialSpec) -> View: ...

logger = logging.getLogger(__name__)
_boards: weakref.WeakKeyDictionary[Any, tuple[LadderBoard, list[float]]] = \
    weakref.WeakKeyDictionary()


def record_move(event: TransitionEvent, trial_id: str) -> None:
    """Log and record one trial's move: its source is the trial (``trial <id>``), so each
    trial is its own line on a timeline, and ``trial`` carries its id as data."""
    log_event(event, part="tune", source=f"trial {trial_id}", trial=trial_id)


def publish_run(scheduler: RunSource, trials: list[tuple[Trial, TrialState]],
                now: float) -> None:
    """Publish the run's entry per ladder, at most every ``PUBLISH_S``.

    The entry's rung is the most degraded live trial's (``trials`` lists every trial with
    its rung); replicas per rung are the trials placed there. ``now`` is the scheduler's
    own (monotonic) clock, the one its selectors observe with.
    """
    board, last = _boards.setdefault(scheduler, (LadderBoard("tune"), [float("-inf")]))
    if now - last[0] < PUBLISH_S:
        return
    last[0] = now
    try:
        _publish(board, scheduler, trials, now)
    except Exception:  # a status entry is never worth a failed Tune step
        logger.debug("ladder status entry of a Tune run not published", exc_info=True)


def _publish(board: LadderBoard, scheduler: RunSource,
             trials: list[tuple[Trial, TrialState]], now: float) -> None:
    by_spec: dict[str, list[tuple[Trial, TrialState]]] = {}
    for trial, state in trials:
        by_spec.setdefault(state.spec.uid, []).append((trial, state))
    wall = time.time()
    for group in by_spec.values():
        spec = group[0][1].spec
        ladder = spec.trial_ladder
        worst = max(group, key=lambda ts: ts[1].selector.degraded_s(now))[1]
        placed = Counter(s.placed for t, s in group
                         if s.placed is not None and t.status == Trial.RUNNING)
        snap = scheduler._view(spec).snap  # the run's capacity view (refreshed in a thread)
        board.observe(
            spec.ladder.name, ladder, worst.selector, obtainable=snap.obtainable,
            why=snap.why_unobtainable(), replicas=dict(placed), now=wall, selector_now=now,
            extra={"trials": [{"trial": t.trial_id, "status": t.status, "rung": s.placed,
                               "degraded_s": round(s.selector.degraded_s(now), 3)}
                              for t, s in group]})
