"""Kubernetes renders: a KubeRay cluster spec and a GKE ComputeClass, one entry per rung."""

from __future__ import annotations

import json
import math
from typing import Any

from ray_ladder.autoscale.render import capacity as bought
from ray_ladder.autoscale.render import kuberay
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
    return kuberay.image(opts.image, opts.ray_version, gpu)


def _ray_resources(resources: dict[str, int]) -> str:
    """KubeRay's rayStartParams.resources form: escaped JSON inside double quotes.

    KubeRay pastes the value into a shell command (``--resources=<value>``), so the quotes
    of the JSON must survive the shell: ``"{\\"ladder/h100\\": 1}"``.
    """
    return '"' + json.dumps(resources).replace('"', '\\"') + '"'


def worker_group(rung: Rung, opts: RenderOptions, accelerator: str | None = None,
                 name: str = "ladder") -> dict[str, Any]:
    """A KubeRay worker group hosting one placement of ``rung`` per pod.

    Its pods mount the ladder ConfigMap of cluster ``name``, run ``ray start --block`` as
    PID 1 and drain for ``opts.drain_timeout_s`` when deleted (:mod:`.kuberay`).
    """
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
    params: dict[str, str] = {}
    if resources:
        params["resources"] = _ray_resources(resources)
    if gpu and not hw.mig:
        params["num-gpus"] = str(gpus)
    pod: dict[str, Any] = {
        "terminationGracePeriodSeconds": kuberay.grace_period_s(opts.drain_timeout_s),
        "containers": [{"name": "ray-worker", "image": _image(opts, gpu),
                        **kuberay.worker_start(opts.drain_timeout_s),
                        "resources": {"limits": limits, "requests": dict(limits)}}]}
    kuberay.mount_ladder(pod, name)
    if selector:
        pod["nodeSelector"] = selector
    if tolerations:
        pod["tolerations"] = tolerations
    # Ray labels in the top-level field (KubeRay >= 1.5 refuses rayStartParams.labels).
    return {"groupName": rung.name, "replicas": 0, "minReplicas": 0,
            "maxReplicas": opts.max_workers, "labels": rung_labels(rung),
            "rayStartParams": params,
            "template": {"metadata": {"labels": {"ladder.rung": rung.name},
                                      "annotations": {kuberay.OVERWRITE_CMD: "true"}},
                         "spec": pod}}


def raycluster_spec(rungs: list[Rung], opts: RenderOptions, name: str,
                    static_rungs: list[str]) -> dict[str, Any]:
    """A KubeRay cluster spec (ray.io/v1): one worker group per rung, autoscaling on.

    The head mounts the ladder and starts the autoscaler hook, which never asks for
    ``static_rungs`` (rungs this flavor cannot buy).
    """
    head_limits = {"cpu": "4", "memory": "16Gi"}
    head_pod: dict[str, Any] = {"containers": [{
        "name": "ray-head", "image": _image(opts, False), "ports": list(_PORTS),
        **kuberay.head_start(static_rungs),
        "resources": {"limits": head_limits, "requests": dict(head_limits)}}]}
    kuberay.mount_ladder(head_pod, name)
    return {
        "rayVersion": opts.ray_version,
        "enableInTreeAutoscaling": True,
        "autoscalerOptions": {
            "upscalingMode": "Default",
            "idleTimeoutSeconds": int((opts.idle_timeout_minutes or 5) * 60)},
        "headGroupSpec": {
            "labels": {"ladder.node-type": "head"},
            "rayStartParams": {"num-cpus": "2", "dashboard-host": "0.0.0.0"},
            "template": {"metadata": {"annotations": {kuberay.OVERWRITE_CMD: "true"}},
                         "spec": head_pod}},
        "workerGroupSpecs": [worker_group(r, opts, opts.accelerators.get(r.name), name)
                             for r in rungs],
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
