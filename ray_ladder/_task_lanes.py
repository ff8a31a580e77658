"""The orchestrated attempt loop of ``@ladder_task``: calls, per-rung lanes and batches."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import deque
from typing import TYPE_CHECKING, Any

import ray
from ray.exceptions import (
    GetTimeoutError,
    LocalRayletDiedError,
    NodeDiedError,
    ObjectLostError,
    OutOfMemoryError,
    RaySystemError,
    RayTaskError,
    TaskUnschedulableError,
    WorkerCrashedError,
)

from ray_ladder._task_runner import CallFailed, make_batch_runner
from ray_ladder.capacity import CapacityView
from ray_ladder.context import RungContext
from ray_ladder.events import Direction, TransitionEvent
from ray_ladder.exceptions import Attempt, LadderExhaustedError
from ray_ladder.selector import Selector
from ray_ladder.task_options import TaskSpec, attempt_options, effective_ladder

if TYPE_CHECKING:
    from ray_ladder._orchestrator import LadderOrchestrator

#: Errors that say the attempt's node or worker went away, not that the function failed.
SYSTEM_ERRORS = (NodeDiedError, WorkerCrashedError, LocalRayletDiedError, RaySystemError,
                 TaskUnschedulableError, ObjectLostError, OutOfMemoryError)
#: Batches aim at this much work; tasks longer than it always run one call per attempt.
TARGET_BATCH_S = 0.02
MAX_BATCH = 256
EWMA_ALPHA = 0.2
#: How long a node that killed an attempt is kept out (until the GCS confirms it dead).
NODE_DIED_SUSPECT_S = 60.0
WORKER_CRASH_SUSPECT_S = 2.0
_NODE_ID = re.compile(r"node ID: ([0-9a-f]{56})")


class Call:
    """One ``.remote()`` call travelling down the ladder."""

    __slots__ = ("args", "kwargs", "deps", "future", "task_id", "attempts", "submitted",
                 "floor", "deadline", "lane", "batch", "rung", "solo")

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                 future: asyncio.Future[Any], task_id: str) -> None:
        self.args = args
        self.kwargs = kwargs
        refs = [a for a in (*args, *kwargs.values()) if isinstance(a, ray.ObjectRef)]
        self.deps: list[ray.ObjectRef] = refs
        self.future = future
        self.task_id = task_id
        self.attempts: list[Attempt] = []
        self.submitted = 0
        self.floor = 0  # lowest rung index this call may still use (after falls)
        self.deadline = math.inf
        self.lane: Lane | None = None
        self.batch: Batch | None = None
        self.rung: str | None = None  # rung that produced the answer
        self.solo = bool(refs)  # runs in an attempt of its own

    @property
    def done(self) -> bool:
        return self.future.done()


class Batch:
    """One attempt: a streaming task running one or more calls on one rung."""

    __slots__ = ("calls", "gen", "node", "started", "cancel_reason", "fall")

    def __init__(self, calls: list[Call], gen: Any) -> None:
        self.calls = calls
        self.gen = gen
        self.node: str | None = None
        self.started = False
        self.cancel_reason: str | None = None
        self.fall = False

    def cancel(self, reason: str, *, fall: bool = False) -> None:
        self.cancel_reason = reason
        self.fall = fall
        ray.cancel(self.gen, force=True)


class TaskState:
    """Routing state of one registered ladder task (one option set).

    The rung of each call comes from the shared :class:`Selector`, observed once per
    capacity refresh and again on every failure it sees; a call that already fell from
    a rung (pending timeout, a ``fallback_on`` error) asks a throwaway selector for the
    best obtainable rung below it, so there is still one decision rule.
    """

    def __init__(self, orch: LadderOrchestrator, key: str, spec: TaskSpec) -> None:
        self.orch = orch
        self.key = key
        self.family = spec.family
        self.name = spec.name
        opts = spec.options
        self.ladder = effective_ladder(spec.ladder, opts.ray)
        self.constraints = opts.constraints
        self.fallback_on = opts.fallback_on
        self.pending_timeout_s = opts.pending_timeout(spec.ladder)
        self.max_attempts = opts.attempts_allowed(spec.ladder)
        self.probe_s = self.ladder.policy.probe_interval_s
        self.index = {r.name: i for i, r in enumerate(self.ladder.rungs)}
        self.selector = Selector(self.ladder, self.constraints, on_event=self._on_event)
        self.view = CapacityView(self.ladder, refresh_interval_s=self.probe_s,
                                 source=orch.nodes.nodes)
        eligible = [r for r in self.ladder.eligible(self.constraints) if r.is_compute]
        contexts = {r.name: RungContext.of(self.ladder, r.name) for r in eligible}
        runner = ray.remote(make_batch_runner(spec.fn, spec.name, contexts))
        self.runners = {r.name: runner.options(num_returns="streaming",
                                               **attempt_options(r, opts.ray, spec.name))
                        for r in eligible}
        self.lanes = {r.name: Lane(self, r.name) for r in eligible}
        self.congested: dict[str, float] = {}  # rung -> when an attempt timed out pending
        self.obtainable: dict[str, bool] = {}
        self.ewma: float | None = None
        self.snapshot: Any = None
        self._seen_version = -1
        self.refresh(force=True)

    # --- capacity and decisions ----------------------------------------------------------

    def _on_event(self, event: TransitionEvent) -> None:
        self.orch.emit(self, event)

    def refresh(self, force: bool = False) -> None:
        """Observe capacity once per node refresh (and on each failure, with ``force``)."""
        nodes = self.orch.nodes
        if not force and self._seen_version == nodes.version:
            return
        self._seen_version = nodes.version
        snap = self.snapshot = self.view.refresh()
        for rung, since in list(self.congested.items()):
            if nodes.refreshed_at > since and snap.rungs[rung].available > 0:
                del self.congested[rung]
        self.obtainable = {n: ok and n not in self.congested
                           for n, ok in snap.obtainable.items()}
        self.selector.observe(self.obtainable, now=time.time())

    def tick(self) -> None:
        """After a node refresh: observe, then move work off rungs that are gone."""
        self.refresh(force=True)
        for lane in self.lanes.values():
            if self.obtainable.get(lane.rung):
                lane.pump()
            else:
                lane.evacuate(f"{lane.rung} became unobtainable")

    def lower_obtainable(self, rung: str) -> bool:
        """Whether an eligible compute rung below ``rung`` is obtainable now."""
        i = self.index[rung]
        return any(self.obtainable.get(n) and self.index[n] > i for n in self.lanes)

    def route(self, call: Call) -> str | None:
        """The rung for ``call`` now, or ``None`` when no eligible rung is obtainable."""
        self.refresh()
        current = self.selector.current
        if current in self.lanes and call.floor <= self.index[current]:
            return current
        if current not in self.lanes:
            return None
        start = max(call.floor, self.index[current])
        mask = {n: ok and self.index[n] >= start for n, ok in self.obtainable.items()}
        pick = Selector(self.ladder, self.constraints).observe(mask, now=0.0).rung
        return pick if pick in self.lanes else None

    def state_of(self, rung: str) -> str:
        """Why ``rung`` is or is not obtainable, for attempt records."""
        if rung in self.congested:
            return "busy: an attempt waited past pending_timeout_s"
        if not self.obtainable.get(rung):
            return "absent: no alive node can host it"
        return f"{self.snapshot.rungs[rung].state}, but above where this call could go"

    # --- calls ---------------------------------------------------------------------------

    def dispatch(self, call: Call, came_from: str | None = None, reason: str = "") -> None:
        """Send ``call`` to the lane of its rung, or fail it with LadderExhaustedError."""
        if call.done:
            return
        if call.submitted >= self.max_attempts:
            self.exhaust(call, f"max_attempts ({self.max_attempts}) reached")
            return
        rung = self.route(call)
        if rung is None:
            self.exhaust(call, "no eligible rung obtainable")
            return
        if came_from is not None:
            a, b = self.index[came_from], self.index[rung]
            direction: Direction | None = "down" if b > a else "up" if b < a else None
            self.orch.emit(self, TransitionEvent(time.time(), self.ladder.name, came_from,
                                                 rung, direction, f"call: {reason}",
                                                 kind="call"))
        self.lanes[rung].enqueue(call)

    def retry(self, call: Call, rung: str, reason: str, *, fall: bool) -> None:
        """Record a failed attempt on ``rung`` and send the call on (one rung down if fall)."""
        if call.done:
            return
        call.attempts.append(Attempt(rung, reason, time.time()))
        if fall:
            call.floor = max(call.floor, self.index[rung] + 1)
        self.dispatch(call, came_from=rung, reason=reason)

    def exhaust(self, call: Call, reason: str) -> None:
        attempts = list(call.attempts)
        tried = {a.rung for a in attempts}
        now = time.time()
        for name in self.lanes:
            if name not in tried:
                attempts.append(Attempt(name, f"not used ({self.state_of(name)})", now))
        attempts.append(Attempt(None, reason, now))
        call.attempts = attempts
        self.fail(call, LadderExhaustedError(self.ladder.name, attempts,
                                             self.ladder.policy.retry_after_s))

    def succeed(self, call: Call, rung: str, value: Any) -> None:
        if not call.done:
            call.rung = rung
            call.future.set_result(value)

    def fail(self, call: Call, err: BaseException, rung: str | None = None) -> None:
        if not call.done:
            call.rung = rung
            call.future.set_exception(err)

    def cancel(self, call: Call) -> None:
        """The caller cancelled: drop the call; stop its attempt if it runs alone."""
        lane, batch = call.lane, call.batch
        if lane is not None and call in lane.queue:
            lane.queue.remove(call)
        if batch is not None and batch.cancel_reason is None \
                and all(c.done for c in batch.calls):
            # Ray's soft cancel does not interrupt a running streaming task: force it.
            batch.cancel("cancelled by the caller")

    def observe_duration(self, seconds: float) -> None:
        e = self.ewma
        self.ewma = seconds if e is None else e + EWMA_ALPHA * (seconds - e)


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
                await _deps_ready(deps, first)
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
            batch.node = await _value(first.result())
            batch.started = True
            item = await _value(await gen.__anext__())
            self._answer(calls, [item] if len(calls) == 1 else item)
            i = len(calls)
            done = await _value(await gen.__anext__())
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
                match = _NODE_ID.search(str(err))
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


async def _value(ref: ray.ObjectRef) -> Any:
    """The value of a streamed item: read at once when it is already here (small values
    travel inside the report), awaited otherwise (large ones sit in the node's store)."""
    try:
        return ray.get(ref, timeout=0)
    except GetTimeoutError:
        return await ref


async def _deps_ready(deps: list[ray.ObjectRef], started: asyncio.Future[Any]) -> None:
    """Wait until every argument ref is ready, without fetching it here."""
    delay = 0.005
    while not started.done():
        ready, _ = ray.wait(deps, num_returns=len(deps), timeout=0, fetch_local=False)
        if len(ready) == len(deps):
            return
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.2)
