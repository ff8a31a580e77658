"""The task ladder: ``@ladder_task``, its options, the worker side, the native path and the
orchestrator (see docs/tasks.md). Its retry rules are the pure :mod:`ray_ladder.task.policy`,
which imports no Ray, so this package loads its Ray-facing parts on first use."""

from __future__ import annotations

from ray_ladder._lazy import lazy_getattr

_LAZY = {
    "LadderTask": "ray_ladder.task.decorator",
    "call_info": "ray_ladder.task.decorator",
    "ladder_task": "ray_ladder.task.decorator",
    "last_rung": "ray_ladder.task.decorator",
}

__all__ = ["LadderTask", "call_info", "ladder_task", "last_rung"]

__getattr__ = lazy_getattr("ray_ladder.task", _LAZY, globals())
