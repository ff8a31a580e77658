"""A request's race: its rung, and a copy to another rung when that one is slow to take it."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterable
from typing import Any, Protocol

from ray_ladder.serve.calls import Pending
from ray_ladder.serve.errors import RungFailed, RungFull
from ray_ladder.serve.walk import RequestView, Walk


def full_reason(rung: str) -> str:
    """The attempt's reason when no replica of ``rung`` took the request by its deadline."""
    return f"no replica of {rung} took the request within the ladder's pending_timeout_s"


class Caller(Protocol):
    """What the walk needs of the rung caller (:class:`~ray_ladder.serve.calls.RungCaller`;
    :class:`~ray_ladder.serve.fake.FakeRungCaller` in tests)."""

    assign_timeout_s: float

    def start(self, rung: str, payload: Any, *, warm: bool,
              elsewhere: Callable[[], bool] = ...) -> Pending: ...
    def stream(self, rung: str, request: Any, *, warm: bool, give_up_s: float | None,
               elsewhere: Callable[[], bool] = ..., late_s: float | None = ...,
               may_move: Callable[[], bool] = ...,
               leave_s: float | None = ..., first_s: float | None = ...,
               silence: bool = ...) -> AsyncGenerator[Any, None]: ...
    def alive_within(self, rung: str, seconds: float) -> bool: ...
    def signal_lost(self, rungs: Iterable[str]) -> None: ...
    def signal_leaving(self, rungs: Iterable[str]) -> None: ...


class Race:
    """The router's calls to rung deployments, hedged.

    A request goes to the rung its walk picked. When no replica of that rung takes it
    within ``assign_timeout_s`` and the rung answered nobody else meanwhile (so it is not
    merely busy), a copy goes to the next warm rung (``RequestView.hedge_target``; never
    to a cold one); the first answer wins and the ladder does not move for it. A request
    no rung raced has taken by the walk's deadline (arrival + ``pending_timeout_s``; a
    warm rung tried after it gets one ``assign_timeout_s`` window; a cold rung is waited
    for while it starts a replica) leaves their queues (:class:`RungFull`, an attempt
    with cause ``busy``; no rung is marked down) and the walk goes on: a lower rung with
    room, else the shed rung's 503. Each copy is counted (``hedged``:
    ``ladder_hedges{rung}``, the rung that was slow), so a user sees how many requests
    paid the hedge's wait.

    Args:
        caller: Sends requests to rung deployments.
        is_warm: Whether a rung had a running replica at the last probe.
        failed: Called with ``(rung, RungFailed)`` when a rung failed a request.
        hedged: Called with the slow rung when a copy goes elsewhere.
        spawn: Runs a coroutine in the background (keeping a reference).
        clock: Wall clock for the attempts' times.
    """

    def __init__(self, caller: Caller, *, is_warm: Callable[[str], bool],
                 failed: Callable[[str, RungFailed], None], hedged: Callable[[str], None],
                 spawn: Callable[[Coroutine[Any, Any, Any]], None],
                 clock: Callable[[], float] = time.time) -> None:
        self._caller = caller
        self._is_warm = is_warm
        self._failed = failed
        self._hedged = hedged
        self._spawn = spawn
        self._clock = clock

    def _start(self, rung: str, payload: Any, view: RequestView, walk: Walk) -> Pending:
        return self._caller.start(
            rung, payload, warm=self._is_warm(rung),
            elsewhere=lambda: view.has_other_compute(rung, walk.excluded))

    async def run(self, name: str, payload: Any, view: RequestView,
                  walk: Walk) -> tuple[Any, str]:
        """Answer from ``name``, or from the rung a copy went to when ``name`` was slow
        to take the request. Raises :class:`RungFailed` when every rung raced failed
        (each is in ``walk.attempts`` and was reported to ``failed``), :class:`RungFull`
        when no rung raced took it by the walk's deadline (each is in ``walk.attempts``
        with cause ``busy``; none is reported: full is not down)."""
        loop = asyncio.get_running_loop()
        assign_s = self._caller.assign_timeout_s
        # A warm rung past the walk's deadline still gets one window to take the request;
        # a cold one is starting its replica: the request waits for it, as Serve would.
        # A request queued on a full rung under a latency target leaves in time to fall
        # back (walk.leave_at).
        give_up_at = math.inf if not self._is_warm(name) else walk.leave_at \
            if walk.leave_at is not None else max(walk.give_up_at, self._clock() + assign_s)
        primary = self._start(name, payload, view, walk)
        racing = [primary]
        hedge_at = loop.time() + assign_s
        hedged = False
        try:
            while racing:
                waits: set[asyncio.Future[Any]] = {p.task for p in racing}
                wake: list[float] = []
                if not any(p.assigned.done() for p in racing):
                    if give_up_at < math.inf:
                        wake.append(loop.time() + give_up_at - self._clock())
                    if not hedged and primary in racing:
                        waits.add(primary.assigned)
                        wake.append(hedge_at)
                timeout = max(0.0, min(wake) - loop.time()) if wake else None
                done, _ = await asyncio.wait(waits, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                for pending in [p for p in racing if p.task in done]:
                    racing.remove(pending)
                    try:
                        return pending.task.result(), pending.rung
                    except RungFailed as failed:
                        walk.failed(pending.rung, failed.reason, self._clock(),
                                    cause=failed.cause, error=failed.error)
                        self._failed(pending.rung, failed)
                if done or not racing:
                    continue
                if self._full(racing, walk, give_up_at):
                    raise RungFull(name)
                if hedged or primary not in racing or loop.time() < hedge_at:
                    continue
                if self._caller.alive_within(name, assign_s):
                    # The rung takes or answers others: it is busy, not gone; a copy
                    # would only add load. Look again after another window.
                    hedge_at = loop.time() + assign_s
                    continue
                hedged = True
                target = view.hedge_target(walk.excluded)
                if target is not None:
                    walk.enter(target)
                    self._hedged(name)
                    racing.append(self._start(target, payload, view, walk))
            raise RungFailed("every rung tried failed")
        finally:
            for pending in racing:
                if pending is primary and not primary.assigned.done():
                    self._spawn(self._settle(primary))  # its fate tells whether it is gone
                else:
                    pending.cancel()

    def _full(self, racing: list[Pending], walk: Walk, give_up_at: float) -> bool:
        """Past ``give_up_at`` with no rung raced having taken the request: it leaves
        their queues (cancelled, nothing ran) and each gets a ``busy`` attempt."""
        now = self._clock()
        if now < give_up_at - 1e-3 or any(p.assigned.done() for p in racing):
            return False
        for pending in racing:
            pending.cancel()
            walk.failed(pending.rung, full_reason(pending.rung), now, cause="busy")
        racing.clear()
        return True

    async def _settle(self, pending: Pending) -> None:
        """Follow a request we no longer need until it is taken (cancel it: the rung is
        alive) or fails (the rung is gone)."""
        await asyncio.wait((pending.task, pending.assigned),
                           return_when=asyncio.FIRST_COMPLETED)
        pending.cancel()
        if pending.task.done() and not pending.task.cancelled():
            error = pending.task.exception()
            if isinstance(error, RungFailed):
                self._failed(pending.rung, error)
