"""One rung's lane in ``@ladder_task``'s orchestrator: queue, batches, the attempt loop."""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from collections import deque
from collections.abc import Coroutine, Mapping
from typing import Any, Protocol

from ray.exceptions import RayTaskError, WorkerCrashedError
from ray.experimental import get_object_locations

from ray_ladder.cluster import ray_private
from ray_ladder.cluster.errors import is_rung_gone
from ray_ladder.core.exceptions import AttemptCause
from ray_ladder.task.orchestrator.calls import (
    MAX_BATCH,
    TARGET_BATCH_S,
    Batch,
    Call,
    deps_ready,
    fetched_here,
    value_of,
)
from ray_ladder.task.policy import (
    AttemptFailure,
    on_attempt_failure,
    on_call_error,
    on_pending_timeout,
)
from ray_ladder.task.runner import CallFailed
from ray_ladder.task.transfer import LARGE_BYTES, Forward


class LaneOwner(Protocol):
    """What a lane needs of its task's state (``TaskState`` provides it; no import)."""

    congested: dict[str, float]
    large_answers: bool  # answers were large once: every call runs alone (no batching)

    @property
    def snapshot(self) -> Any: ...
    @property
    def ewma(self) -> float | None: ...
    @property
    def pending_timeout_s(self) -> float: ...
    @property
    def probe_s(self) -> float: ...
    @property
    def fallback_on(self) -> tuple[type[BaseException], ...]: ...
    @property
    def runners(self) -> Mapping[str, Any]: ...

    def refresh(self, force: bool = False) -> None: ...
    def lower_obtainable(self, rung: str) -> bool: ...
    def dispatch(self, call: Call, came_from: str | None = None, reason: str = "") -> None: ...
    def retry(self, call: Call, rung: str, reason: str, *, fall: bool,
              cause: AttemptCause, error: str | None = None) -> None: ...
    def succeed(self, call: Call, rung: str, value: Any) -> None: ...
    def fail(self, call: Call, err: BaseException, rung: str | None = None) -> None: ...
    def suspect(self, node_id: str, ttl_s: float) -> None: ...
    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...
    def count(self, stat: str) -> None: ...
    def observe_duration(self, seconds: float) -> None: ...


#: Attempts of calls that run alone which a lane keeps queued in Ray beyond its slots,
#: so that Ray holds the next lease request (and its arguments, fetched to the node) when
#: a slot frees, as it does for plain tasks. Such an attempt waits for the lane's own
#: work, not for a busy rung: its pending clock starts when it gets a slot.
PIPELINE = 1


