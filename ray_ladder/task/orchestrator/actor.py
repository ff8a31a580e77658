"""The per-driver orchestrator actor that runs ``@ladder_task`` calls across rungs."""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter, OrderedDict, deque
from collections.abc import Coroutine
from typing import Any

import ray
from ray import cloudpickle

from ray_ladder.cluster.board import LadderBoard
from ray_ladder.cluster.event_log import log_event, show_events_on_stderr
from ray_ladder.core.events import TransitionEvent
from ray_ladder.task.options import TaskSpec
from ray_ladder.task.orchestrator import recovery
from ray_ladder.task.orchestrator.calls import Call
from ray_ladder.task.orchestrator.nodes import NodeCache
from ray_ladder.task.orchestrator.state import Ports, TaskState

logger = logging.getLogger(__name__)

#: Calls one orchestrator runs at once (more wait in Ray's actor queue).
MAX_CONCURRENCY = 10_000
#: Finished calls whose rung and attempts ``last_rung`` can still report.
INFO_ENTRIES = 100_000
EVENT_ENTRIES = 10_000
REGISTRATION_TIMEOUT_S = 60.0


class LadderOrchestrator:
    """Runs each call's attempt loop: choose a rung, submit, watch, fall, retry.

    One per driver, pinned to the driver's node with ``num_cpus=0``; an async actor, so
    thousands of calls are in flight at once. ``.remote()`` on a ladder task is one
    call of :meth:`run`, whose return value is the function's own value.
    """

    def __init__(self) -> None:
        show_events_on_stderr()
        # _value() calls ray.get(timeout=0) only on items already in this process.
        os.environ.setdefault("RAY_WARN_BLOCKING_GET_INSIDE_ASYNC", "0")
        self.nodes = NodeCache()
        self.tasks: dict[str, TaskState] = {}
        self.stats: Counter[str] = Counter()
        self._waiting: dict[str, asyncio.Event] = {}
        self._failed: dict[str, BaseException] = {}
        self._info: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._events: deque[tuple[str, TransitionEvent]] = deque(maxlen=EVENT_ENTRIES)
        self._monitor: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._ports = Ports(self.nodes, self.emit, self.spawn, self._count, self.refresh_all)
        self._board = LadderBoard("task")  # `ray-ladder status`, calls per rung, gauges

    # --- registration --------------------------------------------------------------------

    async def register(self, key: str, blob: bytes) -> None:
        """Make a task (one option set) known; idempotent.

        The spec comes pickled so that a function this process cannot import fails the
        calls with that error instead of failing this method unseen.
        """
        if key in self.tasks:
            return
        try:
            spec: TaskSpec = cloudpickle.loads(blob)
            if self.nodes.version == 0:
                self.nodes.refresh()
            self.tasks[key] = TaskState(self._ports, key, spec)
        except Exception as err:  # run() reports it to every caller
            logger.exception("cannot register ladder task %s", key)
            self._failed[key] = err
        event = self._waiting.pop(key, None)
        if event is not None:
            event.set()
        if self._monitor is None:
            self._monitor = asyncio.get_running_loop().create_task(self._watch())

    async def _task(self, key: str) -> TaskState:
        task = self.tasks.get(key)
        if task is not None:
            return task
        if key not in self._failed:
            await self._recover(key)
        if key not in self.tasks and key not in self._failed:
            event = self._waiting.setdefault(key, asyncio.Event())
            await asyncio.wait_for(event.wait(), REGISTRATION_TIMEOUT_S)
        if key in self._failed:
            raise self._failed[key]
        return self.tasks[key]

    async def _recover(self, key: str) -> None:
        """After a restart, register ``key`` from the spec its driver kept (recovery.py)."""
        if not ray.get_runtime_context().was_current_actor_reconstructed:
            return
        job_id = ray.get_runtime_context().get_job_id()
        blob = await asyncio.get_running_loop().run_in_executor(
            None, recovery.load_spec, job_id, key)
        if blob is not None and key not in self.tasks:
            self.stats["recovered_tasks"] += 1
            await self.register(key, blob)

    # --- calls ---------------------------------------------------------------------------

    async def run(self, key: str, packed: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
        """Run one call; return its value or raise its error (LadderExhaustedError...).

        Arguments come packed so that ``ObjectRef`` arguments reach the attempt
        unresolved (Ray resolves top-level refs of an actor call before running it).
        """
        return await self._run(key, *packed)

    async def run_args(self, key: str, *args: Any) -> Any:
        """:meth:`run` for positional plain values: Ray's fast argument path, no pickling
        of a tuple. The driver uses it when no argument is an ``ObjectRef``."""
        return await self._run(key, args, {})

    async def _run(self, key: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        task_id = ray.get_runtime_context().get_task_id() or ""
        task = await self._task(key)
        call = Call(args, kwargs, asyncio.get_running_loop().create_future(), task_id)
        self.stats["calls"] += 1
        task.dispatch(call)
        try:
            return await call.future
        except asyncio.CancelledError:
            task.cancel(call)
            raise
        finally:
            self._record(call)
            self._board.call_finished(task.key, task.ladder, call.rung, call.attempts)
            if self._board.unpublished(task.key):  # its first answer: `status` lists it now
                self._observe(task)

    def _record(self, call: Call) -> None:
        info = self._info
        info[call.task_id] = {"rung": call.rung,
                              "attempts": [a.to_dict() for a in call.attempts]}
        if len(info) > INFO_ENTRIES:
            info.popitem(last=False)

    async def info(self, task_id: str) -> dict[str, Any] | None:
        """Rung and attempts of a finished call (by the task id of its ObjectRef)."""
        return self._info.get(task_id)

    # --- events --------------------------------------------------------------------------

    def emit(self, family: str, task: str, event: TransitionEvent) -> None:
        """Keep ``event`` for :meth:`events` and log it (the tasks' ``Ports.emit``)."""
        self._events.append((family, event))
        log_event(event, task=task)

    def _count(self, stat: str) -> None:
        self.stats[stat] += 1

    async def events(self, family: str | None = None) -> list[dict[str, Any]]:
        """Transition events (ladder moves and per-call falls), oldest first."""
        return [e.to_dict() for f, e in self._events if family is None or f == family]

    async def status(self) -> dict[str, Any]:
        """Counters and per-task rung state (for tests, benchmarks and debugging)."""
        return {
            "pid": os.getpid(),  # benchmarks read this process's memory
            "stats": dict(self.stats),
            "tasks": {k: {"name": t.name, "current": t.selector.current,
                          "obtainable": dict(t.obtainable), "congested": sorted(t.congested),
                          "queued": {n: len(lane.queue) for n, lane in t.lanes.items()},
                          "in_flight": {n: len(lane.batches) for n, lane in t.lanes.items()},
                          "ewma_s": t.ewma, "large_answers": t.large_answers}
                      for k, t in self.tasks.items()},
        }

    # --- background ----------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` in the background, keeping a reference until it ends."""
        fut = asyncio.get_running_loop().create_task(coro)
        self._background.add(fut)
        fut.add_done_callback(self._background.discard)

    def refresh_all(self) -> None:
        for task in self.tasks.values():
            task.refresh(force=True)

    async def _watch(self) -> None:
        """Refresh node states every probe interval (off the event loop), then observe."""
        loop = asyncio.get_running_loop()
        while True:
            interval = min((t.probe_s for t in self.tasks.values()), default=1.0)
            await asyncio.sleep(interval)
            try:
                await loop.run_in_executor(None, self.nodes.refresh, interval)
            except Exception:  # keep the last view; the next probe tries again
                logger.warning("ladder capacity refresh failed", exc_info=True)
                continue
            for task in list(self.tasks.values()):
                try:
                    task.tick()
                except Exception:
                    logger.exception("ladder task %s: tick failed", task.name)
                    continue
                self._observe(task)

    def _observe(self, task: TaskState) -> None:
        """Publish ``task``'s status entry (when due), gauges and replica-hours; a failure
        here fails no call and no tick."""
        try:
            self._board.observe(task.key, task.ladder, task.selector,
                                obtainable=task.obtainable, why=task.why_unobtainable(),
                                extra={"source": task.name},
                                replicas={n: len(x.batches) for n, x in task.lanes.items()})
        except Exception:
            logger.exception("ladder task %s: status entry not published", task.name)
