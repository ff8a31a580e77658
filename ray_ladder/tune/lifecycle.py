"""A Tune trial's lifecycle on the ladder: one phase, and the pure rules that change it.

The :class:`~ray_ladder.tune.LadderScheduler` keeps one :data:`Phase` per trial, gathers
the facts of a hook as plain values (Tune's status, the selector's target, whether the
trial's rung is going away), asks this module and only then acts (pauses, places or
holds the trial), the way :mod:`ray_ladder.task.policy` decides for the task ladder. The
rung itself is always the selector's choice; this module says what the trial is doing.
Every rule is unit-tested without Ray (``tests/tune/test_lifecycle.py``).

Phases:

* ``placed``: on its rung (starting, running, done), or paused by the base scheduler;
* ``pending``: just placed, its placement not granted yet: other trials count it taken;
* ``to_park``: no rung was free when it was added; held as soon as Tune lists it;
* ``parked``: held PAUSED by the ladder until a rung has a free placement for it;
* ``climbing``: paused by the ladder at a checkpoint, to move to a better rung;
* ``leaving``: paused by the ladder at a checkpoint, to leave a rung going away (a
  preemption notice);
* ``demoting``: paused by the ladder at a checkpoint, to leave a rung its team's spent
  ``demote`` budget takes (docs/teams.md, "Budgets").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ray_ladder.core.events import TransitionCause
from ray_ladder.core.placement import PREEMPTION_NOTICE

Phase = Literal["placed", "pending", "to_park", "parked", "climbing", "leaving",
                "demoting"]

#: The phases in which the ladder itself holds the trial PAUSED until a rung is free.
HELD: frozenset[Phase] = frozenset({"parked", "climbing", "leaving", "demoting"})
#: Why a trial's span ends, and why it is placed again, when its team's spent budget
#: takes its rung (the Serve and task ladders say the same: the rung is unobtainable).
BUDGET_DEMOTED = "its team's budget is spent (demote)"

_RESUMED_BECAUSE: dict[Phase, str] = {
    "parked": "capacity free",
    "climbing": "climb at checkpoint",
    "leaving": PREEMPTION_NOTICE,
    "demoting": BUDGET_DEMOTED,
}
_RESUMED_CAUSE: dict[Phase, TransitionCause] = {
    "parked": "promoted",
    "climbing": "promoted",
    "leaving": "preemption_notice",
    "demoting": "lost",
}


@dataclass(frozen=True, slots=True)
class Move:
    """What a trial does at a result that carries a checkpoint.

    Attributes:
        kind: ``stay`` (go on where it is), ``climb`` (pause, to move to a better rung)
            or ``leave`` (pause, to move off its rung, which is going away or which its
            team's spent budget takes).
        phase: The trial's phase after it (unchanged for ``stay``).
        ended_by: Why its span on the rung ends (``""`` for ``stay``).
        release: Its own placement counts as free for its next placement (a climb: it
            gives the placement back; not when the rung's nodes are going away).

    Example:
        >>> Move("climb", "climbing", "climbed to h100", release=True).kind
        'climb'
    """

    kind: Literal["stay", "climb", "leave"]
    phase: Phase
    ended_by: str = ""
    release: bool = False


def at_checkpoint(phase: Phase, placed: str | None, target: str | None, *,
                  going: bool, order: Sequence[str], demoted: bool = False) -> Move:
    """The move of a trial on ``placed`` at a checkpoint, the selector saying ``target``
    (``going``: its rung is going away; ``demoted``: its team's spent budget takes its
    rung; ``order``: the ladder's rung names, best first).

    Rules, first match wins:

    1. no rung or no target, or the target is where it is: ``stay``;
    2. its rung is going away (a preemption notice): ``leave``, to wherever the target
       is, lower included;
    3. its team's spent budget takes its rung: ``leave`` (``demoting``), the same way;
    4. the target is lower (a fall is the failure path's, not a checkpoint's): ``stay``;
    5. otherwise the target is better: ``climb``.

    Example:
        >>> at_checkpoint("placed", "a100", "h100", going=False, order=["h100", "a100"]).kind
        'climb'
        >>> at_checkpoint("placed", "a100", "cpu", going=False, demoted=True,
        ...               order=["h100", "a100", "cpu"]).phase
        'demoting'
    """
    if placed is None or target is None or target == placed:
        return Move("stay", phase)
    if going:
        return Move("leave", "leaving", PREEMPTION_NOTICE)
    if demoted:
        return Move("leave", "demoting", BUDGET_DEMOTED)
    if order.index(target) > order.index(placed):
        return Move("stay", phase)
    return Move("climb", "climbing", f"climbed to {target}", release=True)


def resume_reason(phase: Phase) -> str:
    """Why a trial the ladder held is placed again (the event's reason).

    Raises:
        ValueError: ``phase`` is not one the ladder holds a trial in (:data:`HELD`).

    Example:
        >>> resume_reason("climbing")
        'climb at checkpoint'
    """
    try:
        return _RESUMED_BECAUSE[phase]
    except KeyError:
        raise ValueError(f"a trial in phase {phase!r} is not held by the ladder; "
                         f"held phases: {sorted(HELD)}") from None


def resume_cause(phase: Phase) -> TransitionCause:
    """The cause, as data, that goes with :func:`resume_reason` (the metrics' label).

    Raises:
        ValueError: ``phase`` is not one the ladder holds a trial in (:data:`HELD`).

    Example:
        >>> resume_cause("leaving")
        'preemption_notice'
    """
    resume_reason(phase)  # the same check, the same message
    return _RESUMED_CAUSE[phase]


def on_listed(phase: Phase, *, pending: bool) -> Phase:
    """The scheduler sees the trial in Tune's list: one added with no rung free is held
    (``parked``) if Tune queued it (``pending``), else it is Tune's (``placed``).

    Example:
        >>> on_listed("to_park", pending=True)
        'parked'
    """
    if phase != "to_park":
        return phase
    return "parked" if pending else "placed"


def on_status(phase: Phase, *, pending: bool) -> Phase:
    """Follow Tune's status: a placed trial Tune queues (``pending``) is promised its
    placement until it leaves that status; the ladder's own phases do not change.

    Example:
        >>> on_status("pending", pending=False)
        'placed'
    """
    if phase == "placed" and pending:
        return "pending"
    if phase == "pending" and not pending:
        return "placed"
    return phase


def on_close(phase: Phase) -> Phase:
    """Its span on the rung closed (completed, stopped, failed, moved): it is promised
    nothing any more.

    Example:
        >>> on_close("pending")
        'placed'
    """
    return "placed" if phase == "pending" else phase


def on_error(phase: Phase) -> Phase:
    """The trial failed: a move it was paused for is over (Tune recovers it, and the
    scheduler places it again as a new start); a hold the ladder had not begun stays.

    Example:
        >>> on_error("leaving")
        'placed'
    """
    return "placed" if phase in ("pending", "climbing", "leaving", "demoting") else phase
