"""One request's walk down the ladder, decided without Ray: facts and a clock in, one step out.

Both HTTP routes are thin drivers over it (the JSON route awaits a whole answer, the
OpenAI routes await pieces), like ``task/policy.py`` decides for a task's lane and the lane
only acts, or tenacity's ``iter()`` answers ``DoAttempt`` / ``DoSleep`` from a call state:

1. the rung to try next is the request's selector's current rung, else the best
   obtainable eligible compute rung not tried yet (the selector may still be on a rung
   this request saw fail), else the first cache or shed rung not tried
   (:func:`next_rung`);
2. a compute rung: :class:`Try` it;
3. a cache rung: look the request up (:class:`FromCache`); a miss is per request, not a
   ladder move: the walk goes on below it;
   ...unless the request has a latency target and the rung is expected to miss it
   (``RequestView.expected_s``: its queue and service time), or it has no free place
   and the request could not wait in its queue and still fall back to the rung below
   in time (:data:`RESERVE`): it *spills* (:class:`Spill`, an attempt with cause
   ``busy``) and the walk goes on below; not once the target has passed or a rung
   that took the request failed it (``Walk.failed``): a late answer beats a 503;
4. only the shed rung or nothing is left, but a compute rung of the request can come back
   without new capacity (its node is alive; its replica restarts or its failure cooldown
   runs): :class:`Wait` for the next probe, until ``pending_timeout_s`` after the request
   arrived (as Serve queues a request for a replica); after the wait, rungs that failed
   the request may be tried again;
5. else (and at once when a rung spilled the request: waiting cannot meet its target)
   the shed rung answers (:class:`Shed`, a 503 with ``Retry-After``) or, with no
   shed rung left, the ladder is :class:`Exhausted`.

Every attempt that did not answer is kept with its cause (:class:`~ray_ladder.Attempt`),
so a refusal carries the whole walk.

Example:
    >>> from ray_ladder.core.spec import Ladder
    >>> ladder = Ladder.from_dict({"name": "w", "rungs": [
    ...     {"name": "h100", "resources": {"ladder/h100": 1}},
    ...     {"name": "shed", "kind": "shed", "quality": 0}]})
    >>> walk = Walk(ladder, give_up_at=10.0)
    >>> decide(walk, Facts(next_rung="h100", can_come_back=True), now=0.0)
    Try(rung='h100')
    >>> decide(walk, Facts(next_rung="shed", can_come_back=True), now=0.0)
    Wait(until=10.0)
    >>> decide(walk, Facts(next_rung="shed", can_come_back=True), now=10.0)
    Shed(rung='shed')
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ray_ladder.core.exceptions import Attempt, AttemptCause, LadderExhaustedError
from ray_ladder.core.spec import Ladder

if TYPE_CHECKING:
    from ray_ladder.core.selector import Selector
    from ray_ladder.serve.load import LoadBook
    from ray_ladder.serve.state import RouterState

#: A request that queues on a full rung keeps this many times the next rung's expected
#: time to fall back there (it leaves the queue then: a queue's wait is the least certain
#: part of an estimate).
RESERVE = 1.5
NO_RUNG = "no eligible rung is obtainable"
CACHE_MISS = "no fresh cached answer for this request"
SHED = "shed: no capacity for this request, try later"


@dataclass(frozen=True, slots=True)
class Try:
    """Call compute ``rung`` (the JSON route races it, a stream reads its pieces)."""

    rung: str


@dataclass(frozen=True, slots=True)
class Spill:
    """Compute ``rung`` is expected to answer in ``expected_s``, past the request's
    target: the request goes below instead (never returned by :meth:`Walk.next_step`)."""

    rung: str
    expected_s: float


@dataclass(frozen=True, slots=True)
class FromCache:
    """Answer from the cache rung ``rung`` if it holds a fresh answer to this request."""

    rung: str


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait for the next probe, at most until ``until`` (the walk's clock)."""

    until: float


@dataclass(frozen=True, slots=True)
class Shed:
    """The shed rung ``rung`` answers: no capacity for this request now, try later."""

    rung: str


