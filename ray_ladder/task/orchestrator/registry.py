"""This driver's orchestrator handle: created on first use, pinned to the driver's node."""

from __future__ import annotations

from typing import Any

import ray
from ray import cloudpickle

from ray_ladder.cluster import ray_private
from ray_ladder.task.options import TaskSpec
from ray_ladder.task.orchestrator import recovery
from ray_ladder.task.orchestrator.actor import MAX_CONCURRENCY, LadderOrchestrator

_handles: dict[int, Any] = {}  # core worker identity -> handle (a new ray.init: a new one)
_registered: set[str] = set()


def get_orchestrator() -> Any:
    """This driver's orchestrator handle (created on first use, pinned to this node).

    Ray restarts it when it dies and resubmits the calls in flight (the driver holds
    their arguments): at-least-once, like Ray's task retries (docs/reliability.md).
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not ray.is_initialized():
        ray.init()
    ident = ray_private.core_worker_identity()
    handle = _handles.get(ident)
    if handle is None:
        ctx = ray.get_runtime_context()
        recovery.collect_dead_jobs()
        handle = ray.remote(LadderOrchestrator).options(
            name=f"ray-ladder-orchestrator-{ctx.get_job_id()}",
            get_if_exists=True,
            num_cpus=0,
            max_concurrency=MAX_CONCURRENCY,
            max_restarts=recovery.RESTARTS,
            max_task_retries=recovery.CALL_RETRIES,
            scheduling_strategy=NodeAffinitySchedulingStrategy(ctx.get_node_id(), soft=False),
        ).remote()
        _handles.clear()
        _registered.clear()
        _handles[ident] = handle
    return handle


def ensure_registered(handle: Any, key: str, spec: TaskSpec) -> None:
    """Send ``spec`` to the orchestrator once per option set (no round trip waited on)."""
    if key not in _registered:
        blob = cloudpickle.dumps(spec)
        # Kept for a restarted orchestrator, which reads it when a resubmitted call
        # names this key (recovery.py).
        recovery.save_spec(ray.get_runtime_context().get_job_id(), key, blob)
        handle.register.remote(key, blob)
        _registered.add(key)
