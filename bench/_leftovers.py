"""What a finished run left behind on a Ray cluster (shared by bench/soak.py and
tests/reliability): orchestrators of dead drivers, placement groups, rung resources still
held, task specs of dead jobs in Ray's KV, and demand the autoscaler still sees."""

from __future__ import annotations

from typing import Any

import ray

from ray_ladder.autoscale import sources
from ray_ladder.cluster import ray_private
from ray_ladder.task.orchestrator import recovery

ORCHESTRATOR_PREFIX = "ray-ladder-orchestrator-"


def orchestrators() -> list[str]:
    """Names of the ladder-task orchestrator actors alive now (one per driver)."""
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["name"].startswith(ORCHESTRATOR_PREFIX))


def placement_groups() -> list[str]:
    """Ids of the placement groups not removed."""
    return sorted(pg_id for pg_id, info in ray.util.placement_group_table().items()
                  if info.get("state") != "REMOVED")


def held_resources(prefix: str = "ladder/") -> dict[str, float]:
    """Custom rung resources (``ladder/...``) some task or actor still holds."""
    total, free = ray.cluster_resources(), ray.available_resources()
    return {k: total[k] - free.get(k, 0.0) for k in total
            if k.startswith(prefix) and total[k] - free.get(k, 0.0) > 1e-9}


def spec_keys(job_ids: set[str] | None = None) -> list[str]:
    """Task-spec KV keys (of the given jobs, or all)."""
    keys = [k.decode() for k in ray_private.kv_list(recovery.PREFIX,
                                                      namespace=recovery.KV_NAMESPACE)]
    if job_ids is None:
        return sorted(keys)
    return sorted(k for k in keys if k[len(recovery.PREFIX):].split("/", 1)[0] in job_ids)


def autoscaler_requests() -> list[str]:
    """Ladders whose autoscaler hook still holds a node request."""
    return sorted(k.decode()[len(sources.REQUEST_PREFIX):]
                  for k in ray_private.kv_list(sources.REQUEST_PREFIX,
                                               namespace=sources.KV_NAMESPACE))


def pending_demand() -> list[dict[str, Any]]:
    """Resource demand of pending tasks and actors as the autoscaler (v2 state) sees it;
    ``[]`` where it cannot be read."""
    try:
        status = ray_private.autoscaler_v2_status(ray.get_runtime_context().gcs_address)
    except Exception:
        return []
    summary = getattr(status, "resource_demands", None)
    if summary is None:
        return []
    out = []
    for kind in ("ray_task_actor_demand", "placement_group_demand", "cluster_constraint_demand"):
        for demand in getattr(summary, kind, []):
            for b in demand.bundles_by_count:
                out.append({"kind": kind, "bundle": dict(b.bundle), "count": int(b.count)})
    return out


def leftovers(own_jobs: set[str] | None = None) -> dict[str, Any]:
    """Everything a run could have leaked; every value empty when nothing leaked.

    Args:
        own_jobs: Jobs whose orchestrator may legitimately be alive (the caller's own).
    """
    own = {f"{ORCHESTRATOR_PREFIX}{j}" for j in own_jobs or set()}
    return {
        "orchestrators": [n for n in orchestrators() if n not in own],
        "placement_groups": placement_groups(),
        "held_rung_resources": held_resources(),
        "dead_job_task_specs": [k for k in spec_keys()
                                if k[len(recovery.PREFIX):].split("/", 1)[0]
                                not in (own_jobs or set())],
        "autoscaler_requests": autoscaler_requests(),
        "pending_demand": pending_demand(),
    }
