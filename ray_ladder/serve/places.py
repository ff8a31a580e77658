"""The router's own queue for a full rung: places handed out in arrival order.

Serve's handle does not hand a freed place on a full replica to the next queued request:
it polls full replicas with a backoff of 25 ms doubling to 0.5 s, so a queue of requests
in a handle drains in bursts, out of order, and leaves the replica idle between polls.
The router is the rungs' only caller and knows the moment one of its requests ends, so
it keeps the queue itself: a request is sent to the rung only once one of its places
(RUNNING replicas x ``max_ongoing_requests``) is free, and the next one goes the moment
a place frees. A rung with no known place (cold, or its count unknown) is not gated.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Places:
    """Free places per rung, given in arrival order (an asyncio semaphore whose size
    follows the rung's RUNNING replicas).

    Example:
        >>> async def demo():
        ...     places = Places()
        ...     places.set_capacity("h100", 1)
        ...     first = await places.take("h100")
        ...     second = asyncio.ensure_future(places.take("h100"))
        ...     await asyncio.sleep(0)
        ...     waiting = not second.done()
        ...     places.give_back("h100")
        ...     return first, waiting, await second
        >>> asyncio.run(demo())
        (True, True, True)
    """

    def __init__(self) -> None:
        self._capacity: dict[str, int] = {}
        self._used: dict[str, int] = {}
        self._queue: dict[str, deque[asyncio.Future[bool]]] = {}

    def set_capacity(self, rung: str, places: int) -> None:
        """``rung`` has ``places`` places now (0: not gated: every waiter goes on)."""
        self._capacity[rung] = max(0, places)
        self._wake(rung)

    def in_use(self, rung: str) -> int:
        """Places of ``rung`` held by requests now."""
        return self._used.get(rung, 0)

    def waiting(self, rung: str) -> int:
        """Requests waiting for a place on ``rung``."""
        return len(self._queue.get(rung, ()))

    def snapshot(self, rung: str) -> dict[str, int]:
        """JSON-ready queue of ``rung``: places (0: not gated), in use, waiting."""
        return {"places": self._capacity.get(rung, 0), "places_in_use": self.in_use(rung),
                "waiting_for_place": self.waiting(rung)}

    async def take(self, rung: str) -> bool:
        """Wait for a place on ``rung`` (first come, first served). ``True``: a place
        was taken and must be given back (:meth:`give_back`); ``False``: the rung is not
        gated, nothing to give back. Cancelling a waiter leaves the queue cleanly."""
        capacity = self._capacity.get(rung, 0)
        if capacity <= 0:
            return False
        queue = self._queue.setdefault(rung, deque())
        if self._used.get(rung, 0) < capacity and not queue:
            self._used[rung] = self._used.get(rung, 0) + 1
            return True
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        queue.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.give_back(rung)  # granted just as it was cancelled
            elif waiter in queue:
                queue.remove(waiter)
            raise

    def give_back(self, rung: str) -> None:
        """A request that held a place on ``rung`` ended."""
        self._used[rung] = max(0, self._used.get(rung, 0) - 1)
        self._wake(rung)

    def _wake(self, rung: str) -> None:
        queue = self._queue.get(rung)
        capacity = self._capacity.get(rung, 0)
        while queue:
            if capacity > 0 and self._used.get(rung, 0) >= capacity:
                return
            waiter = queue.popleft()
            if waiter.done():
                continue
            gated = capacity > 0
            if gated:
                self._used[rung] = self._used.get(rung, 0) + 1
            waiter.set_result(gated)
