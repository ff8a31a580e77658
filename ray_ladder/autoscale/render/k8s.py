"""Kubernetes renders: a KubeRay RayCluster and a GKE ComputeClass, one entry per rung."""

from __future__ import annotations

import json
import math
from typing import Any

from ray_ladder.autoscale.render import capacity as bought
from ray_ladder.autoscale.render.catalog import CATALOG, rung_hardware
from ray_ladder.autoscale.render.ray_up import NodeTypePlan, RenderOptions, rung_labels
from ray_ladder.core.spec import Ladder, Rung

#: NVIDIA GPU feature discovery labels (GPU operator): vendor-neutral GPU node selectors.
GPU_PRODUCT = "nvidia.com/gpu.product"
MIG_STRATEGY = "nvidia.com/mig.strategy"
#: GKE's accelerator node label (GKE does not run GPU feature discovery by default).
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
_PORTS = [{"containerPort": 6379, "name": "gcs-server"},
          {"containerPort": 8265, "name": "dashboard"},
          {"containerPort": 10001, "name": "client"}]


def _image(opts: RenderOptions, gpu: bool) -> str:
    return f"rayproject/ray:{opts.ray_version}-py311{'-gpu' if gpu else ''}"


def _ray_resources(resources: dict[str, int]) -> str:
    """KubeRay's rayStartParams.resources form: escaped JSON inside double quotes.

    KubeRay pastes the value into a shell command (``--resources=<value>``), so the quotes
    of the JSON must survive the shell: ``"{\\"ladder/h100\\": 1}"``.
    """
    return '"' + json.dumps(resources).replace('"', '\\"') + '"'


def worker_group(rung: Rung, opts: RenderOptions, accelerator: str | None = None
                 ) -> dict[str, Any]:
    """A KubeRay worker group hosting one placement of ``rung`` per pod."""
    hw = rung_hardware(rung, accelerator)
    acc = CATALOG[hw.accelerator]
    gpu = hw.accelerator != "cpu"
    gpus = max(1, int(math.ceil(rung.num_gpus or max(rung.resources.values(), default=1)))) \
        if gpu else 0
    cpus = int(math.ceil(rung.num_cpus)) if rung.num_cpus else (8 if gpu else 2)
    limits: dict[str, str] = {"cpu": str(cpus), "memory": f"{cpus * 4}Gi"}
    selector: dict[str, str] = {}
    tolerations: list[dict[str, str]] = []
    if gpu:
        if hw.mig:
            limits[f"nvidia.com/mig-{hw.mig}"] = "1"  # GPU operator, mixed MIG strategy
            selector[MIG_STRATEGY] = "mixed"
        else:
            limits["nvidia.com/gpu"] = str(gpus)
        if opts.kube == "gke" and acc.gke_type:
            selector[GKE_ACCELERATOR] = acc.gke_type
        elif acc.product:
            selector[GPU_PRODUCT] = acc.product
        tolerations.append({"key": "nvidia.com/gpu", "operator": "Exists",
                            "effect": "NoSchedule"})
    # How the node is bought (spot, reservation, flex-start, block), in the flavor's labels.
    market, market_tolerations = bought.kube_selector(opts.kube, rung, hw.spot)
    selector.update(market)
    tolerations += market_tolerations
    resources = {k: (1 if hw.mig else max(int(math.ceil(v)), 1)) for k, v in
                 rung.resources.items()}
    params = {"labels": ",".join(f"{k}={v}" for k, v in rung_labels(rung).items())}
    if resources:
        params["resources"] = _ray_resources(resources)
    if gpu and not hw.mig:
        params["num-gpus"] = str(gpus)
    pod: dict[str, Any] = {"containers": [{
        "name": "ray-worker", "image": _image(opts, gpu),
        "resources": {"limits": limits, "requests": dict(limits)},
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}}}]}
    if selector:
        pod["nodeSelector"] = selector
    if tolerations:
        pod["tolerations"] = tolerations
    return {"groupName": rung.name, "replicas": 0, "minReplicas": 0,
            "maxReplicas": opts.max_workers, "rayStartParams": params,
            "template": {"metadata": {"labels": {"ladder.rung": rung.name}}, "spec": pod}}


def raycluster(ladder: Ladder, rungs: list[Rung], opts: RenderOptions) -> dict[str, Any]:
    """A KubeRay ``RayCluster`` (ray.io/v1): one worker group per rung, autoscaling on."""
    head_limits = {"cpu": "4", "memory": "16Gi"}
    name = (opts.cluster_name or ladder.name).replace(".", "-").replace("_", "-")[:53]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "ray-ladder"}},
        "spec": {
            "rayVersion": opts.ray_version,
            "enableInTreeAutoscaling": True,
            "autoscalerOptions": {
                "upscalingMode": "Default",
                "idleTimeoutSeconds": int((opts.idle_timeout_minutes or 5) * 60)},
            "headGroupSpec": {
                "rayStartParams": {"num-cpus": "2", "dashboard-host": "0.0.0.0",
                                   "labels": "ladder.node-type=head"},
                "template": {"spec": {"containers": [{
                    "name": "ray-head", "image": _image(opts, False), "ports": _PORTS,
                    "resources": {"limits": head_limits, "requests": dict(head_limits)}}]}}},
            "workerGroupSpecs": [worker_group(r, opts, opts.accelerators.get(r.name))
                                 for r in rungs],
        },
    }


def computeclass(ladder: Ladder, plans: list[NodeTypePlan], opts: RenderOptions
                 ) -> dict[str, Any]:
    """The GKE ``ComputeClass`` with the ladder's rungs as priorities, best first.

    ``whenUnsatisfiable: ScaleUpAnyway`` and ``activeMigration.optimizeRulePriority``
    make GKE fall to the next priority on a stock-out and move pods back up when a
    better one can be had again: the node-level twin of the ray-ladder hook.
    """
    priorities = []
    for p in plans:
        acc = CATALOG[p.hw.accelerator]
        rule: dict[str, Any] = {}
        if p.machine.gpus:
            rule["machineType"] = p.machine.name
            rule["gpu"] = {"type": acc.gke_type, "count": p.machine.gpus}
        else:
            rule["machineFamily"] = p.machine.name.split("-")[0]
            rule["minCores"] = p.machine.cpus
        rule["spot"] = p.hw.spot
        rule.update(bought.computeclass_fields(p.rung))
        priorities.append(rule)
    return {
        "apiVersion": "cloud.google.com/v1",
        "kind": "ComputeClass",
        "metadata": {"name": ladder.name, "labels": {"app.kubernetes.io/part-of": "ray-ladder"}},
        "spec": {
            "description": f"ray-ladder {ladder.name}: "
                           + " > ".join(p.rung.name for p in plans),
            "priorities": priorities,
            "whenUnsatisfiable": "ScaleUpAnyway",
            "activeMigration": {"optimizeRulePriority": True},
            "nodePoolAutoCreation": {"enabled": True},
        },
    }
