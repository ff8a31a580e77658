"""The task ladder: ``@ladder_task``, its options, the worker side, the native path and the
orchestrator (see docs/tasks.md)."""

from __future__ import annotations

from ray_ladder.task.decorator import LadderTask, call_info, ladder_task, last_rung

__all__ = ["LadderTask", "call_info", "ladder_task", "last_rung"]
