"""Calls and attempts of ``@ladder_task``'s orchestrated path, and their small helpers."""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import ray
from ray.exceptions import GetTimeoutError

from ray_ladder.cluster import ray_private
from ray_ladder.core.exceptions import Attempt, AttemptCause

#: Batches aim at this much work; tasks longer than it always run one call per attempt.
TARGET_BATCH_S = 0.02
MAX_BATCH = 256
#: How long the orchestrator waits for a large answer to reach its node before answering
#: anyway (the caller then reads it from the rung's node); in steps, to notice a loss.
FETCH_MAX_S = 10.0
FETCH_STEP_S = 0.5
#: Transfers of large answers to the orchestrator's node at once (threads: Ray has no
#: asyncio wait that fetches without reading the value).
FETCH_THREADS = 8

_fetch_pool: ThreadPoolExecutor | None = None


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
        self.lane: Any = None  # its Lane, while queued (lanes.py imports this module)
        self.batch: Batch | None = None
        self.rung: str | None = None  # rung that produced the answer
        self.solo = bool(refs)  # runs in an attempt of its own

    @property
    def done(self) -> bool:
        return self.future.done()


class Batch:
    """One attempt: a streaming task running one or more calls on one rung."""

    __slots__ = ("calls", "gen", "node", "started", "cancel_reason", "cancel_cause", "fall",
                 "clock")

    def __init__(self, calls: list[Call], gen: Any) -> None:
        self.calls = calls
        self.gen = gen
        self.node: str | None = None
        self.started = False
        self.cancel_reason: str | None = None
        self.cancel_cause: AttemptCause = "other"
        self.fall = False
        # Set once the attempt has a slot of its lane: its pending clock runs from then.
        self.clock = asyncio.Event()

    def cancel(self, reason: str, cause: AttemptCause, *, fall: bool = False) -> None:
        """Stop the attempt for ``reason`` (its calls' attempts record it and ``cause``)."""
        self.cancel_reason = reason
        self.cancel_cause = cause
        self.fall = fall
        # Outside any caller's context: from a cancelled actor call Ray ignores it.
        contextvars.Context().run(ray.cancel, self.gen, force=True)


async def value_of(ref: ray.ObjectRef) -> Any:
    """The value of a streamed item: read at once when it is already here (small values
    travel inside the report), awaited otherwise (large ones sit in the node's store)."""
    try:
        return ray.get(ref, timeout=0)
    except GetTimeoutError:
        return await ref


async def deps_ready(deps: list[ray.ObjectRef], started: asyncio.Future[Any]) -> None:
    """Wait until every argument ref is ready, without fetching it here."""
    delay = 0.005
    while not started.done():
        ready, _ = ray.wait(deps, num_returns=len(deps), timeout=0, fetch_local=False)
        if len(ready) == len(deps):
            return
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.2)


def _fetch(ref: ray.ObjectRef) -> Literal["here", "lost", "there"]:
    deadline = time.monotonic() + FETCH_MAX_S
    while True:
        ray.wait([ref], fetch_local=True, timeout=FETCH_STEP_S)
        if ray_private.object_exists(ref, memory_store_only=True):  # an error replaced it
            return "lost"
        if ray_private.object_exists(ref):
            return "here"
        if time.monotonic() >= deadline:
            return "there"


async def fetched_here(ref: ray.ObjectRef) -> Literal["here", "lost", "there"]:
    """Copy a large item into this node's object store without reading it.

    ``"here"``: it is on this node (the driver's: it now outlives the rung's node);
    ``"lost"``: it went with its node (reading it raises); ``"there"``: not here within
    :data:`FETCH_MAX_S` (this node's store is full), it stays on the rung's node.
    """
    global _fetch_pool
    if _fetch_pool is None:
        _fetch_pool = ThreadPoolExecutor(FETCH_THREADS, thread_name_prefix="ladder-fetch")
    return await asyncio.get_running_loop().run_in_executor(_fetch_pool, _fetch, ref)
