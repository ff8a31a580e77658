"""A request's race: its rung, and a copy to another rung when that one is slow to take it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

from ray_ladder.core.exceptions import Attempt
from ray_ladder.core.selector import Selector
from ray_ladder.serve.calls import Pending, RungCaller
from ray_ladder.serve.core import RouterState
from ray_ladder.serve.errors import RungFailed
from ray_ladder.serve.metrics import LadderMetrics


class Hedging:
    """The router's calls to rung deployments, hedged (a part of ``LadderRouter``).

    A request goes to the rung its selector picked. When no replica of that rung takes
    it within ``assign_timeout_s`` and the rung answered nobody else meanwhile (so it is
    not merely busy), a copy goes to the next rung (:meth:`RouterState.hedge_target`);
    the first answer wins and the ladder does not move for it. Each copy is counted
    (``ladder_hedges{rung}``: the rung that was slow), so that a user sees how many
    requests paid the hedge's wait.
    """

    _caller: RungCaller
    _state: RouterState
    _metrics: LadderMetrics

    def _failed(self, rung: str, reason: str) -> None:
        raise NotImplementedError  # LadderRouter: mark the rung down, move the selectors

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        raise NotImplementedError  # LadderRouter: run it in the background, keep a ref

    def _start(self, rung: str, payload: Any, selector: Selector) -> Pending:
        return self._caller.start(
            rung, payload, warm=self._state.is_warm(rung),
            elsewhere=lambda: self._state.has_other_compute(selector, rung))

    async def _race(self, name: str, payload: Any, selector: Selector,
                    attempts: list[Attempt], tried: set[str]) -> tuple[Any, str]:
        """Answer from ``name``, or from the rung a copy went to when ``name`` was slow
        to take the request (a hedge: the ladder does not move for it)."""
        loop = asyncio.get_running_loop()
        primary = self._start(name, payload, selector)
        racing = [primary]
        hedge_at = loop.time() + self._caller.assign_timeout_s
        hedged = False
        try:
            while racing:
                waits: set[asyncio.Future[Any]] = {p.task for p in racing}
                timeout = None
                if not hedged and primary in racing and not primary.assigned.done():
                    waits.add(primary.assigned)
                    timeout = max(0.0, hedge_at - loop.time())
                done, _ = await asyncio.wait(waits, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                for pending in [p for p in racing if p.task in done]:
                    racing.remove(pending)
                    try:
                        return pending.task.result(), pending.rung
                    except RungFailed as failed:
                        attempts.append(Attempt(pending.rung, failed.reason, time.time()))
                        self._failed(pending.rung, failed.reason)
                if not done and not hedged and primary in racing:
                    if self._caller.alive_within(name, self._caller.assign_timeout_s):
                        # The rung takes or answers others: it is busy, not gone; a
                        # copy would only add load. Look again after another window.
                        hedge_at = loop.time() + self._caller.assign_timeout_s
                        continue
                    hedged = True
                    target = self._state.hedge_target(selector, tried)
                    if target is not None:
                        tried.add(target)
                        self._metrics.hedged(name)
                        racing.append(self._start(target, payload, selector))
            raise RungFailed("every rung tried failed")
        finally:
            for pending in racing:
                if pending is primary and not primary.assigned.done():
                    self._spawn(self._settle(primary))  # its fate tells whether it is gone
                else:
                    pending.cancel()

    async def _settle(self, pending: Pending) -> None:
        """Follow a request we no longer need until it is taken (cancel it: the rung is
        alive) or fails (the rung is gone)."""
        await asyncio.wait((pending.task, pending.assigned),
                           return_when=asyncio.FIRST_COMPLETED)
        pending.cancel()
        if pending.task.done() and not pending.task.cancelled():
            error = pending.task.exception()
            if isinstance(error, RungFailed):
                self._failed(pending.rung, error.reason)
