"""Calls and attempts of ``@ladder_task``'s orchestrated path, and their small helpers."""

from __future__ import annotations

import asyncio
import contextvars
import math
from typing import Any

import ray
from ray.exceptions import GetTimeoutError

from ray_ladder.core.exceptions import Attempt

#: Batches aim at this much work; tasks longer than it always run one call per attempt.
TARGET_BATCH_S = 0.02
MAX_BATCH = 256


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
