"""One rung's lane in ``@ladder_task``'s orchestrator: queue, batches, the attempt loop."""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from ray.exceptions import RayTaskError, WorkerCrashedError

from ray_ladder.task.orchestrator.calls import (
    MAX_BATCH,
    NODE_DIED_SUSPECT_S,
    NODE_ID,
    SYSTEM_ERRORS,
    TARGET_BATCH_S,
    WORKER_CRASH_SUSPECT_S,
    Batch,
    Call,
    deps_ready,
    value_of,
)
from ray_ladder.task.runner import CallFailed

if TYPE_CHECKING:
    from ray_ladder.task.orchestrator.state import TaskState


class Lane:
    """Calls bound for one rung: at most one attempt in flight per placement that fits."""

    def __init__(self, task: TaskState, rung: str) -> None:
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
        self.task.orch.stats["attempts"] += 1
        self.task.orch.spawn(self.drive(batch))

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
            if not task.lower_obtainable(self.rung):
                # Nothing obtainable below: waiting here is queueing, not hanging.
                self.timer = loop.call_at(now + min(task.pending_timeout_s, task.probe_s),
                                          self._expire)
                return
            call = self.queue.popleft()
            task.retry(call, self.rung, f"not scheduled within {task.pending_timeout_s:g}s "
                       f"({len(self.batches)} attempt(s) ahead)", fall=True)
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
                if batch.cancel_reason is None and task.lower_obtainable(rung):
                    task.congested[rung] = time.monotonic()
                    batch.cancel(f"not scheduled within {pt:g}s", fall=True)
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
            elif isinstance(item.error.cause, task.fallback_on):
                cause = item.error.cause
                task.retry(call, rung, f"{type(cause).__name__}: {cause}", fall=True)
            else:
                task.fail(call, item.error, rung)

    def _failed(self, batch: Batch, rest: list[Call], err: Exception) -> None:
        task, rung = self.task, self.rung
        rest = [c for c in rest if not c.done]
        if not rest:
            return
        name = type(err).__name__
        if batch.cancel_reason is not None:  # we stopped it; whatever Ray says about it
            for call in rest:
                task.retry(call, rung, batch.cancel_reason, fall=batch.fall)
        elif isinstance(err, task.fallback_on):
            for call in rest:
                task.retry(call, rung, f"{name}: {err}", fall=True)
        elif isinstance(err, SYSTEM_ERRORS):
            node = batch.node
            if node is None:
                match = NODE_ID.search(str(err))
                node = match.group(1) if match else None
            if node is not None:
                ttl = WORKER_CRASH_SUSPECT_S if isinstance(err, WorkerCrashedError) \
                    else NODE_DIED_SUSPECT_S
                task.orch.nodes.suspect(node, ttl)
                task.orch.refresh_all()
            where = f" on node {node[:8]}" if node else ""
            for call in rest:
                task.retry(call, rung, f"{name}{where}", fall=False)
        elif isinstance(err, RayTaskError) and batch.started:
            # The stream itself failed (e.g. a value that does not serialize). One call:
            # that is its answer. A batch: run each call alone to learn which one it was.
            if len(batch.calls) == 1:
                task.fail(rest[0], err, rung)
            else:
                for call in rest:
                    call.submitted -= 1
                    call.solo = True
                    task.dispatch(call)
        else:
            for call in rest:
                task.fail(call, err, rung)
