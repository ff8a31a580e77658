"""A Ray Train run's climb and notice lifecycle: one state value, and the pure rules that
change it.

:class:`~ray_ladder.train.LadderScalingPolicy` runs in Ray Train's controller. It keeps
one :data:`RunState`, gathers the facts of a call as plain values (the request the
workers stopped for, its monotonic clock, what the planner observed), asks this module,
and only then acts: writes the run's channel, restarts the group, ends Ray Train's wait
for a drain's deadline, or waits before it answers, the way :mod:`ray_ladder.task.policy`
decides for the task ladder. No rule here sleeps or reads a clock: a wait is an answer
(:attr:`Step.sleep_s`) the policy carries out. Every rule is unit-tested without Ray
(``tests/train/test_lifecycle.py``).

States (each carries ``request``, the run's last request number, so numbers never repeat):

* :class:`Steady`: a group starts or runs and no request stands;
* :class:`Climbing`: the workers are asked to stop at their next checkpoint so the group
  can move to a better rung;
* :class:`Noticed`: a preemption notice: the workers are asked to stop at their next
  checkpoint, then Ray Train's wait for the drain's deadline ends;
* :class:`Waiting`: no eligible gang fits; the policy waits, then gives up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from ray_ladder.core.placement import PREEMPTION_NOTICE

#: How often a run waiting for a gang says why (seconds of the policy's clock).
WAIT_LOG_S = 30.0
#: The longest one wait between two answers to Ray Train's controller.
WAIT_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class Steady:
    """A group starts or runs; no request stands.

    Attributes:
        request: The run's last request number (the next one is ``request + 1``).
        probed_at: When the planner last observed capacity for this group.

    Example:
        >>> Steady().request
        0
    """

    request: int = 0
    probed_at: float = -math.inf


@dataclass(frozen=True, slots=True)
class Climbing:
    """A climb request stands: the workers stop at their next checkpoint to move to ``to``.

    Attributes:
        request: The standing request's number.
        to: The better rung.
        probed_at: When the planner last observed capacity for this group.

    Example:
        >>> Climbing(1, "h100x8").to
        'h100x8'
    """

    request: int
    to: str
    probed_at: float = -math.inf


@dataclass(frozen=True, slots=True)
class Noticed:
    """A preemption notice: the workers stop at their next checkpoint for ``request``.

    Attributes:
        request: The request the workers stop for (a standing climb they already
            stopped for is kept).
        deadline: The drain's deadline (wall-clock seconds), if it has one.
        ended: The workers stopped and Ray Train's wait for the deadline was ended.

    Example:
        >>> Noticed(2, None).ended
        False
    """

    request: int
    deadline: float | None = None
    ended: bool = False


@dataclass(frozen=True, slots=True)
class Waiting:
    """No eligible gang fits: the run waits for one, since ``since``.

    Attributes:
        request: The run's last request number.
        since: When the wait began (the policy's clock).
        logged_at: When it last said why (``-inf``: not yet).

    Example:
        >>> Waiting(0, since=5.0).since
        5.0
    """

    request: int
    since: float
    logged_at: float = -math.inf


RunState = Steady | Climbing | Noticed | Waiting

StepKind = Literal["none", "ask", "cancel", "move", "notice", "end_wait", "wait", "exhaust"]


@dataclass(frozen=True, slots=True)
class Step:
    """What the policy does now, and the run's state after it.

    Attributes:
        kind: ``none``; ``ask`` the workers to stop for a climb to ``rung`` (request
            ``request``); ``cancel`` request ``request`` (its rung went away); ``move``
            the group to ``rung`` now; ``notice``: ask the workers to stop for a
            preemption notice (request ``request``; the policy names the rung that fits
            without the drained nodes); ``end_wait``: end Ray Train's wait for the
            drain's deadline; ``wait``: answer "no change" after ``sleep_s``;
            ``exhaust``: raise ``LadderExhaustedError`` after ``waited_s``.
        state: The run's state once the step is done.
        rung: ``ask``/``move``: the rung.
        request: ``ask``/``cancel``/``notice``: the request number.
        sleep_s: ``wait``: how long the policy waits before it answers.
        waited_s: ``wait``/``exhaust``: how long the run has waited for a gang.
        log: ``wait``: say why it waits (at most every :data:`WAIT_LOG_S`).

    Example:
        >>> Step("none", Steady()).kind
        'none'
    """

    kind: StepKind
    state: RunState
    rung: str = ""
    request: int = 0
    sleep_s: float = 0.0
    waited_s: float = 0.0
    log: bool = False


def awaits_park(state: RunState) -> bool:
    """Whether the policy waits for the workers to stop at a checkpoint (so it reads the
    request they stopped for): a climb stands, or a notice whose wait is not ended yet.

    Example:
        >>> awaits_park(Noticed(1, None, ended=True))
        False
    """
    return isinstance(state, Climbing) or (isinstance(state, Noticed) and not state.ended)


def climb_due(state: RunState, parked: int | None) -> Climbing | None:
    """The standing climb, once the workers stopped for it (``parked`` is its request);
    ``None``: no climb is due.

    Example:
        >>> climb_due(Climbing(3, "h100x8"), parked=2) is None
        True
    """
    if isinstance(state, Climbing) and parked == state.request:
        return state
    return None


def at_climb(state: Climbing, *, obtainable: bool) -> Step:
    """The workers stopped for the climb: ``move`` if its rung is still obtainable, else
    ``cancel`` the request (they go on where they are).

    Example:
        >>> at_climb(Climbing(1, "h100x8"), obtainable=False).kind
        'cancel'
    """
    if obtainable:
        return Step("move", started(state), rung=state.to)
    return Step("cancel", Steady(state.request, state.probed_at), request=state.request)


def probe_due(state: RunState, now: float, interval_s: float) -> bool:
    """Whether the planner observes capacity now (every ``interval_s`` for a group).

    Example:
        >>> probe_due(Steady(probed_at=10.0), 10.5, interval_s=1.0)
        False
    """
    probed_at = state.probed_at if isinstance(state, (Steady, Climbing)) else -math.inf
    return now - probed_at >= interval_s


def on_probe(state: RunState, now: float, better: str | None) -> Step:
    """The planner observed capacity at ``now``; ``better`` is the rung it would climb to
    (obtainable for the hysteresis), or ``None``.

    Rules:

    1. a climb stands and ``better`` is gone: ``cancel`` it;
    2. ``better`` is the standing climb's rung: ``none``;
    3. ``better`` is another rung: ``ask`` the workers to stop for it (a new request);
    4. nothing better and no climb stands: ``none``.

    Example:
        >>> on_probe(Steady(4), 9.0, "h100x8").state
        Climbing(request=5, to='h100x8', probed_at=9.0)
    """
    if isinstance(state, Climbing):
        if better is None:
            return Step("cancel", Steady(state.request, now), request=state.request)
        if better == state.to:
            return Step("none", replace(state, probed_at=now))
    if better is None:
        return Step("none", Steady(state.request, now))
    request = state.request + 1
    return Step("ask", Climbing(request, better, now), rung=better, request=request)


def on_notice(state: RunState, *, deadline: float | None, parked: int | None) -> Step:
    """Ray Train saw a preemption notice (it entered ``PreemptingState``).

    The workers are asked to stop at their next checkpoint (``notice``, a new request
    that replaces a standing climb), unless they already stopped for the standing climb
    (``parked`` is its request): then that request is the notice's (``none``).

    Example:
        >>> on_notice(Climbing(1, "h100x8"), deadline=None, parked=1).state
        Noticed(request=1, deadline=None, ended=False)
    """
    if isinstance(state, Climbing) and parked == state.request:
        return Step("none", Noticed(state.request, deadline))
    request = state.request + 1
    return Step("notice", Noticed(request, deadline), request=request)


def while_noticed(state: RunState, *, parked: int | None) -> Step:
    """Ray Train waits for the drain's deadline: once the workers stopped for the
    notice's request, ``end_wait`` (the group restarts elsewhere now).

    Example:
        >>> while_noticed(Noticed(2, None), parked=2).state.ended
        True
    """
    if isinstance(state, Noticed) and not state.ended and parked == state.request:
        return Step("end_wait", replace(state, ended=True))
    return Step("none", state)


#: A span that ended because the fleet arbiter reclaimed its team's units (``ended_by``).
RECLAIM_NOTICE = "reclaim notice"


def budget_reason(team: str) -> str:
    """Why a group left a rung its team's spent ``demote`` budget takes (span and event).

    Example:
        >>> budget_reason("d")
        "team d's budget is spent (demote): moved at a committed checkpoint"
    """
    return f"team {team}'s budget is spent (demote): moved at a committed checkpoint"


def on_reclaim(state: RunState, *, going: bool, deadline: float | None,
               parked: int | None, target: str | None) -> Step:
    """A run bound to a fleet team read its grants while its group runs (``going``: a
    reclaim notice leaves the team fewer units of its rung than its gang; ``deadline``:
    the notice's; ``target``: the rung it would move to now, ``None``: none fits).

    Rules, first match wins:

    1. going and no notice stands: ``notice`` (ask the workers to stop at their next
       checkpoint, as :func:`on_notice` does, with the rung that fits now or ``""``);
    2. going, a notice stands and the workers stopped for it: ``move`` to ``target``
       (``none`` while nothing fits: they wait at the checkpoint);
    3. a notice stands but the rung is no longer going away (the notice was withdrawn):
       ``cancel`` it (the workers go on where they are);
    4. otherwise: ``none``.

    Example:
        >>> on_reclaim(Steady(1), going=True, deadline=30.0, parked=None, target="a100").state
        Noticed(request=2, deadline=30.0, ended=False)
        >>> on_reclaim(Noticed(2, 30.0), going=True, deadline=30.0, parked=2,
        ...            target="a100").kind
        'move'
    """
    if going and not isinstance(state, Noticed):
        step = on_notice(state, deadline=deadline, parked=parked)
        return replace(step, rung=target or "")
    if not isinstance(state, Noticed):
        return Step("none", state)
    if not going:
        return Step("cancel", Steady(state.request), request=state.request)
    if parked == state.request and target is not None:
        return Step("move", started(state), rung=target)
    return Step("none", state)


def resized(before: str | None, after: str, order: Sequence[str]) -> str:
    """Why a group that Ray Train resized from ``before`` to ``after`` ended (``order``:
    the eligible rungs, best first): a climb, or a move down off reclaimed units.

    Example:
        >>> resized("h100", "a100", ["h100", "a100"])
        'reclaim notice'
    """
    if before in order and after in order and order.index(after) > order.index(before):
        return RECLAIM_NOTICE
    return f"climbed to {after}"


def reclaim_reason(team: str, state: RunState, wall: float) -> str:
    """The event reason of a move off a rung the team's units of were reclaimed.

    Example:
        >>> reclaim_reason("b", Noticed(1, deadline=100.0), 94.0)[-25:]
        '6.0 s before the deadline'
    """
    deadline = state.deadline if isinstance(state, Noticed) else None
    due = ("no deadline" if deadline is None else
           f"{max(0.0, deadline - wall):.1f} s before the deadline")
    return (f"{RECLAIM_NOTICE}: team {team}'s units go back; moved at a committed "
            f"checkpoint, {due}")


def notice_reason(state: RunState, wall: float) -> str:
    """The reason of a restart Ray Train made for a preemption notice, at wall time
    ``wall``: moved at a checkpoint (and how long before the deadline), or at the deadline.

    Example:
        >>> notice_reason(Noticed(1, deadline=100.0, ended=True), 90.0)[-38:]
        'checkpoint, 10.0 s before the deadline'
    """
    if not (isinstance(state, Noticed) and state.ended):
        return f"{PREEMPTION_NOTICE}: restarted at the drain's deadline"
    due = ("no deadline" if state.deadline is None else
           f"{max(0.0, state.deadline - wall):.1f} s before the deadline")
    return f"{PREEMPTION_NOTICE}: moved at a committed checkpoint, {due}"


def on_no_fit(state: RunState, now: float, *, max_wait_s: float | None,
              poll_s: float) -> Step:
    """No eligible gang fits now: ``wait`` (``poll_s`` at most, then Ray Train asks
    again), or ``exhaust`` once the run waited more than ``max_wait_s`` (``None``: never).

    Example:
        >>> on_no_fit(Waiting(0, since=0.0), 301.0, max_wait_s=300.0, poll_s=0.5).kind
        'exhaust'
    """
    waiting = state if isinstance(state, Waiting) else Waiting(state.request, now)
    waited = now - waiting.since
    if max_wait_s is not None and waited > max_wait_s:
        return Step("exhaust", waiting, waited_s=waited)
    log = now - waiting.logged_at > WAIT_LOG_S
    if log:
        waiting = replace(waiting, logged_at=now)
    return Step("wait", waiting, sleep_s=min(poll_s, WAIT_POLL_S), waited_s=waited, log=log)


def started(state: RunState) -> Steady:
    """A new group starts: no request stands for it, and its first probe is due.

    Example:
        >>> started(Noticed(3, None, ended=True))
        Steady(request=3, probed_at=-inf)
    """
    return Steady(state.request)
