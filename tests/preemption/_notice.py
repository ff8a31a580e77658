"""Shared pieces of the preemption-notice tests: HTTP load, a start log, a `ray start` node."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx


class Load:
    """Requests at a steady rate from one thread: (sent at, latency, status, rung) each."""

    def __init__(self, url: str, rate: float = 20.0, max_s: float = 90.0) -> None:
        self.url, self.rate, self.max_s = url, rate, max_s
        self.rows: list[tuple[float, float, int, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        client = httpx.Client(timeout=30)
        start = time.monotonic()
        i = 0
        while not self._stop.is_set() and time.monotonic() - start < self.max_s:
            sent = time.monotonic()
            try:
                r = client.post(self.url, json={"i": i})
                row = (sent, time.monotonic() - sent, r.status_code, r.headers.get("x-ladder-rung"))
            except httpx.HTTPError as err:
                row = (sent, time.monotonic() - sent, -1, type(err).__name__)
            self.rows.append(row)
            i += 1
            self._stop.wait(max(0.0, start + i / self.rate - time.monotonic()))

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def count(self, rung: str, after: float) -> int:
        return sum(1 for r in list(self.rows) if r[3] == rung and r[0] > after)


def p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(0.99 * len(s)))] if s else 0.0


def start_log() -> Any:
    """An actor on the head that records each attempt's start: (key, node id, wall time),
    the time taken by the attempt itself."""
    import ray

    @ray.remote(num_cpus=0)
    class Starts:
        def __init__(self) -> None:
            self.rows: list[tuple[str, str, float]] = []

        def start(self, key: str, node_id: str, at: float) -> None:
            self.rows.append((key, node_id, at))

        def all(self) -> list[tuple[str, str, float]]:
            return list(self.rows)

    return Starts.options(label_selector={"ladder.node-type": "head"}).remote()


class RayStartNode:
    """A worker node started the way a VM or pod starts one: ``ray start --block``.

    Its ``ray start`` process owns the node (raylet, agents) and, in Ray 2.60, handles
    SIGTERM by draining the node with ``DRAIN_NODE_REASON_PREEMPTION`` and a deadline of
    ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` from now (``ray/_private/node.py``,
    ``_drain_node_before_shutdown``), then tears it down once the raylet left (drained and
    idle) or at that deadline.
    """

    def __init__(self, address: str, *, node_type: str, resources: dict[str, float],
                 drain_timeout_s: float, num_cpus: int = 1) -> None:
        self.node_type = node_type
        ray_cli = Path(sys.executable).with_name("ray")
        labels = f"ladder.node-type={node_type}"
        self.args = [str(ray_cli), "start", f"--address={address}", "--block",
                     f"--num-cpus={num_cpus}", f"--resources={json.dumps(resources)}",
                     f"--labels={labels}", f"--object-store-memory={80 * 2**20}",
                     "--disable-usage-stats"]
        self.env = {**os.environ, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": str(drain_timeout_s),
                    "RAY_USAGE_STATS_ENABLED": "0"}
        self.proc: subprocess.Popen[bytes] | None = None
        self.node_id: str | None = None

    def start(self, timeout_s: float = 60) -> RayStartNode:
        """Start the node and wait until it registered; a `ray start` that exits first
        (Ray gives up on a start on a CPU-starved machine) is started again (3 tries)."""
        from ray_ladder.cluster.local_processes import start_with_retries

        def once() -> RayStartNode:
            try:
                return self._start_once(timeout_s)
            except BaseException:
                self.kill()
                raise

        return start_with_retries(once, f"`ray start` node {self.node_type}")

    def _start_once(self, timeout_s: float) -> RayStartNode:
        import ray

        self.proc = subprocess.Popen(self.args, env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)

        def registered() -> str | None:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited with {self.proc.returncode}")
            return next((n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Labels"].get(
                "ladder.node-type") == self.node_type), None)

        deadline = time.monotonic() + timeout_s
        while (node_id := registered()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"`ray start` node {self.node_type} did not register "
                                   f"within {timeout_s}s")
            time.sleep(0.2)
        self.node_id = node_id
        return self

    def sigterm(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL every process of the node at once (the VM is gone)."""
        if self.proc is None:
            return
        import psutil

        procs = []
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
