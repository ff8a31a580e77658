"""Per-rung signals the router's calls wait on: a rung lost (requests in flight give up)
or left after a preemption notice (open streams move). Pure asyncio, no Ray."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class RungSignals:
    """One future per rung, resolved when the rung is signalled.

    ``sticky``: a rung stays signalled until the next :meth:`fire` leaves it out, so a
    wait begun after the signal resolves at once (a rung left after a notice stays left);
    otherwise a signal wakes only those already waiting (a lost rung that comes back is
    a new rung).

    Example:
        >>> async def demo():
        ...     lost = RungSignals()
        ...     waiting = lost.wait("h100")
        ...     lost.fire(["h100"])
        ...     return waiting.done(), lost.wait("h100").done()
        >>> asyncio.run(demo())
        (True, False)
    """

    def __init__(self, sticky: bool = False) -> None:
        self._sticky = sticky
        self._now: set[str] = set()
        self._futures: dict[str, asyncio.Future[None]] = {}

    def fire(self, rungs: Iterable[str]) -> None:
        """Signal ``rungs`` (sticky: exactly these stay signalled)."""
        fired = set(rungs)
        if self._sticky:
            self._now = fired
        for rung in fired:
            future = self._futures.pop(rung, None)
            if future is not None and not future.done():
                future.set_result(None)

    def wait(self, rung: str) -> asyncio.Future[None]:
        """A future resolved at ``rung``'s next signal (at once while a sticky one holds)."""
        future = self._futures.get(rung)
        if future is None or future.done():
            future = asyncio.get_running_loop().create_future()
            self._futures[rung] = future
        if rung in self._now:
            future.set_result(None)
        return future
