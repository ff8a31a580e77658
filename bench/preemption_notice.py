"""The same kill of the top rung's node with and without a preemption notice (deadline 10 s).

One LocalCluster (head, an h100 node, an a100 node, rung a100 cold: no standby replica).
Under Serve load (a thread pool on the app's handle) and task load (``@ladder_task`` calls
that record each start in an actor), phase 1 SIGKILLs the h100 node with no notice; a new
h100 node joins and the ladder climbs back; phase 2 drains it through Ray's own drain API
(``DRAIN_NODE_REASON_PREEMPTION``, deadline 10 s) and SIGKILLs it at the deadline. Prints
ONE JSON object on stdout (progress on stderr). Run: ``python bench/preemption_notice.py``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from _machine import MachineProbe  # noqa: E402

from ray_ladder import Ladder  # noqa: E402
from ray_ladder.testing import LocalCluster, wait_until  # noqa: E402

DEADLINE_S = 10.0
LADDER = Ladder.from_yaml("""
name: bench-notice
policy: {promotion_hysteresis: 2, probe_interval_s: 0.25, pending_timeout_s: 8}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, standby_replicas: 1}
  - {name: a100, resources: {ladder/a100: 1}, standby_replicas: 0}
""")


class Model:
    """A small CPU model."""

    def __init__(self, rung, **kwargs):
        self.rung = rung

    def __call__(self, payload):
        time.sleep(0.02)
        return self.rung.name


def log(msg: str) -> None:
    print(f"[preemption_notice] {msg}", file=sys.stderr, flush=True)


class Load:
    """Serve requests from a few threads: (start, latency, rung or error) each."""

    def __init__(self, handle, threads: int = 4) -> None:
        self.handle, self.rows, self._stop = handle, [], threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                res = self.handle.predict.remote({"x": 1}).result(timeout_s=60)
                self.rows.append((t, time.monotonic() - t, res.rung))
            except Exception as err:  # a failed request is a figure, not a crash
                self.rows.append((t, time.monotonic() - t, f"error: {type(err).__name__}"))
            time.sleep(0.05)

    def start(self) -> Load:
        for th in self._threads:
            th.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for th in self._threads:
            th.join(timeout=90)


def p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(0.99 * len(s)))] if s else 0.0


def phase(cluster, handle, task, starts, notice: bool) -> dict:
    """One kill of the h100 node (after a 10 s notice when ``notice``) under load."""
    import ray

    from ray_ladder.cluster import ray_private

    node = cluster.nodes("h100")[0]
    load = Load(handle).start()
    wait_until(lambda: len(load.rows) >= 20, 60, 0.05, "load running")
    calls_before = ray.get(starts.count.remote())
    refs: list = []
    stop_tasks = threading.Event()

    def submit() -> None:
        i = 0
        while not stop_tasks.is_set():
            refs.append(task.remote(f"{int(notice)}-{i}", starts))
            i += 1
            time.sleep(0.6)  # one slot per rung: keep the queue short

    submitter = threading.Thread(target=submit, daemon=True)
    submitter.start()
    wait_until(lambda: len(load.rows) >= 60, 60, 0.05, "baseline window")
    t_notice = time.monotonic()
    moved_at = None
    if notice:
        accepted, why = ray_private.drain_node(cluster.address, node.node_id, DEADLINE_S)
        assert accepted, why
        moved_at = wait_until(
            lambda: next((t for t, _, r in list(load.rows) if t > t_notice and r == "a100"),
                         None), DEADLINE_S + 5, 0.02, "traffic on a100")
        wait_until(lambda: time.monotonic() - t_notice >= DEADLINE_S, DEADLINE_S + 1, 0.05)
    cluster.remove_node(node)  # SIGKILL at the deadline (or with no notice at all)
    t_kill = time.monotonic()
    wait_until(lambda: any(t > t_kill + 3 and r == "a100" for t, _, r in list(load.rows)),
               60, 0.1, "serving on a100 after the kill")
    stop_tasks.set()
    submitter.join()
    load.stop()
    _, unfinished = ray.wait(refs, num_returns=len(refs), timeout=60)
    t_notice_wall = time.time() - (time.monotonic() - t_notice)
    after = ray.get(starts.after.remote(t_notice_wall))
    counts = ray.get(starts.counts.remote())
    base = [lat for t, lat, _ in load.rows if t < t_notice]
    around = [lat for t, lat, _ in load.rows if t >= t_notice]
    out = {
        "baseline_p99_s": round(p99(base), 4),
        "max_latency_s": round(max(around, default=0.0), 4),
        "failed_requests": sum(1 for *_, r in load.rows if r.startswith("error")),
        "requests": len(load.rows),
        "slow_requests": sum(1 for x in around if x > 2 * p99(base) + 0.1),
        "tasks": len(refs),
        "tasks_unfinished_60s_after_load": len(unfinished),
        "tasks_rerun": sum(1 for k, n in counts.items() if k.startswith(f"{int(notice)}-")
                           and n > 1),
        "task_starts_on_draining_node_after_notice": sum(
            1 for k, node_id, t in after if node_id == node.node_id and t > t_notice_wall),
        "calls_before": calls_before,
    }
    if moved_at is not None:
        out["notice_to_traffic_moved_s"] = round(moved_at - t_notice, 3)
    return out


def main() -> None:
    import cloudpickle
    import ray
    from ray import serve

    from ray_ladder import ladder_task
    from ray_ladder.serve import build_app

    probe = MachineProbe()
    t0 = time.monotonic()
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    logging.getLogger("ray").setLevel(logging.WARNING)
    cluster = LocalCluster.from_ladder(LADDER, log_to_driver=False).start()
    try:
        @ray.remote(num_cpus=0)
        class Starts:
            def __init__(self):
                self.rows = []

            def start(self, key, node_id):
                self.rows.append((key, node_id, time.time()))

            def count(self):
                return len(self.rows)

            def counts(self):
                out: dict = {}
                for k, _, _ in self.rows:
                    out[k] = out.get(k, 0) + 1
                return out

            def after(self, t):
                return [r for r in self.rows if r[2] >= t]

        starts = Starts.options(label_selector={"ladder.node-type": "head"}).remote()

        @ladder_task(LADDER, num_cpus=0)
        def work(key, starts, rung=None):
            ray.get(starts.start.remote(key, ray.get_runtime_context().get_node_id()))
            time.sleep(0.3)
            return rung.name

        quiet = {"log_level": "WARNING", "enable_access_log": False}
        serve.start(proxy_location="HeadOnly", logging_config=quiet)
        handle = serve.run(build_app(LADDER, {"h100": Model, "a100": Model}),
                           name="notice", route_prefix="/notice", logging_config=quiet)
        wait_until(lambda: handle.predict.remote({}).result().rung == "h100", 120, 0.2)
        log("phase 1: kill without notice")
        unnoticed = phase(cluster, handle, work, starts, notice=False)
        log(json.dumps(unnoticed))
        cluster.add_node("h100")
        wait_until(lambda: handle.predict.remote({}).result().rung == "h100", 120, 0.2,
                   "climbed back to h100")
        # The cold-start figure: how long a100's replica takes to start is its own
        # (Serve scales it 0 -> 1); the router released it after the climb.
        log("phase 2: notice with a 10 s deadline, kill at the deadline")
        noticed = phase(cluster, handle, work, starts, notice=True)
        log(json.dumps(noticed))
        result = {
            "deadline_s": DEADLINE_S,
            "noticed_max_latency_s": noticed["max_latency_s"],
            "unnoticed_max_latency_s": unnoticed["max_latency_s"],
            "noticed_failed_requests": noticed["failed_requests"],
            "unnoticed_failed_requests": unnoticed["failed_requests"],
            "noticed_hedged_requests": noticed["slow_requests"],
            "unnoticed_slow_requests": unnoticed["slow_requests"],
            "noticed_tasks_rerun": noticed["tasks_rerun"],
            "unnoticed_tasks_rerun": unnoticed["tasks_rerun"],
            "noticed_task_starts_on_draining_node": noticed[
                "task_starts_on_draining_node_after_notice"],
            "noticed_tune_steps_lost": None,
            "notice_to_traffic_moved_s": noticed.get("notice_to_traffic_moved_s"),
            "next_rung": "a100 (cold: no standby replica)",
            "noticed": noticed,
            "unnoticed": unnoticed,
            "total_s": round(time.monotonic() - t0, 1),
        }
    finally:
        try:
            serve.shutdown()
        finally:
            cluster.shutdown()
    result["machine"] = probe.report()
    print(json.dumps(result), file=JSON_OUT, flush=True)


if __name__ == "__main__":
    from _json_out import json_stdout

    JSON_OUT = json_stdout()
    main()
