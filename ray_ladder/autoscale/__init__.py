"""The autoscaler hook: ask Ray's autoscaler for the best rung the cloud can give."""

from __future__ import annotations

import importlib
from typing import Any

# Pure parts load eagerly; the Ray-facing ones on first use.
from ray_ladder.autoscale.plan import (
    AutoscaleOptions,
    AutoscalePlanner,
    LaunchFailure,
    Plan,
    RungState,
)
from ray_ladder.autoscale.schedule import CapacitySchedule, TraceReplay, Window

_LAZY = {
    "AutoscaleHook": "ray_ladder.autoscale.hook",
    "HookWatcher": "ray_ladder.autoscale.hook",
    "start_hook": "ray_ladder.autoscale.hook",
    "get_hook": "ray_ladder.autoscale.hook",
    "stop_hook": "ray_ladder.autoscale.hook",
    "hook_state": "ray_ladder.autoscale.hook",
    "hook_name": "ray_ladder.autoscale.hook",
    "FakeAutoscalingCluster": "ray_ladder.autoscale.fake_cluster",
    "fake_worker_type": "ray_ladder.autoscale.fake_cluster",
    "StockoutProvider": "ray_ladder.autoscale.provider",
    "render": "ray_ladder.autoscale.render",
}

__all__ = [
    "AutoscaleHook", "AutoscaleOptions", "AutoscalePlanner", "CapacitySchedule",
    "FakeAutoscalingCluster", "HookWatcher", "LaunchFailure", "Plan", "RungState",
    "StockoutProvider", "TraceReplay", "Window", "fake_worker_type", "get_hook", "hook_name",
    "hook_state", "render", "start_hook", "stop_hook",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ray_ladder.autoscale' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
