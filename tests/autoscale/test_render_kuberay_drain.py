"""A deleted KubeRay worker pod is a preemption notice: run the rendered worker container's
command (KubeRay's ``ray start --block`` through our ``exec``, with the rendered env) as
PID 1 of its own PID namespace, joined to a local head, SIGTERM it as the kubelet does, and
watch Ray's node table report the node draining with a deadline before it goes.

What this cannot check without Kubernetes: the kubelet itself (it sends SIGTERM to the
container's PID 1, then SIGKILL after ``terminationGracePeriodSeconds``) and KubeRay's
operator writing ``$KUBERAY_GEN_RAY_START_CMD`` (built here as its ``pod.go`` builds it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import ray

from ray_ladder import Ladder
from ray_ladder.autoscale.render import RenderOptions, render
from ray_ladder.cluster import ray_private
from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.testing import LocalCluster, wait_until

pytestmark = pytest.mark.ray

DRAIN_S = 8.0
LADDER = Ladder.from_yaml("""
name: drain
rungs:
  - {name: kube, resources: {ladder/kube: 1}}
  - {name: fallback, num_cpus: 1, quality: 0.5}
""")


def kuberay_ray_start(params: dict[str, str]) -> str:
    """``ray start`` as KubeRay 1.7's ``convertParamMap`` writes it (sorted ``--k=v``; "true"
    is a bare flag)."""
    flags = "".join(f" --{k} " if v.lower() == "true" else f" --{k}={v} "
                    for k, v in sorted(params.items()))
    return f"ray start {flags}"


def _worker_group() -> dict:
    doc = render(LADDER, "kuberay", RenderOptions(accelerators={"kube": "cpu"},
                                                  drain_timeout_s=DRAIN_S))
    spec = doc["items"][1]["spec"]
    return next(g for g in spec["workerGroupSpecs"] if g["groupName"] == "kube")


def _isolated() -> bool:
    return bool(shutil.which("unshare") and shutil.which("nsenter")) and subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True
    ).returncode == 0


def _container_process(group: dict, address: str) -> subprocess.Popen[bytes]:
    """The worker container: its command and args (KubeRay's own when it has none), its env,
    KubeRay's generated command."""
    container = group["template"]["spec"]["containers"][0]
    labels = group.get("labels") or dict(
        kv.split("=", 1) for kv in group["rayStartParams"].get("labels", "").split(",") if kv)
    params = {**group["rayStartParams"], "address": address, "block": "true",
              "labels": ",".join(f"{k}={v}" for k, v in labels.items()),
              # What KubeRay derives from the pod's limits, sized for this machine:
              "num-cpus": "1", "memory": str(500 * 2**20),
              "object-store-memory": str(80 * 2**20), "disable-usage-stats": "true"}
    env = {**os.environ, **{e["name"]: e["value"] for e in container.get("env", [])},
           "KUBERAY_GEN_RAY_START_CMD": kuberay_ray_start(params),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "RAY_USAGE_STATS_ENABLED": "0"}
    argv = [*container.get("command", ["/bin/bash", "-c", "--"]),
            *container.get("args", [f"ulimit -n 65536; {kuberay_ray_start(params)}"])]
    if _isolated():
        argv = ["unshare", "--pid", "--fork", "--mount-proc", *argv]  # PID 1, as in a pod
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _pid1(proc: subprocess.Popen[bytes]) -> psutil.Process:
    """The container's PID 1: unshare's child, or the process itself without unshare."""
    root = psutil.Process(proc.pid)
    return root.children()[0] if root.name() == "unshare" else root


def _kubelet_deletes(group: dict, pid1: psutil.Process) -> None:
    """What the kubelet does to a deleted pod: the preStop hook inside the container (if
    any), then SIGTERM to its PID 1."""
    container = group["template"]["spec"]["containers"][0]
    hook = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
    if hook:  # e.g. `ray stop`: only inside the container's PID namespace, never here
        assert _isolated(), "a preStop hook runs only inside the container's namespace"
        subprocess.run(["nsenter", "-t", str(pid1.pid), "-p", "-m", "--", *hook],
                       env={**os.environ, "PATH": f"{Path(sys.executable).parent}:"
                                                  f"{os.environ['PATH']}"},
                       capture_output=True, timeout=60)
    with contextlib.suppress(psutil.NoSuchProcess):
        pid1.send_signal(signal.SIGTERM)


def test_sigterm_to_the_rendered_worker_container_is_a_notice_with_a_deadline():
    group = _worker_group()
    with LocalCluster({}, head={"num_cpus": 2}) as cluster:
        proc = _container_process(group, cluster.address)
        try:
            node_id = wait_until(lambda: next((
                n["NodeID"] for n in ray.nodes() if n["Alive"]
                and n["Labels"].get("ladder.rung") == "kube"), None), 90, 0.2,
                "the worker container's node registered")
            pid1 = _pid1(proc)
            # exec: `ray start` itself is PID 1 (bash would not pass the SIGTERM on).
            assert "start" in pid1.cmdline() and "--block" in pid1.cmdline(), pid1.cmdline()

            @ray.remote(num_cpus=0, resources={"ladder/kube": 1})
            class Busy:  # work on the node, so the drain lasts until its deadline
                def ping(self) -> int:
                    return 1

            busy = Busy.remote()
            assert ray.get(busy.ping.remote(), timeout=60) == 1
            view = CapacityView(LADDER, refresh_interval_s=0.05, follow_hook=False)
            assert view.obtainable()["kube"]
            sent = time.time()
            _kubelet_deletes(group, pid1)
            deadline = wait_until(lambda: ray_private.draining_nodes().get(node_id), DRAIN_S,
                                  0.02, "the SIGTERMed node in the GCS's draining table")
            # DRAIN_S from when `ray start` handled the SIGTERM: after it was sent, before
            # the table showed it (how soon a busy machine runs the handler is Ray's speed)
            assert sent + DRAIN_S - 0.5 <= deadline <= time.time() + DRAIN_S + 0.5
            going = wait_until(lambda: view.snapshot().going_away.get("kube"), 30, 0.05,
                               "the ladder's capacity view sees kube going away")
            assert abs(going - deadline) < 0.5 and not view.obtainable()["kube"]
            proc.wait(timeout=DRAIN_S + 30)  # gone within the rendered grace period
            assert time.time() - sent <= group["template"]["spec"][
                "terminationGracePeriodSeconds"]
            wait_until(lambda: not any(n["Alive"] for n in ray.nodes()
                                       if n["NodeID"] == node_id), 30, 0.1, "node dead")
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


def test_the_command_ray_start_gets_keeps_the_resources_json():
    """eval keeps KubeRay's shell quoting of ``--resources="{...}"``."""
    group = _worker_group()
    cmd = kuberay_ray_start({**group["rayStartParams"], "block": "true"})
    out = subprocess.run(["bash", "-c", 'eval "set -- $CMD"; printf "%s\\n" "$@"'],
                         env={**os.environ, "CMD": cmd}, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    resources = next(a for a in out if a.startswith("--resources="))
    assert json.loads(resources.split("=", 1)[1]) == {"ladder/kube": 1}
