"""The router's request-walk parts: what both HTTP routes drive (``serve/walk.py`` decides).

:class:`Walker` owns no decision: it reads the clock and the router's state into the
pure walk, runs the step the walk names (a race to a compute rung, a cache look-up, a
wait for the next probe) and counts what happened, the same way for the JSON route
(:meth:`Walker.answer`) and the OpenAI routes
(:class:`~ray_ladder.serve.llm.streams.StreamDriver` drives it piece by piece). It needs
no Ray: tests build one over a :class:`~ray_ladder.serve.fake.FakeRungCaller`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from ray_ladder.cluster.grants import BudgetHold, budget_rungs
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.events import TransitionEvent
from ray_ladder.core.exceptions import BudgetExhaustedError, LadderExhaustedError
from ray_ladder.core.latency import LatencyTargets
from ray_ladder.core.spec import Ladder
from ray_ladder.serve import http
from ray_ladder.serve.cache import AnswerCache, payload_key
from ray_ladder.serve.errors import RungFailed, RungFull
from ray_ladder.serve.hedge import Caller, Race
from ray_ladder.serve.load import LoadBook
from ray_ladder.serve.metrics import LadderMetrics
from ray_ladder.serve.result import LadderResult
from ray_ladder.serve.state import RouterState
from ray_ladder.serve.walk import FromCache, RequestView, Step, Try, Wait, Walk

logger = logging.getLogger("ray_ladder.serve")

#: The share of a request's latency target its walk plans for: the rest is left to the
#: HTTP proxy's hops before the router has the request and after its first piece leaves,
#: which the router cannot time (bench/spill.py: streams that the router held to a 0.5 s
#: first-token target reached the client 5-7 ms late).
PLAN_SHARE = 0.95


class Walker:
    """Runs requests over the pure walk for one ladder app.

    Args:
        state: The router's state (selectors and what they observe).
        caller: Sends requests to rung deployments.
        metrics: The router's metrics.
        cache: The cache rung's answers (``None`` without a cache rung).
        probed: Returns the future the next probe completes (requests that wait on it).
        spawn: Runs a coroutine in the background (keeping a reference).
        clock: The wall clock (the one time seam of the walk).
        llm_rungs: Compute rungs whose class generates text (only these take streams).
        budget: Returns the fleet team's spent budget, or ``None`` (``ok``, no team): a
            request bound for a priced rung waits (``queue``) or is refused with
            :class:`~ray_ladder.BudgetExhaustedError` (``reject``); ``demote`` is the
            capacity view's (docs/teams.md, "Budgets").
        book: The rungs' load (``serve/load.py``): a request with a latency target
            spills past a rung expected to miss it; ``None``: targets are not held.
    """

    def __init__(self, state: RouterState, caller: Caller, metrics: LadderMetrics, *,
                 cache: AnswerCache | None, probed: Callable[[], asyncio.Future[None]],
                 spawn: Callable[[Coroutine[Any, Any, Any]], None],
                 clock: Callable[[], float] = time.time,
                 llm_rungs: frozenset[str] = frozenset(),
                 budget: Callable[[], BudgetHold | None] | None = None,
                 book: LoadBook | None = None) -> None:
        self.ladder: Ladder = state.ladder
        self.llm_rungs = llm_rungs
        self.router_state = state
        self.caller = caller
        self.cache = cache
        self._state, self._caller, self._metrics, self._cache = state, caller, metrics, cache
        self._probed = probed
        self._clock = clock
        self._budget = budget
        self.book = book
        self._costs = {r.name: r.cost_per_hour for r in self.ladder.rungs}
        self._race = Race(caller, is_warm=state.is_warm, failed=self.mark_failed,
                          hedged=metrics.hedged, spawn=spawn, clock=clock)

    def now(self) -> float:
        """The walk's clock."""
        return self._clock()

    def mark_failed(self, rung: str, failed: RungFailed) -> None:
        """``rung`` failed a request or ping: mark it down, move the selectors at once
        (once per cooldown: another request may have reported it already)."""
        self._metrics.attempt_failed(rung, failed.cause, failed.error)
        now = self._clock()
        if self._state.is_down(rung, now):
            return  # another request already reported it; the selectors moved then
        decision = self._state.mark_down(rung, failed.reason, now, failed.retry_after_s)
        self._caller.signal_lost(self._state.lost)
        self._metrics.decision(decision)
        logger.warning("rung %s failed a request (%s); marked down", rung, failed.reason)

    def mark_slow(self, rung: str, reason: str, until: float, now: float) -> None:
        """The load book found ``rung`` slow: the selectors fall off it until ``until``."""
        decision = self._state.mark_slow(rung, reason, until, now)
        self._metrics.slow(rung, TransitionEvent(now, self.ladder.name, rung, None, None,
                                                 f"{rung} is slow: {reason}", kind="call",
                                                 cause="slow"))
        self._metrics.decision(decision)
        logger.warning("rung %s is slow (%s); retried in %.1fs", rung, reason, until - now)

    def start_walk(self, constraints: Constraints | None,
                   never: frozenset[str] = frozenset(), *, target_s: float | None = None,
                   kind: str = "answer") -> tuple[Walk, RequestView]:
        """A new request's walk and its view of the ladder; with ``target_s`` (seconds
        to its answer, ``kind`` ``answer``, or first piece, ``first``) it spills past
        rungs expected to miss it and waits at most that long for a rung to come back
        (the walk plans for ``PLAN_SHARE`` of it)."""
        now = self._clock()
        selector = self._state.selector(constraints, now)
        if self.book is None:
            target_s = None
        walk = Walk(self.ladder, give_up_at=now + self.ladder.policy.pending_timeout_s,
                    never=never, kind=kind,
                    target_at=None if target_s is None else now + PLAN_SHARE * target_s)
        return walk, RequestView(self._state, selector, self.book)

    def next_step(self, walk: Walk, view: RequestView) -> Step:
        """The walk's next step at the router's clock (a spent ``queue`` budget turns a
        priced rung's ``Try`` into a ``Wait``; ``reject`` raises).

        Raises:
            BudgetExhaustedError: the team's budget is spent and it rejects.
            LadderExhaustedError: a queued request reached its deadline.
        """
        now = self._clock()
        spilled = len(walk.spills)
        step = walk.next_step(view, now)
        for rung in walk.spills[spilled:]:
            self._metrics.spilled(rung)
            if self.book is not None:
                self.book.spilled(rung, now)
        hold = self._budget() if self._budget is not None else None
        if hold is None or hold.action == "demote" or not isinstance(step, Try) \
                or not budget_rungs(hold.action, self._costs, [step.rung], {}):
            return step
        walk.tried.discard(step.rung)  # it did not run
        if hold.action == "queue" and now < walk.give_up_at:
            wait = Wait(walk.give_up_at if hold.until is None
                        else max(now, min(walk.give_up_at, hold.until)))
            walk.record(wait, now)
            return wait
        walk.failed(step.rung, hold.reason(now), now, cause="budget")
        retry = hold.retry_after_s(now, self.ladder.policy.retry_after_s)
        err = BudgetExhaustedError(self.ladder.name, list(walk.attempts), retry,
                                   team=hold.team, until=hold.until) \
            if hold.action == "reject" else walk.refusal(retry)
        self._metrics.request(http.refused_by(err))
        raise err

    async def wait(self, step: Wait) -> None:
        """Wait for the next probe, at most until ``step.until`` (a rung may be back)."""
        left = step.until - self._clock()
        if left > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._probed()), timeout=left)

    def refuse(self, walk: Walk) -> LadderExhaustedError:
        """The walk ended in the shed rung or exhaustion: count it, return the error."""
        err = walk.refusal(self.ladder.policy.retry_after_s)
        self._metrics.request(http.refused_by(err))
        return err

    def served(self, rung: str) -> None:
        """Count one answer of ``rung`` (compute or cache)."""
        self._metrics.request(rung)

    def rung_failed(self, walk: Walk, rung: str, failed: RungFailed) -> None:
        """``rung`` failed the request: note it in the walk; unless it only was silent
        (a timeout: it may be busy), mark it down and move the selectors at once."""
        walk.failed(rung, failed.reason, self._clock(), cause=failed.cause,
                    error=failed.error)
        if failed.suspect or not (failed.timeout or failed.cause in ("late", "notice")):
            self.mark_failed(rung, failed)  # new requests avoid it at once
        else:  # a late piece, a notice (moved a stream) or silence (may be busy): not down
            self._metrics.attempt_failed(rung, failed.cause)

    def hedged(self, rung: str) -> None:
        """A request ``rung`` was slow to take went to another rung instead."""
        self._metrics.hedged(rung)

    def cached(self, walk: Walk, rung: str, key: Any,
               constraints: Constraints | None) -> Any:
        """The cache rung's fresh answer to the request, or ``None`` (noted in the walk)."""
        now = self._clock()
        hit = self._cache.get(key, constraints, now) \
            if self._cache is not None and key is not None else None
        if hit is None:
            walk.cache_missed(rung, now)
        return hit

    def remember(self, key: Any, constraints: Constraints | None, value: Any,
                 rung: str) -> None:
        """Keep ``rung``'s answer for the cache rung."""
        if self._cache is not None and key is not None:
            self._cache.put(key, constraints, value, self.ladder.rung(rung), self._clock())

    async def answer(self, payload: Any, constraints: Constraints | None,
                     targets: LatencyTargets | None = None) -> LadderResult:
        """Answer ``payload`` from the best rung that can; raise when none can.

        The walk (:mod:`ray_ladder.serve.walk`) names each step: a compute rung is raced
        (a copy goes to the next rung when it is slow to take the request); a rung that
        fails it is marked down and the walk goes on; the cache rung answers when it has
        a fresh answer; with only the shed rung or nothing left but a compute rung that
        can come back, the request waits for it up to ``pending_timeout_s``. With a
        whole-answer target (``targets.answer_s``) a rung expected to miss it is passed
        over, and the shed rung answers at once when every rung would.

        Raises:
            LadderExhaustedError: shed, or every eligible rung is gone (every attempt).
        """
        walk, view = self.start_walk(constraints, target_s=targets.answer_s
                                     if targets is not None else None)
        key = payload_key(payload) if self._cache is not None else None
        while True:
            step = self.next_step(walk, view)
            if isinstance(step, Wait):
                await self.wait(step)
            elif isinstance(step, FromCache):
                hit = self.cached(walk, step.rung, key, constraints)
                if hit is not None:
                    self.served(step.rung)
                    return LadderResult(hit.value, step.rung, True,
                                        self._state.degraded_s(constraints), hit.producer.name)
            elif isinstance(step, Try):
                try:
                    value, by = await self._race.run(step.rung, payload, view, walk)
                except RungFailed:  # every rung raced failed and is marked down
                    self._metrics.resent(step.rung)
                    continue
                except RungFull:  # still full at the request's deadline: go on below
                    continue
                self.remember(key, constraints, value, by)
                self.served(by)
                return LadderResult(value, by, False, self._state.degraded_s(constraints))
            else:
                raise self.refuse(walk)