@dataclass(frozen=True, slots=True)
class Exhausted:
    """No eligible rung is left to try: the ladder refuses the request."""


Step = Try | Spill | FromCache | Wait | Shed | Exhausted


@dataclass(frozen=True, slots=True)
class Facts:
    """What the walk needs to know of the ladder now (read by :meth:`Walk.facts`).

    Attributes:
        next_rung: The rung :func:`next_rung` names for what the walk excludes.
        can_come_back: Whether an eligible compute rung can come back without new
            capacity (``RouterState.can_come_back``).
        expected_s: Seconds until ``next_rung`` would answer (or send its first piece),
            when the request has a target and ``next_rung`` is a compute rung.
        reserve_s: Seconds before its target a request queued on ``next_rung`` leaves
            that queue (0 when it has a free place or nothing is below): enough to fall
            back below (``RESERVE`` x the rung below's expected time, and its own time
            with its usual spread), and never less than ``next_rung``'s own time from a
            place to its answer with its spread (a place that comes later is late
            anyway, and a rung below not timed yet is expected at 0).
    """

    next_rung: str | None
    can_come_back: bool
    expected_s: float | None = None
    reserve_s: float = 0.0


class LadderView(Protocol):
    """What :func:`next_rung` reads (``RouterState`` with a request's selector)."""

    @property
    def current(self) -> str | None: ...
    @property
    def eligible(self) -> Sequence[str]: ...
    def best_compute(self, exclude: set[str]) -> str | None: ...
    def can_come_back(self) -> bool: ...
    def expected_s(self, rung: str, kind: str, now: float) -> float: ...
    def own_s(self, rung: str, kind: str) -> float: ...
    def has_place(self, rung: str) -> bool: ...


class RequestView:
    """One request's view of the router's state: its selector and what they observe.

    Args:
        state: The router's state.
        selector: The selector for the request's constraints.
        book: The rungs' load (``None``: every rung is expected to answer at once).
    """

    __slots__ = ("_book", "_selector", "_state")

    def __init__(self, state: RouterState, selector: Selector,
                 book: LoadBook | None = None) -> None:
        self._state = state
        self._selector = selector
        self._book = book

    @property
    def current(self) -> str | None:
        """The selector's rung."""
        return self._selector.current

    @property
    def eligible(self) -> Sequence[str]:
        """The rungs the request may use, best first."""
        return self._selector.eligible

    def best_compute(self, exclude: set[str]) -> str | None:
        """The best obtainable eligible compute rung not in ``exclude``."""
        return self._state.best_compute(self._selector, exclude)

    def hedge_target(self, exclude: set[str]) -> str | None:
        """Where a copy of a request its rung is slow to take goes: :meth:`best_compute`
        among rungs with a RUNNING replica (a cold one could not answer sooner, and a
        copy would start a replica and node for what may be a moment's lull)."""
        cold = {n for n in self.eligible if not self._state.is_warm(n)}
        return self.best_compute(set(exclude) | cold)

    def can_come_back(self) -> bool:
        """Whether an eligible compute rung can come back without new capacity."""
        return self._state.can_come_back(self._selector)

    def expected_s(self, rung: str, kind: str, now: float) -> float:
        """Seconds until a new request's answer (``kind`` ``answer``) or first piece
        (``first``) on ``rung``, from its queue and service time."""
        if self._book is None:
            return 0.0
        return self._book.expected_s(rung, self._state.replicas(rung), now, kind)

    def own_s(self, rung: str, kind: str) -> float:
        """Seconds from a place on ``rung`` to the answer or first piece (no queue), with
        the spread a request must allow for (:meth:`LoadBook.own_s`)."""
        return 0.0 if self._book is None else self._book.own_s(rung, kind)

    def has_place(self, rung: str) -> bool:
        """Whether ``rung`` has a free place (a request sent now is taken at once)."""
        return self._book is None or self._book.has_place(rung, self._state.replicas(rung))

    def has_other_compute(self, rung: str, tried: Iterable[str] = ()) -> bool:
        """Whether an eligible compute rung other than ``rung`` and those in ``tried``
        (the walk's excluded rungs) is obtainable: somewhere a request given up on could
        still go. Without ``tried``, a slow last rung would be given up on for rungs the
        walk already left, and the request would cycle until its deadline."""
        return self.best_compute({rung, *tried}) is not None


