"""Calls from the router to rung deployments: timeouts that tell a dead rung from a busy one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from typing import Any

from ray_ladder.cluster import ray_private
from ray_ladder.serve.deadlines import PieceDeadlines
from ray_ladder.serve.errors import PieceLate, RungFailed, rung_failure
from ray_ladder.serve.load import LoadBook
from ray_ladder.serve.places import Places
from ray_ladder.serve.signals import RungSignals

#: Least silence (seconds) after which a rung with a RUNNING replica has failed a request.
DEAD_AFTER_MIN_S = 5.0


class Pending:
    """One request in flight on one rung.

    Attributes:
        rung: The rung.
        task: Resolves to the answer, or raises :class:`RungFailed` / the user's error.
        assigned: Done once a replica took the request.
    """

    def __init__(self, rung: str, task: asyncio.Task[Any], assigned: asyncio.Future[None]):
        self.rung = rung
        self.task = task
        self.assigned = assigned

    def cancel(self) -> None:
        """Give up on this request (cancels it on the replica too)."""
        self.task.cancel()


class RungCaller:
    """Sends requests to rung deployments through their DeploymentHandles.

    A replica on a dead node shows as a request that no replica takes: Serve keeps
    routing to it until the controller drops it, and the GCS declares it dead only
    after its health checks (about a second). So the router watches how long a request
    waits for a replica:

    * after ``assign_timeout_s`` the router *hedges*: it sends the same request to the
      next obtainable rung as well and keeps the first answer (:meth:`start` and the
      router's race); the ladder does not move for that;
    * after ``max(5 s, 8 x assign_timeout_s)`` (at least ``pending_timeout_s`` for a
      rung with no RUNNING replica, which first has to start one) with no sign of life
      from the rung meanwhile, the rung has failed (:class:`RungFailed` with
      ``timeout``). A replica that took or answered another request in that window is
      alive, so the rung is busy, not gone, and the request keeps its place; so it does
      when no other compute rung could take it.

    The answer itself may take as long as the model needs (``request_timeout_s``). A
    request still in flight when its rung stops being obtainable (:meth:`signal_lost`)
    gives up at once. An open stream whose rung's nodes got a preemption notice moves at
    its next piece once traffic has left that rung (:meth:`signal_leaving`): before the
    kill, where a lost rung's streams move after it.

    Args:
        handles: Rung name -> DeploymentHandle of its deployment.
        assign_timeout_s: Wait for a replica to take a request before hedging.
        request_timeout_s: Wait for an answer once taken (``None``: no limit).
        pending_timeout_s: Wait for a cold rung's replica to start.
        book: Counts requests in flight per rung and times their answers from the moment
            a replica took them (``serve/load.py``; ``None``: not kept).
        clock: The wall clock the book's times are read from.

    Example:
        >>> caller = RungCaller(handles, assign_timeout_s=0.25, request_timeout_s=None,
        ...                     pending_timeout_s=10)  # doctest: +SKIP
        >>> await caller.start("h100", {"prompt": "hi"}, warm=True).task  # doctest: +SKIP
    """

    def __init__(self, handles: Mapping[str, Any], *, assign_timeout_s: float,
                 request_timeout_s: float | None, pending_timeout_s: float,
                 book: LoadBook | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._handles = dict(handles)
        self._ping = {name: h.options(method_name="ladder_ping") for name, h in handles.items()}
        self._streams = {name: h.options(method_name="ladder_generate", stream=True)
                         for name, h in handles.items()}
        self.assign_timeout_s = assign_timeout_s
        self.request_timeout_s = request_timeout_s
        self.pending_timeout_s = pending_timeout_s
        self._last_alive: dict[str, float] = {}
        self._down = RungSignals()
        self._leaving = RungSignals(sticky=True)
        self.book = book
        self._clock = clock
        #: The router's own queue per rung (serve/places.py; gated only with a book).
        self.places = Places()

    def set_replicas(self, replicas: Mapping[str, int]) -> None:
        """RUNNING replicas per rung, as last probed: the places requests queue for."""
        if self.book is None:
            return
        for rung, count in replicas.items():
            self.places.set_capacity(rung, count * self.book.places_per_replica(rung))

    async def _place(self, rung: str, down: asyncio.Future[None],
                     leave_s: float | None = None) -> bool:
        """Wait for a place on ``rung`` in the router's queue (``True``: one was taken
        and is given back when the request ends); RungFailed when the rung goes, or
        (cause ``busy``, not down) when no place freed within ``leave_s``."""
        take = asyncio.ensure_future(self.places.take(rung))
        try:
            done, _ = await asyncio.wait((take, down), timeout=leave_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            take.cancel()
            if take.done() and not take.cancelled() and take.result():
                self.places.give_back(rung)  # handed a place just as it was cancelled
            raise
        if take in done:
            return take.result()
        take.cancel()
        if down in done:
            raise RungFailed("rung went down while the request waited for a place")
        raise RungFailed(f"no place on {rung} within {leave_s:.2f}s (left its queue to "
                         "fall back in time)", timeout=True, cause="busy")

    def alive_within(self, rung: str, seconds: float) -> bool:
        """Whether a replica of ``rung`` took or answered a request or ping in the last
        ``seconds`` (either proves the rung alive)."""
        last = self._last_alive.get(rung)
        return last is not None and asyncio.get_running_loop().time() - last <= seconds

    def signal_lost(self, rungs: Iterable[str]) -> None:
        """``rungs`` stopped being obtainable: requests in flight on them give up now."""
        self._down.fire(rungs)

    def signal_leaving(self, rungs: Iterable[str]) -> None:
        """``rungs`` are going away (a notice) and traffic has left them: open streams
        there move at their next piece (see :meth:`stream`)."""
        self._leaving.fire(rungs)

    def dead_after(self, warm: bool) -> float:
        """Silence after which a rung has failed a request (see the class doc)."""
        # Long on purpose: the GCS and the probe catch dead nodes within about a second,
        # hedges keep requests fast meanwhile; this only has to catch a replica that
        # hangs on a live node, and must not fire on a starved but working one.
        dead = max(DEAD_AFTER_MIN_S, 8 * self.assign_timeout_s)
        return dead if warm else max(dead, self.pending_timeout_s)

    def start(self, rung: str, payload: Any, *, warm: bool,
              elsewhere: Callable[[], bool] = lambda: True) -> Pending:
        """Send ``payload`` to ``rung``; the returned :class:`Pending` resolves to its answer.

        ``elsewhere()`` says whether another compute rung could take the request: when
        none could, silence is not worth giving up on (a dead rung is still left once
        the router sees its node gone).
        """
        assigned: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(self._send(
            self._handles[rung], rung, (payload,), self.dead_after(warm),
            self.request_timeout_s, elsewhere, assigned))
        return Pending(rung, task, assigned)

    async def stream(self, rung: str, request: Any, *, warm: bool, give_up_s: float | None,
                     elsewhere: Callable[[], bool] = lambda: True,
                     late_s: float | None = None,
                     may_move: Callable[[], bool] = lambda: False,
                     leave_s: float | None = None, first_s: float | None = None,
                     silence: bool = False) -> AsyncGenerator[Any, None]:
        """Stream ``request`` from ``rung``'s ``ladder_generate``: the pieces, as they come.

        Raises :class:`RungFailed` when the rung is lost before or during the stream (its
        replica or node died, the probe saw it go, or no replica took the request within
        :meth:`dead_after`); with ``timeout`` when no replica took it within ``give_up_s``
        while the rung showed no sign of life and ``elsewhere()`` (nothing was generated
        yet, so the stream can start on another rung instead). Raises :class:`PieceLate`
        when a piece after the first is ``late_s`` late and ``may_move()`` (another rung
        that would not be slower can continue it; ``silence``: the rung is suspect), or
        when the first piece is ``first_s`` late (from the replica taking the request)
        and ``elsewhere()``: the rung is suspect (``serve/deadlines.py``). RungFailed with
        cause ``notice`` when the rung is left after a preemption notice and
        ``elsewhere()``. Closing the iterator cancels the generation on the replica.
        """
        down = self._down.wait(rung)
        book = self.book
        sent = asyncio.get_running_loop().time()
        ahead = book.sent(rung) if book is not None else 0
        try:
            placed = await self._place(rung, down, leave_s)
        except BaseException as err:
            if book is not None:
                if isinstance(err, RungFailed) and err.cause == "busy":
                    book.left(rung, asyncio.get_running_loop().time() - sent, ahead)
                book.ended(rung)
            raise
        gen = waiting = None
        finished = False
        try:  # from the send on: whatever happens, the place and the count go back
            gen = self._streams[rung].remote(request)
            waiting = asyncio.ensure_future(ray_private.replica_assigned(gen))
            await self._stream_taken(rung, waiting, down, self.dead_after(warm), give_up_s,
                                     elsewhere)
            taken = self._last_alive[rung] = asyncio.get_running_loop().time()
            if book is not None:
                book.taken(rung, taken - sent, ahead)
            first = True
            late = PieceDeadlines(first_s, late_s, silence, may_move)
            async for item in self._pieces(rung, gen, down, late, elsewhere):
                if first and book is not None:
                    book.first_piece(rung, self._since(taken), self._clock())
                first = False
                yield item
            finished = True
            if book is not None:
                book.stream_ended(rung, self._since(taken))
        except (RungFailed, asyncio.CancelledError):
            raise
        except Exception as err:
            failed = rung_failure(err)
            if failed is None:
                raise
            raise failed from err
        finally:
            if waiting is not None:
                waiting.cancel()
            if gen is not None and not finished:
                gen.cancel()
            if book is not None:
                book.ended(rung)
            if placed:
                self.places.give_back(rung)

    @staticmethod
    def _since(start: float) -> float:
        return asyncio.get_running_loop().time() - start

    async def _stream_taken(self, rung: str, waiting: asyncio.Future[Any],
                            down: asyncio.Future[None], dead_s: float,
                            give_up_s: float | None, elsewhere: Callable[[], bool]) -> None:
        """Return once a replica took the stream; raise RungFailed as :meth:`stream` says."""
        loop = asyncio.get_running_loop()
        started = window = loop.time()
        while True:
            wait_s = dead_s if give_up_s is None else min(dead_s, give_up_s)
            done, _ = await asyncio.wait((waiting, down), timeout=wait_s,
                                         return_when=asyncio.FIRST_COMPLETED)
            if waiting in done:
                waiting.result()
                return
            if down in done:
                raise RungFailed("rung went down while the stream waited for a replica")
            if self._last_alive.get(rung, -1.0) >= window or not elsewhere():
                window = loop.time()  # alive (busy), or nowhere else to go: keep waiting
                continue
            if give_up_s is not None and loop.time() - started >= give_up_s:
                raise RungFailed(f"no replica took the stream within {give_up_s:g}s",
                                 timeout=True)
            if loop.time() - started >= dead_s:
                raise RungFailed(f"no replica took the stream within {dead_s:g}s "
                                 "and the rung showed no sign of life meanwhile",
                                 timeout=True)

    async def _pieces(self, rung: str, gen: Any, down: asyncio.Future[None],
                      late: PieceDeadlines = PieceDeadlines.NONE,
                      elsewhere: Callable[[], bool] = lambda: False
                      ) -> AsyncGenerator[Any, None]:
        """The stream's pieces until it ends; RungFailed when the rung goes or is silent,
        PieceLate when a piece is late (``late``'s deadlines), RungFailed ``notice`` when
        the rung is left after a notice and ``elsewhere()``."""
        loop = asyncio.get_running_loop()
        first = True
        leaving: asyncio.Future[None] | None = self._leaving.wait(rung)
        while True:
            nxt: asyncio.Future[Any] = asyncio.ensure_future(gen.__anext__())
            limit = late.first_s if first else late.late_s
            if limit is not None:
                done, _ = await asyncio.wait((nxt, down), timeout=limit,
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done and (elsewhere() if first else late.may_move()):
                    nxt.cancel()
                    raise PieceLate(limit, first=first, suspect=late.silence,
                                    what="silence deadline" if late.silence
                                    else "inter-token target")
            waits = (nxt, down) if leaving is None else (nxt, down, leaving)
            done, _ = await asyncio.wait(waits, timeout=self.request_timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
            first = False
            if leaving is not None and leaving in done and nxt not in done:
                if elsewhere():  # what the engine had not sent yet, the next rung makes
                    nxt.cancel()
                    raise RungFailed("a preemption notice: the stream moved before the "
                                     "kill", cause="notice")
                leaving = None  # nowhere to go: it stays until it ends or the node goes
                done, _ = await asyncio.wait((nxt, down), timeout=self.request_timeout_s,
                                             return_when=asyncio.FIRST_COMPLETED)
            if nxt not in done:
                nxt.cancel()
                if down in done:
                    raise RungFailed("rung went down mid-stream")
                raise RungFailed(f"no piece within {self.request_timeout_s:g}s",
                                 timeout=True)
            try:
                item = nxt.result()
            except StopAsyncIteration:
                return
            self._last_alive[rung] = loop.time()
            yield item

    async def ping(self, rung: str, timeout_s: float) -> None:
        """Reach a replica of ``rung`` (starts one on a cold rung; warms the handle)."""
        assigned: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._send(self._ping[rung], rung, (), timeout_s, timeout_s, lambda: True,
                         assigned, counted=False)

    async def _until_taken(self, rung: str, waiting: asyncio.Future[Any],
                           down: asyncio.Future[None], dead_s: float,
                           elsewhere: Callable[[], bool]) -> Any:
        """The replica's result once one took the request; RungFailed when the rung
        went down, or stayed silent ``dead_s`` while another rung could take it."""
        loop = asyncio.get_running_loop()
        window = loop.time()
        while True:
            done, _ = await asyncio.wait((waiting, down), timeout=dead_s,
                                         return_when=asyncio.FIRST_COMPLETED)
            if waiting in done:
                return waiting.result()
            if down in done:
                raise RungFailed("rung went down while the request waited for a replica")
            if self._last_alive.get(rung, -1.0) < window and elsewhere():
                raise RungFailed(f"no replica took the request within {dead_s:g}s "
                                 "and the rung showed no sign of life meanwhile",
                                 timeout=True)
            window = loop.time()

    async def _send(self, handle: Any, rung: str, args: tuple[Any, ...], dead_s: float,
                    answer_s: float | None, elsewhere: Callable[[], bool],
                    assigned: asyncio.Future[None], counted: bool = True) -> Any:
        loop = asyncio.get_running_loop()
        down = self._down.wait(rung)
        book = self.book if counted else None
        sent = loop.time()
        ahead = book.sent(rung) if book is not None else 0
        try:
            placed = counted and await self._place(rung, down)
        except BaseException:
            if book is not None:
                book.ended(rung)
            raise
        response: Any = None
        waiting: asyncio.Future[Any] | None = None
        try:  # from the send on: whatever happens, the place and the count go back
            response = handle.remote(*args)
            # The two halves of `await response`, so the wait for a replica and the wait
            # for the answer get their own limits.
            waiting = asyncio.ensure_future(ray_private.replica_assigned(response))
            replica_result = await self._until_taken(rung, waiting, down, dead_s, elsewhere)
            assigned.set_result(None)
            taken = self._last_alive[rung] = loop.time()
            if book is not None:
                book.taken(rung, taken - sent, ahead)
            waiting = asyncio.ensure_future(replica_result.get_async())
            done, _ = await asyncio.wait((waiting, down), timeout=answer_s,
                                         return_when=asyncio.FIRST_COMPLETED)
            if waiting in done:
                value = waiting.result()
                self._last_alive[rung] = loop.time()
                if book is not None:
                    book.answered(rung, loop.time() - taken, self._clock())
                return value
            if down in done:
                raise RungFailed("rung went down while the request ran")
            raise RungFailed(f"no answer within {answer_s:g}s", timeout=True)
        except (RungFailed, asyncio.CancelledError):
            if waiting is not None:
                waiting.cancel()
            if response is not None:
                response.cancel()
            raise
        except Exception as err:
            failed = rung_failure(err)
            if failed is None:
                raise
            raise failed from err
        finally:
            if not assigned.done():
                assigned.cancel()
            if book is not None:
                book.ended(rung)
            if placed:
                self.places.give_back(rung)
