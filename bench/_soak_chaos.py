"""The soak's seeded chaos: SIGKILL and re-add rung nodes at random intervals, and kill
a rung replica, the router replica, the orchestrator and the hook once each; throttle a
rung node's processes to half the time for a while (bench/soak.py runs it)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from typing import Any

import psutil
import ray

from ray_ladder.cluster import ray_private
from ray_ladder.testing import LocalCluster

ONCE = ("rung_replica", "router_replica", "orchestrator", "hook", "starve")


def schedule(duration_s: float, seed: int, node_types: list[str]) -> list[tuple[float, str, str]]:
    """``(at, action, target)`` sorted by time: node kills (each re-added 4-10 s later)
    every 12-25 % of the run, and each action of ``ONCE`` at a random moment."""
    rng = random.Random(seed)
    out: list[tuple[float, str, str]] = []
    t = rng.uniform(0.05, 0.12) * duration_s
    while t < 0.8 * duration_s:
        node = rng.choice(node_types)
        out.append((t, "kill_node", node))
        back = t + rng.uniform(4.0, 10.0)
        out.append((back, "add_node", node))
        t = back + rng.uniform(0.08, 0.2) * duration_s
    for action in ONCE:
        out.append((rng.uniform(0.1, 0.85) * duration_s, action, rng.choice(node_types)))
    return sorted(out)


def _pid(handle: Any, timeout_s: float = 60.0) -> int:
    return int(ray.get(handle.__ray_call__.remote(lambda self: os.getpid()),
                       timeout=timeout_s))


def _serve_actor(fragment: str | None, app: str) -> Any:
    """A replica actor of ``app``: of deployment ``fragment``, or (None) of any rung."""
    return _serve_actors(fragment, app)[0]


def _serve_actors(fragment: str | None, app: str) -> list[tuple[Any, str]]:
    """Every replica actor of ``app`` of deployment ``fragment`` (None: of any rung)."""
    names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                   if a["namespace"] == "serve" and a["name"].startswith(f"SERVE_REPLICA::{app}#"))
    if fragment is None:
        names = [n for n in names if "#LadderRouter#" not in n]
    else:
        names = [n for n in names if f"#{fragment}#" in n]
    if not names:
        raise LookupError(f"no replica of {fragment or 'any rung'} in app {app}")
    return [(ray.get_actor(n, namespace="serve"), n) for n in names]


def throttle(node: Any, seconds: float, share: float = 0.5) -> None:
    """Let a node's raylet and workers run only ``share`` of each 0.25 s (SIGSTOP/SIGCONT):
    the node stays alive and answers health checks, slowly, like a CPU-starved VM."""
    procs: list[psutil.Process] = []
    for info in ray_private.raylet_processes(node._node):
        with contextlib.suppress(psutil.NoSuchProcess):
            raylet = psutil.Process(info.process.pid)
            procs += [raylet, *raylet.children(recursive=True)]
    period = 0.25
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            for p in procs:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.send_signal(signal.SIGSTOP)
            time.sleep(period * (1 - share))
            for p in procs:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.send_signal(signal.SIGCONT)
            time.sleep(period * share)
    finally:
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGCONT)


class Chaos:
    """Runs the schedule on the main thread (``add_node`` needs it)."""

    def __init__(self, cluster: LocalCluster, app: str, hook: str, hook_ns: str,
                 orchestrator: Any) -> None:
        self.cluster, self.app = cluster, app
        self.hook, self.hook_ns = hook, hook_ns
        self.orchestrator = orchestrator
        self.log: list[dict[str, Any]] = []
        self._threads: list[threading.Thread] = []

    def do(self, at: float, action: str, target: str) -> None:
        """Run one scheduled action; log what happened (an error is logged, not raised)."""
        called = time.monotonic()
        entry: dict[str, Any] = {"at_s": round(at, 1), "action": action, "target": target}
        try:
            if action == "kill_node":
                nodes = self.cluster.nodes(target)
                entry["done"] = bool(nodes)
                for node in nodes:
                    self.cluster.remove_node(node)  # SIGKILL of the whole node
            elif action == "add_node":
                if not self.cluster.nodes(target):
                    self.cluster.add_node(target)
                entry["done"] = True
            elif action == "rung_replica":
                try:
                    candidates = _serve_actors(target, self.app)
                except LookupError:  # that rung has no replica now: any rung's
                    candidates = _serve_actors(None, self.app)
                for handle, name in candidates:  # one on a killed node never answers
                    try:
                        pid = _pid(handle, timeout_s=2.0)
                    except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
                        continue
                    os.kill(pid, signal.SIGKILL)
                    entry["target"], entry["done"] = name.split("#")[1], True
                    break
                else:
                    raise LookupError(f"no live replica of {target} or of any rung")
            elif action == "router_replica":
                os.kill(_pid(_serve_actor("LadderRouter", self.app)[0]), signal.SIGKILL)
                entry["target"], entry["done"] = "LadderRouter", True
            elif action == "orchestrator":
                os.kill(_pid(self.orchestrator), signal.SIGKILL)
                entry["target"], entry["done"] = "orchestrator", True
            elif action == "hook":
                os.kill(_pid(ray.get_actor(self.hook, namespace=self.hook_ns)), signal.SIGKILL)
                entry["target"], entry["done"] = self.hook, True
            elif action == "starve":
                nodes = self.cluster.nodes(target) or [
                    n for n in self.cluster.nodes() if n.type != "head"]
                if nodes:
                    entry["target"] = nodes[0].type
                    t = threading.Thread(target=throttle, args=(nodes[0], 8.0), daemon=True)
                    t.start()
                    self._threads.append(t)
                entry["done"] = bool(nodes)
        except Exception as err:  # the soak reports it; the schedule goes on
            entry["done"], entry["error"] = False, f"{type(err).__name__}: {err}"
        entry["done_at_s"] = round(at + time.monotonic() - called, 3)  # the kill's moment
        self.log.append(entry)

    def join(self) -> None:
        for t in self._threads:
            t.join(timeout=30)