def next_rung(ladder: Ladder, view: LadderView, exclude: set[str]) -> str | None:
    """The rung a request tries next: the selector's current rung, else the best
    obtainable eligible compute rung not in ``exclude``, else the first cache or shed
    rung not in ``exclude``; ``None`` when nothing is left."""
    current = view.current
    if current is not None and current not in exclude:
        return current
    target = view.best_compute(exclude)
    if target is not None:
        return target
    return next((n for n in view.eligible
                 if n not in exclude and not ladder.rung(n).is_compute), None)


@dataclass
class Walk:
    """The state of one request's walk: rungs tried, attempts, when it gives up waiting.

    Args:
        ladder: The ladder.
        give_up_at: The walk's clock time after which it no longer waits for a rung
            to come back or a warm rung to take it (arrival + ``pending_timeout_s``;
            with a target, waits for a rung to come back end at ``target_at``).
        never: Rungs this request never takes (compute rungs that do not generate text,
            for a stream).
        target_at: The walk's clock time by which the request should be answered (or
            its first piece sent, ``kind`` ``first``); ``None``: no latency target.
        kind: ``answer`` (a whole answer) or ``first`` (a stream's first piece).
    """

    ladder: Ladder
    give_up_at: float
    never: frozenset[str] = frozenset()
    target_at: float | None = None
    kind: str = "answer"
    tried: set[str] = field(default_factory=set)
    attempts: list[Attempt] = field(default_factory=list)
    waits: int = 0
    #: Least seconds a spilled rung would have been late by (sizes ``Retry-After``).
    late_by_s: float | None = None
    #: The rungs the request spilled past, in order.
    spills: list[str] = field(default_factory=list)
    #: When a request queued on the rung it tries leaves that queue to fall back in time.
    leave_at: float | None = None
    #: The rung that time was kept for: it is tried then, target or not (the request
    #: is late already; a late answer beats a 503).
    reserved: str | None = None

    @property
    def excluded(self) -> set[str]:
        """Rungs the next step may not pick: tried ones and those never taken."""
        return self.tried | self.never

    def _plan_leave(self, rung: str, reserve_s: float, view: LadderView) -> None:
        """A request queued on ``rung`` under a target leaves its queue in time to fall
        back to the rung below (kept as ``reserved``); the reserved rung is waited for."""
        if rung == self.reserved or not reserve_s or self.target_at is None:
            self.leave_at = None
            return
        self.leave_at = self.target_at - reserve_s
        self.reserved = view.best_compute(self.excluded)

    @property
    def spilled(self) -> bool:
        """Whether a rung was passed over because it would miss the target."""
        return self.late_by_s is not None

    def facts(self, view: LadderView, now: float) -> Facts:
        """Read what :func:`decide` needs from ``view`` at ``now``."""
        name = next_rung(self.ladder, view, self.excluded)
        if self.target_at is None or name is None or not self.ladder.rung(name).is_compute:
            return Facts(name, view.can_come_back())
        reserve = 0.0
        if not view.has_place(name):
            below = view.best_compute(self.excluded | {name})
            reserve = 0.0 if below is None else max(
                RESERVE * view.expected_s(below, self.kind, now),
                view.own_s(below, self.kind), view.own_s(name, self.kind))
        return Facts(name, view.can_come_back(), view.expected_s(name, self.kind, now),
                     reserve)

    def next_step(self, view: LadderView, now: float) -> Step:
        """Decide the next step from ``view`` at ``now`` and record it (rungs that
        would miss the target are spilled over and recorded on the way)."""
        while True:
            facts = self.facts(view, now)
            step = decide(self, facts, now)
            self.record(step, now)
            if isinstance(step, Try):
                self._plan_leave(step.rung, facts.reserve_s, view)
            if not isinstance(step, Spill):
                return step

    def record(self, step: Step, now: float) -> None:
        """Note what ``step`` does to the walk (a rung entered, a wait, the shed answer)."""
        if isinstance(step, Wait):
            self.waits += 1
            self.tried.clear()  # what failed before may be back: ask again
        elif isinstance(step, (Try, FromCache)):
            self.tried.add(step.rung)
        elif isinstance(step, Spill):
            self.tried.add(step.rung)
            self.spills.append(step.rung)
            late = now + step.expected_s - (self.target_at or now)
            self.late_by_s = late if self.late_by_s is None else min(self.late_by_s, late)
            self.attempts.append(Attempt(step.rung, spill_reason(step.expected_s), now,
                                         cause="busy"))
        elif isinstance(step, Shed):
            self.tried.add(step.rung)
            self.attempts.append(Attempt(step.rung, SHED, now, cause="shed"))
        elif not self.attempts:
            self.attempts.append(Attempt(None, NO_RUNG, now, cause="no_rung"))

    def enter(self, rung: str) -> None:
        """A rung the request goes to outside a step (a hedge's copy)."""
        self.tried.add(rung)

    def failed(self, rung: str, reason: str, now: float, *, cause: AttemptCause = "failed",
               error: str | None = None) -> None:
        """``rung`` did not answer the request, for ``reason``; a rung that took it and
        failed (or missed a deadline) ends its target: it is answered, late or not."""
        self.attempts.append(Attempt(rung, reason, now, cause=cause, error=error))
        self.target_at = None if cause in ("failed", "rung_down", "late") else self.target_at

    def cache_missed(self, rung: str, now: float) -> None:
        """The cache rung had no fresh answer for this request."""
        self.attempts.append(Attempt(rung, CACHE_MISS, now, cause="cache_miss"))

    def refusal(self, retry_after_s: float) -> LadderExhaustedError:
        """The error a refused request raises: every attempt, and when to come back
        (``retry_after_s``, or after a spill how late the least busy rung would have
        been: its queue should have drained that much by then; at least 1 s)."""
        late = self.late_by_s
        if late is not None and math.isfinite(late):
            retry_after_s = max(1.0, float(math.ceil(late)))
        return LadderExhaustedError(self.ladder.name, list(self.attempts), retry_after_s)


