"""The autoscaler hook: ask Ray's autoscaler for the best rung the cloud can give."""

from __future__ import annotations

from ray_ladder._lazy import lazy_getattr
from ray_ladder.autoscale.fake.schedule import CapacitySchedule, TraceReplay, Window

# Pure parts load eagerly; the Ray-facing ones on first use.
from ray_ladder.autoscale.plan import (
    AutoscaleOptions,
    AutoscalePlanner,
    LaunchFailure,
    Plan,
    RungState,
)

_LAZY = {
    "AutoscaleHook": "ray_ladder.autoscale.hook",
    "HookWatcher": "ray_ladder.autoscale.hook",
    "start_hook": "ray_ladder.autoscale.hook",
    "get_hook": "ray_ladder.autoscale.hook",
    "stop_hook": "ray_ladder.autoscale.hook",
    "hook_state": "ray_ladder.autoscale.hook",
    "hook_name": "ray_ladder.autoscale.hook",
    "FakeAutoscalingCluster": "ray_ladder.autoscale.fake.cluster",
    "fake_worker_type": "ray_ladder.autoscale.fake.cluster",
    "StockoutProvider": "ray_ladder.autoscale.fake.provider",
    "render": "ray_ladder.autoscale.render",
}

__all__ = [
    "AutoscaleHook", "AutoscaleOptions", "AutoscalePlanner", "CapacitySchedule",
    "FakeAutoscalingCluster", "HookWatcher", "LaunchFailure", "Plan", "RungState",
    "StockoutProvider", "TraceReplay", "Window", "fake_worker_type", "get_hook", "hook_name",
    "hook_state", "render", "start_hook", "stop_hook",
]


__getattr__ = lazy_getattr("ray_ladder.autoscale", _LAZY, globals())