class Lane:
    """Calls bound for one rung: one attempt running per placement that fits, and up to
    :data:`PIPELINE` more queued in Ray for calls that run alone."""

    def __init__(self, task: LaneOwner, rung: str) -> None:
        self.task = task
        self.rung = rung
        self.queue: deque[Call] = deque()
        self.batches: set[Batch] = set()  # attempts whose Ray task has not ended
        self.waiting: deque[Batch] = deque()  # of those, the ones without a slot yet
        self.timer: asyncio.TimerHandle | None = None
        self.timer_for: Call | None = None

    def limit(self) -> int:
        """Attempts at once: the rung's placements, or a fleet team's granted units."""
        snap = self.task.snapshot
        total = snap.rungs[self.rung].total
        granted = snap.granted.get(self.rung)
        return max(1, total if granted is None else min(total, granted))

    def enqueue(self, call: Call) -> None:
        call.lane = self
        call.batch = None
        call.deadline = asyncio.get_running_loop().time() + self.task.pending_timeout_s
        self.queue.append(call)
        self.pump()

    def pump(self) -> None:
        while self.waiting and len(self.batches) - len(self.waiting) < self.limit():
            self.waiting.popleft().clock.set()  # a slot freed (or the rung grew)
        while self.queue and len(self.batches) < self.limit() + self._extra(self.queue[0]):
            calls = self._take()
            if calls:
                self._submit(calls)
        self._arm()

    def _extra(self, call: Call) -> int:
        """Pipelined attempts allowed for ``call``: none for tiny calls, which batch."""
        ewma = self.task.ewma
        alone = call.solo or self.task.large_answers or ewma is None or ewma >= TARGET_BATCH_S
        return PIPELINE if alone else 0

    def _release(self, batch: Batch) -> None:
        """``batch``'s Ray task ended: its slot goes to the oldest waiting attempt (pump)."""
        for call in batch.calls:  # a call and its attempt refer to each other: a cycle
            if call.batch is batch:  # would keep its answer for the cyclic collector
                call.batch = None
        if batch not in self.batches:
            return
        self.batches.discard(batch)
        if batch in self.waiting:
            self.waiting.remove(batch)
        self.pump()

    def _take(self) -> list[Call]:
        q = self.queue
        first = q.popleft()
        if first.done:
            return []
        ewma = self.task.ewma
        if first.solo or ewma is None or self.task.large_answers:
            return [first]
        size = min(MAX_BATCH, max(1, int(TARGET_BATCH_S / max(ewma, 1e-6))))
        free = max(1, self.limit() - len(self.batches))
        size = min(size, math.ceil((len(q) + 1) / free))
        calls = [first]
        while q and len(calls) < size and not q[0].solo:
            call = q.popleft()
            if not call.done:
                calls.append(call)
        return calls

    def _submit(self, calls: list[Call]) -> None:
        # Submit (and follow) the attempt outside the context of the actor call that
        # happened to trigger it: the attempt serves every call of its batch, so it must
        # not be that call's child task, which Ray would cancel along with that call.
        contextvars.Context().run(self._submit_now, calls)

    def _submit_now(self, calls: list[Call]) -> None:
        layout: list[tuple[int, tuple[str, ...]]] = []
        flat: list[Any] = []
        for call in calls:
            layout.append((len(call.args), tuple(call.kwargs)))
            flat.extend(call.args)
            flat.extend(call.kwargs.values())
            call.submitted += 1
        batch = Batch(calls, self.task.runners[self.rung].remote(self.rung, layout, *flat))
        for call in calls:
            call.batch = batch
        if len(self.batches) - len(self.waiting) < self.limit():
            batch.clock.set()
        else:
            self.waiting.append(batch)
        self.batches.add(batch)
        self.task.count("attempts")
        self.task.spawn(self.drive(batch))

    def _arm(self) -> None:
        """Time the queue head's pending deadline (kept when the head did not change)."""
        head = self.queue[0] if self.queue else None
        if head is self.timer_for and self.timer is not None:
            return
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.timer_for = head
        if head is not None and not math.isinf(self.task.pending_timeout_s):
            self.timer = asyncio.get_running_loop().call_at(head.deadline, self._expire)

    def _expire(self) -> None:
        """Queued calls past their pending deadline fall, when there is a rung to fall to."""
        self.timer = None
        try:
            self._expire_due()
        except Exception as bug:  # never leave a caller waiting
            for call in list(self.queue):
                self.task.fail(call, bug)
            self.queue.clear()

    def _expire_due(self) -> None:
        loop = asyncio.get_running_loop()
        task = self.task
        now = loop.time()
        while self.queue and (self.queue[0].done or self.queue[0].deadline <= now):
            if self.queue[0].done:
                self.queue.popleft()
                continue
            action = on_pending_timeout(task.pending_timeout_s, ahead=len(self.batches),
                                        lower_obtainable=task.lower_obtainable(self.rung))
            if action.kind == "wait":
                self.timer = loop.call_at(now + min(task.pending_timeout_s, task.probe_s),
                                          self._expire)
                return
            task.retry(self.queue.popleft(), self.rung, action.reason, fall=True,
                       cause=action.cause)
        self._arm()

    def evacuate(self, reason: str, cause: AttemptCause) -> None:
        """The rung is gone (``unobtainable``) or busy: re-route queued calls and cancel
        attempts not yet started (their attempts record ``reason`` and ``cause``)."""
        queued, self.queue = list(self.queue), deque()
        self._arm()
        for call in queued:
            self.task.retry(call, self.rung, reason, fall=False, cause=cause)
        for batch in list(self.batches):
            if not batch.started and batch.cancel_reason is None:
                batch.cancel(reason, cause)

    async def drive(self, batch: Batch) -> None:
        """Follow one attempt to its end and settle each of its calls."""
        task, rung = self.task, self.rung
        calls = batch.calls
        gen = batch.gen
        loop = asyncio.get_running_loop()
        i = 0
        pt = task.pending_timeout_s
        try:
            first = asyncio.ensure_future(gen.__anext__())
            deps = [d for c in calls for d in c.deps]
            if deps:  # the pending clock starts once Ray can schedule the attempt
                await deps_ready(deps, first)
            if not batch.clock.is_set():  # queued in Ray behind this lane's own attempts
                await self._wait_for_slot(batch, first)
            # Time in this lane's queue had its own deadline; Ray gets a full window.
            deadline = loop.time() + pt
            while True:
                timeout = None if math.isinf(pt) else max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait({first}, timeout=timeout)
                if done:
                    break
                action = on_pending_timeout(pt, lower_obtainable=task.lower_obtainable(rung))
                if batch.cancel_reason is None and action.kind == "fall":
                    task.congested[rung] = time.monotonic()
                    batch.cancel(action.reason, action.cause, fall=True)
                    task.refresh(force=True)
                    self.evacuate(f"{rung} busy", "busy")
                # Nothing below (or already cancelled): look again a little later.
                deadline = loop.time() + min(pt, task.probe_s)
            batch.node = await value_of(first.result())
            batch.started = True
            # Wait for the attempt's end, not for its answer item: Ray's async read of a
            # pending item fetches it here and deserializes it, which a large answer
            # must not cost. At the end every item is in, so reading refs fetches nothing.
            await gen.completed()
            self._release(batch)  # the rung's worker is free: the next attempt may start
            answer = await gen.__anext__()
            if len(calls) == 1:
                self._answer(calls, [await self._single(answer)])
            else:
                self._answer(calls, await self._items(answer, len(calls)))
            i = len(calls)
            done = await value_of(await gen.__anext__())
            task.observe_duration(done.seconds / len(calls))
        except Exception as err:  # settle every call that has no answer yet
            try:
                self._failed(batch, calls[i:], err)
            except Exception as bug:  # never leave a caller waiting
                for call in calls[i:]:
                    task.fail(call, bug, rung)
        finally:
            self._release(batch)
            self.pump()

    async def _wait_for_slot(self, batch: Batch, first: asyncio.Future[Any]) -> None:
        """A pipelined attempt waits for a slot of the lane (or for Ray to start it).

        Its calls wait behind the lane's own work as queued calls do, so the same rule
        holds: past their deadline they fall when a lower rung can take them.
        """
        loop = asyncio.get_running_loop()
        task = self.task
        slot = asyncio.ensure_future(batch.clock.wait())
        try:
            while batch.cancel_reason is None:
                deadline = min(c.deadline for c in batch.calls)
                timeout = None if math.isinf(deadline) else max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait({first, slot}, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                if done:
                    return
                action = on_pending_timeout(
                    task.pending_timeout_s, ahead=len(self.batches) - len(self.waiting),
                    lower_obtainable=task.lower_obtainable(self.rung))
                if action.kind == "fall":
                    batch.cancel(action.reason, action.cause, fall=True)  # they fall
                    return
                for call in batch.calls:  # nothing below: look again a little later
                    call.deadline = loop.time() + min(task.pending_timeout_s, task.probe_s)
        finally:
            slot.cancel()

    async def _single(self, ref: Any) -> Any:
        """One call's answer: a small value as it is; a large one stays where it is, and
        the call answers with a :class:`Forward` once a copy is on this node."""
        if ray_private.object_exists(ref, memory_store_only=True):
            return await value_of(ref)
        self.task.large_answers = True
        if await fetched_here(ref) == "lost":
            return await value_of(ref)  # raises: the rung is gone, the call runs again
        return Forward(ref)

    async def _items(self, ref: Any, n: int) -> Any:
        """A batch's answers (one list). A large list means large answers: later calls
        run alone, so no answer passes through here again."""
        if not ray_private.object_exists(ref, memory_store_only=True):
            size = get_object_locations([ref]).get(ref, {}).get("object_size") or 0
            if size > n * LARGE_BYTES:
                self.task.large_answers = True
        return await value_of(ref)

    def _answer(self, calls: list[Call], items: list[Any]) -> None:
        task, rung = self.task, self.rung
        for call, item in zip(calls, items, strict=False):
            if type(item) is not CallFailed:
                task.succeed(call, rung, item)
                continue
            cause = item.error.cause
            action = on_call_error(type(cause).__name__, str(cause),
                                   fallback=isinstance(cause, task.fallback_on))
            if action.kind == "fall":
                task.retry(call, rung, action.reason, fall=True, cause=action.cause,
                           error=action.error)
            else:
                task.fail(call, item.error, rung)

    def _failed(self, batch: Batch, rest: list[Call], err: Exception) -> None:
        """Settle the calls of a failed attempt as :func:`on_attempt_failure` decides."""
        task, rung = self.task, self.rung
        rest = [c for c in rest if not c.done]
        if not rest:
            return
        action = on_attempt_failure(AttemptFailure(
            type(err).__name__, str(err), cancelled=batch.cancel_reason,
            cancel_cause=batch.cancel_cause, cancel_falls=batch.fall,
            fallback=isinstance(err, task.fallback_on),
            rung_gone=is_rung_gone(err), worker_crash=isinstance(err, WorkerCrashedError),
            stream_failed=isinstance(err, RayTaskError) and batch.started, node=batch.node,
            batch_size=len(batch.calls)))
        if action.suspect_node is not None:
            task.suspect(action.suspect_node, action.suspect_ttl_s)
        for call in rest:
            if action.kind in ("fall", "retry"):
                task.retry(call, rung, action.reason, fall=action.kind == "fall",
                           cause=action.cause, error=action.error)
            elif action.kind == "split":
                call.submitted -= 1
                call.solo = True
                task.dispatch(call)
            else:
                task.fail(call, err, rung)