def spill_reason(expected: float) -> str:
    """The attempt's reason when a rung was passed over for the request's target."""
    when = "no place soon" if math.isinf(expected) else f"about {expected:.2f}s"
    return f"would answer in {when}, past the request's latency target (spilled below)"


def decide(walk: Walk, facts: Facts, now: float) -> Step:
    """The next step of ``walk`` (rules 2-5 of the module doc; rule 1 is in ``facts``).

    Example:
        >>> lad = Ladder.from_dict({"name": "w", "rungs": [{"name": "h100", "num_gpus": 1}]})
        >>> walk = Walk(lad, give_up_at=10.0, target_at=1.0)
        >>> decide(walk, Facts("h100", True, expected_s=1.5), now=0.0)
        Spill(rung='h100', expected_s=1.5)
    """
    name = facts.next_rung
    kind = walk.ladder.rung(name).kind if name is not None else None
    if name is None or kind == "shed":
        until = walk.give_up_at if walk.target_at is None \
            else min(walk.give_up_at, walk.target_at)
        if now < until and facts.can_come_back and not walk.spilled:
            return Wait(until)
        return Exhausted() if name is None else Shed(name)
    if kind == "cache":
        return FromCache(name)
    if facts.expected_s is not None and walk.target_at is not None \
            and name != walk.reserved and now < walk.target_at \
            and now + facts.expected_s + facts.reserve_s > walk.target_at:
        return Spill(name, facts.expected_s)
    return Try(name)


def shed_rung(attempts: Iterable[Attempt]) -> str | None:
    """The shed rung's name when it gave the answer (its attempt's cause), else ``None``.

    Example:
        >>> shed_rung([Attempt("h100", "node died", cause="rung_down"),
        ...            Attempt("shed", SHED, cause="shed")])
        'shed'
    """
    return next((a.rung for a in attempts if a.cause == "shed"), None)
