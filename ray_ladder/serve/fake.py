"""A fake rung caller for the Serve walk, shipped with the library (as httpx ships
``MockTransport``): each rung answers, stays silent, fails, or streams pieces as told.

It stands where :class:`~ray_ladder.serve.calls.RungCaller` stands (the seam the real
router sends requests through), so a :class:`~ray_ladder.serve.walker.Walker` over it
runs the real walk, race and stream driver with no Ray.

Example:
    >>> caller = FakeRungCaller({"h100": FakeRung(takes=False), "a100": FakeRung()})
    >>> caller.rung("h100").takes
    False
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ray_ladder.serve.calls import Pending
from ray_ladder.serve.errors import PieceLate, RungFailed


@dataclass
class FakeRung:
    """How one fake rung behaves (change the fields while a test runs).

    Attributes:
        takes: A replica takes requests; ``False`` is a replica on a dead node that Serve
            still routes to: requests wait, unassigned, until given up on.
        answer: What a request returns (default: ``"from <rung>"``).
        fails: A reason: every request and ping fails with :class:`RungFailed` at once.
        error: The error class name of that failure (``cause="failed"``).
        pieces: What a stream yields, piece by piece.
        fail_after: A stream fails ("rung went down mid-stream") after this many pieces
            (after its last piece too, when it has no more: a dropped connection).
        busy: The rung answers others meanwhile (``alive_within`` is true).
        delay_s: Seconds each answer or piece takes.
        take_s: Seconds before a replica takes a request or stream (a busy machine's slow
            assignment; a caller that gives up sooner raises ``RungFailed`` timeout).
        first_s: Seconds more before a stream's first piece (a late first token).
    """

    takes: bool = True
    answer: Any = None
    fails: str | None = None
    error: str | None = None
    pieces: list[Any] = field(default_factory=lambda: ["a", "b", "c"])
    fail_after: int | None = None
    busy: bool = False
    delay_s: float = 0.0
    take_s: float = 0.0
    first_s: float = 0.0


class FakeRungCaller:
    """Sends requests to :class:`FakeRung` s by name; records what was sent.

    Args:
        rungs: Rung name -> behaviour (``None``: the default, answering at once).
        assign_timeout_s: The hedge's wait, as the real caller's.

    Attributes:
        sent: Rungs requests, streams and pings went to, in order (pings as
            ``"ping:<rung>"``).
        lost: Rungs the walk signalled lost.
        streamed: ``(rung, request)`` of every stream, in order.
    """

    def __init__(self, rungs: Mapping[str, FakeRung | None], *,
                 assign_timeout_s: float = 0.05) -> None:
        self._rungs = {name: rung or FakeRung() for name, rung in rungs.items()}
        self.assign_timeout_s = assign_timeout_s
        self.sent: list[str] = []
        self.lost: list[str] = []
        self.leaving: set[str] = set()
        self.streamed: list[tuple[str, Any]] = []

    def rung(self, name: str) -> FakeRung:
        """The behaviour of ``name`` (mutable)."""
        return self._rungs[name]

    def _failure(self, rung: FakeRung) -> RungFailed | None:
        if rung.fails is None:
            return None
        return RungFailed(rung.fails, cause="failed" if rung.error else "rung_down",
                          error=rung.error)

    def start(self, rung: str, payload: Any, *, warm: bool = True,
              elsewhere: Callable[[], bool] = lambda: True) -> Pending:
        """Send ``payload`` to ``rung``: a :class:`Pending` as the real caller returns."""
        self.sent.append(rung)
        behaviour = self._rungs[rung]
        loop = asyncio.get_running_loop()
        assigned: asyncio.Future[None] = loop.create_future()

        async def answer() -> Any:
            failure = self._failure(behaviour)
            if failure is not None:
                raise failure
            if not behaviour.takes:
                await asyncio.Event().wait()  # never taken: the caller gives up on it
            await asyncio.sleep(behaviour.take_s)
            assigned.set_result(None)
            await asyncio.sleep(behaviour.delay_s)
            return f"from {rung}" if behaviour.answer is None else behaviour.answer

        return Pending(rung, loop.create_task(answer()), assigned)

    async def stream(self, rung: str, request: Any, *, warm: bool = True,
                     give_up_s: float | None = None,
                     elsewhere: Callable[[], bool] = lambda: True,
                     late_s: float | None = None,
                     may_move: Callable[[], bool] = lambda: False,
                     leave_s: float | None = None, first_s: float | None = None,
                     silence: bool = False) -> AsyncGenerator[Any, None]:
        """Stream ``rung``'s pieces, at most the request's ``max_tokens`` (as a rung
        does), raising :class:`RungFailed` as the real caller does when lost."""
        self.sent.append(rung)
        self.streamed.append((rung, request))
        behaviour = self._rungs[rung]
        failure = self._failure(behaviour)
        if failure is not None:
            raise failure
        take_s = float("inf") if not behaviour.takes else behaviour.take_s
        if give_up_s is not None and take_s > give_up_s and elsewhere():
            await asyncio.sleep(give_up_s)
            raise RungFailed(f"no replica took the stream within {give_up_s:g}s",
                             timeout=True)
        if not behaviour.takes:
            await asyncio.Event().wait()
        await asyncio.sleep(take_s)
        limit = request.get("max_tokens") if isinstance(request, dict) else None
        pieces = behaviour.pieces if limit is None else behaviour.pieces[:limit]
        for i, piece in enumerate(pieces):
            if behaviour.fail_after is not None and i >= behaviour.fail_after:
                raise RungFailed("rung went down mid-stream")
            delay = behaviour.delay_s + (behaviour.first_s if not i else 0.0)
            if not i and first_s is not None and delay > first_s and elsewhere():
                await asyncio.sleep(first_s)
                raise PieceLate(first_s, first=True)
            if i and late_s is not None and delay > late_s and may_move():
                await asyncio.sleep(late_s)
                raise PieceLate(late_s, suspect=silence, what="silence deadline"
                                if silence else "inter-token target")
            if i and rung in self.leaving and elsewhere():
                raise RungFailed("a preemption notice: the stream moved before the kill",
                                 cause="notice")
            await asyncio.sleep(delay)
            yield piece
        if behaviour.fail_after is not None and behaviour.fail_after >= len(pieces):
            raise RungFailed("rung went down after its last piece")

    async def ping(self, rung: str, timeout_s: float) -> None:
        """Reach ``rung`` (fails as its requests do)."""
        self.sent.append(f"ping:{rung}")
        failure = self._failure(self._rungs[rung])
        if failure is not None:
            raise failure

    def alive_within(self, rung: str, seconds: float) -> bool:
        """Whether ``rung`` answers others (``FakeRung.busy``)."""
        return self._rungs[rung].busy

    def signal_lost(self, rungs: Iterable[str]) -> None:
        """The walk found ``rungs`` no longer obtainable."""
        self.lost.extend(rungs)

    def signal_leaving(self, rungs: Iterable[str]) -> None:
        """Traffic left ``rungs`` after a notice: their open streams move (``elsewhere``)
        at their next piece, as the real caller's do."""
        self.leaving = set(rungs)
