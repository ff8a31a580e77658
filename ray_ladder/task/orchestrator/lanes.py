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

from ray_ladder.cluster.errors import is_rung_gone
from ray_ladder.task.orchestrator.calls import (
    MAX_BATCH,
    TARGET_BATCH_S,
    Batch,
    Call,
    deps_ready,
    value_of,
)
from ray_ladder.task.policy import (
    AttemptFailure,
    on_attempt_failure,
    on_call_error,
    on_pending_timeout,
)
from ray_ladder.task.runner import CallFailed


class LaneOwner(Protocol):
    """What a lane needs of its task's state (``TaskState`` provides it; no import)."""

    congested: dict[str, float]

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
    def retry(self, call: Call, rung: str, reason: str, *, fall: bool) -> None: ...
    def succeed(self, call: Call, rung: str, value: Any) -> None: ...
    def fail(self, call: Call, err: BaseException, rung: str | None = None) -> None: ...
    def suspect(self, node_id: str, ttl_s: float) -> None: ...
    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...
    def count(self, stat: str) -> None: ...
    def observe_duration(self, seconds: float) -> None: ...


class Lane:
    """Calls bound for one rung: at most one attempt in flight per placement that fits."""

    def __init__(self, task: LaneOwner, rung: str) -> None:
        self.task = task
        self.rung = rung
        self.queue: deque[Call] = deque()
        self.batches: set[Batch] = set()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_for: Call | None = None

    def limit(self) -> int:
        return max(1, self.task.snapshot.rungs[self.rung].total)

    def enqueue(self, call: Call) -> None:
        call.lane = self
        call.batch = None
        call.deadline = asyncio.get_running_loop().time() + self.task.pending_timeout_s
        self.queue.append(call)
        self.pump()

    def pump(self) -> None:
        while self.queue and len(self.batches) < self.limit():
            calls = self._take()
            if calls:
                self._submit(calls)
        self._arm()

    def _take(self) -> list[Call]:
        q = self.queue
        first = q.popleft()
        if first.done:
            return []
        ewma = self.task.ewma
        if first.solo or ewma is None:
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
            task.retry(self.queue.popleft(), self.rung, action.reason, fall=True)
        self._arm()

    def evacuate(self, reason: str) -> None:
        """The rung is gone: re-route queued calls and cancel attempts not yet started."""
        queued, self.queue = list(self.queue), deque()
        self._arm()
        for call in queued:
            self.task.retry(call, self.rung, reason, fall=False)
        for batch in list(self.batches):
            if not batch.started and batch.cancel_reason is None:
                batch.cancel(reason)

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
                    batch.cancel(action.reason, fall=True)
                    task.refresh(force=True)
                    self.evacuate(f"{rung} busy")
                # Nothing below (or already cancelled): look again a little later.
                deadline = loop.time() + min(pt, task.probe_s)
            batch.node = await value_of(first.result())
            batch.started = True
            item = await value_of(await gen.__anext__())
            self._answer(calls, [item] if len(calls) == 1 else item)
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
            self.batches.discard(batch)
            self.pump()

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
                task.retry(call, rung, action.reason, fall=True)
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
            cancel_falls=batch.fall, fallback=isinstance(err, task.fallback_on),
            rung_gone=is_rung_gone(err), worker_crash=isinstance(err, WorkerCrashedError),
            stream_failed=isinstance(err, RayTaskError) and batch.started, node=batch.node,
            batch_size=len(batch.calls)))
        if action.suspect_node is not None:
            task.suspect(action.suspect_node, action.suspect_ttl_s)
        for call in rest:
            if action.kind in ("fall", "retry"):
                task.retry(call, rung, action.reason, fall=action.kind == "fall")
            elif action.kind == "split":
                call.submitted -= 1
                call.solo = True
                task.dispatch(call)
            else:
                task.fail(call, err, rung)
