"""KubeRay objects around a cluster spec: the ladder's ConfigMap, RayCluster, RayService, RayJob.

Every pod mounts the ladder from a ConfigMap; the head starts the autoscaler hook once its
GCS answers; every Ray container runs KubeRay's own ``ray start`` command with ``exec``, so
``ray start --block`` is the container's PID 1 and gets the kubelet's SIGTERM itself (Ray
then drains the node with a deadline: docs/capacity.md, "A deleted KubeRay pod").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import yaml

from ray_ladder.core.spec import Ladder

#: Where every pod finds the ladder file (the ConfigMap's one key, mounted read-only).
LADDER_DIR = "/etc/ray-ladder"
LADDER_FILE = f"{LADDER_DIR}/ladder.yaml"
#: KubeRay leaves the Ray container's command alone when its pod template says so, and
#: passes the ``ray start`` command it generated in ``$KUBERAY_GEN_RAY_START_CMD``.
OVERWRITE_CMD = "ray.io/overwrite-container-cmd"
ULIMIT = "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}"
#: ``eval`` keeps the quoting of ``--resources="{...}"``; ``exec`` makes ``ray start`` PID 1.
EXEC_RAY_START = 'eval "exec $KUBERAY_GEN_RAY_START_CMD"'
#: The pod's grace period beyond the drain: Ray's teardown after the drain (it stops the
#: raylet, then the node's other processes, gracefully) must end before the SIGKILL.
GRACE_MARGIN_S = 30
#: RayService / RayJob names: KubeRay derives cluster names from them (53 - 6 characters).
MAX_NAME = {"RayCluster": 53, "RayService": 47, "RayJob": 47}
KINDS = ("raycluster", "rayservice", "rayjob")
SERVE_PORT = 8000


def image(repo: str, ray_version: str, gpu: bool) -> str:
    """The image of docker/Dockerfile for ``ray_version``: ``ray-ladder:2.60.0-py311-gpu``."""
    return f"{repo}:{ray_version}-py311{'-gpu' if gpu else ''}"


def object_name(ladder: Ladder, cluster_name: str | None, kind: str) -> str:
    """A DNS-1035 name KubeRay accepts for ``kind`` (RayService/RayJob: at most 47)."""
    name = (cluster_name or ladder.name).lower().replace(".", "-").replace("_", "-")
    return name[:MAX_NAME[kind]].rstrip("-")


def ladder_configmap(ladder: Ladder, name: str) -> dict[str, Any]:
    """The ConfigMap holding the ladder file the pods mount at :data:`LADDER_FILE`."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{name}-ladder",
                         "labels": {"app.kubernetes.io/part-of": "ray-ladder"}},
            "data": {"ladder.yaml": ladder.to_yaml()}}


def mount_ladder(pod: dict[str, Any], name: str) -> None:
    """Add the ladder ConfigMap volume to ``pod`` and mount it in its Ray container."""
    pod.setdefault("volumes", []).append(
        {"name": "ladder", "configMap": {"name": f"{name}-ladder"}})
    pod["containers"][0].setdefault("volumeMounts", []).append(
        {"name": "ladder", "mountPath": LADDER_DIR, "readOnly": True})


def worker_start(drain_timeout_s: float) -> dict[str, Any]:
    """Container fields of a worker: exec'd ``ray start --block`` and the drain timeout.

    ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` is the notice the node gives on SIGTERM
    (Ray 2.60, ``ray/_private/node.py``); no ``preStop: ray stop``, which would SIGTERM the
    raylet first and turn the notice into a plain loss.
    """
    return {"command": ["/bin/bash", "-c", "--"], "args": [f"{ULIMIT}; {EXEC_RAY_START}"],
            "env": [{"name": "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S",
                     "value": f"{drain_timeout_s:g}"}]}


def grace_period_s(drain_timeout_s: float) -> int:
    """``terminationGracePeriodSeconds`` of a worker pod: the drain plus the teardown."""
    return int(math.ceil(drain_timeout_s)) + GRACE_MARGIN_S


def hook_command(static_rungs: list[str]) -> str:
    """The head's autoscaler hook start (``ray-ladder autoscale start``, as ``ray up``'s)."""
    return (f"ray-ladder autoscale start {LADDER_FILE} --address 127.0.0.1:6379"
            + "".join(f" --node-type {r}=" for r in static_rungs))


def head_start(static_rungs: list[str]) -> dict[str, Any]:
    """Container fields of the head: start the hook in the background once the GCS answers."""
    wait = "until ray health-check --address 127.0.0.1:6379 >/dev/null 2>&1; do sleep 2; done"
    return {"command": ["/bin/bash", "-c", "--"],
            "args": [f"{ULIMIT}; ({wait}; {hook_command(static_rungs)}) & {EXEC_RAY_START}"]}


def serve_config_v2(config: Mapping[str, Any]) -> str:
    """``serveConfigV2``: the Serve config's applications, the ladder read from the mount.

    An application's ``args.ladder`` (``ray_ladder.serve:app_builder``) becomes
    :data:`LADDER_FILE`; HTTP listens on 0.0.0.0:8000, where KubeRay's serve Service points.
    """
    out = {k: v for k, v in config.items() if k not in ("applications", "http_options")}
    out["http_options"] = {"host": "0.0.0.0", "port": SERVE_PORT}
    apps = []
    for app in config["applications"]:
        app = dict(app)
        if isinstance(app.get("args"), dict) and "ladder" in app["args"]:
            app["args"] = {**app["args"], "ladder": LADDER_FILE}
        apps.append(app)
    out["applications"] = apps
    return yaml.safe_dump(out, sort_keys=False, width=100)


def wrap(ladder: Ladder, cluster: dict[str, Any], kind: str, name: str,
         serve_config: Mapping[str, Any] | None = None, entrypoint: str | None = None
         ) -> dict[str, Any]:
    """A ``v1`` List: the ladder's ConfigMap, then the ``kind`` object over ``cluster``.

    Raises:
        ValueError: an unknown kind, a RayService without a Serve config, a RayJob
            without an entrypoint.
    """
    meta = {"name": name, "labels": {"app.kubernetes.io/part-of": "ray-ladder"}}
    if kind == "raycluster":
        obj: dict[str, Any] = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                               "metadata": meta, "spec": cluster}
    elif kind == "rayservice":
        if serve_config is None:
            raise ValueError("--kind rayservice needs --serve-config FILE: a Serve config "
                             "(like examples/serve_config.yaml) whose applications become "
                             "serveConfigV2")
        head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
        head["ports"] = [*head["ports"], {"containerPort": SERVE_PORT, "name": "serve"}]
        obj = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": meta,
               "spec": {"serveConfigV2": serve_config_v2(serve_config),
                        "rayClusterConfig": cluster}}
    elif kind == "rayjob":
        if not entrypoint:
            raise ValueError("--kind rayjob needs --entrypoint CMD: the job's command, e.g. "
                             f"'python train.py --ladder {LADDER_FILE}'")
        obj = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta,
               "spec": {"entrypoint": entrypoint, "submissionMode": "K8sJobMode",
                        "shutdownAfterJobFinishes": True, "ttlSecondsAfterFinished": 300,
                        "rayClusterSpec": cluster}}
    else:
        raise ValueError(f"unknown --kind {kind!r}; valid: {list(KINDS)}")
    return {"apiVersion": "v1", "kind": "List",
            "items": [ladder_configmap(ladder, name), obj]}
