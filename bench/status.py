"""`ray-ladder status --json` on a cluster with 3 ladders in use, timed from outside.

A LocalCluster runs a Serve ladder app (``bench-web``), a ``@ladder_task`` driver (this
process, ladder ``bench-batch``) and an autoscaler hook (``bench-hook``), with traffic;
then the top rung's node is killed and re-added (a fall and a climb, so the report and the
events have something to say). Prints one JSON object: ``status_s`` (median wall time of
``ray-ladder status --json`` as a new process: interpreter start, connect, every read,
the JSON; goal < 2 s), its runs, the ladders found, ``events_s`` (``ray-ladder events
--json``), ``h100_share_1m_before_kill`` (h100's share of the last minute's answers of the
web app and the task driver once both are on it, before the kill; goals >= 0.5 and 1),
``goals``, and the machine as measured (``os.cpu_count``, load average before and after).

``--timeline PATH`` also draws the run's timeline with ``ray-ladder timeline`` (the one in
docs/img/ comes from here).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import cloudpickle
import httpx
import ray
from ray import serve

from ray_ladder import Ladder, ladder_task
from ray_ladder.autoscale import start_hook
from ray_ladder.serve import build_app
from ray_ladder.testing import LocalCluster, free_port, wait_until

WEB = Ladder.from_yaml("""
name: bench-web
policy: {probe_interval_s: 0.25, pending_timeout_s: 5, max_degraded_seconds: 3}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, cost_per_hour: 10}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.8, cost_per_hour: 4,
     standby_replicas: 1}
  - {name: shed, kind: shed, quality: 0}
""")
BATCH = Ladder.from_yaml("""
name: bench-batch
policy: {probe_interval_s: 0.25, pending_timeout_s: 5}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: cpu, num_cpus: 1, label_selector: {ladder.node-type: head}, quality: 0.5}
""")
HOOKED = Ladder.from_yaml("""
name: bench-hook
policy: {probe_interval_s: 1.0}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}}
""")
CLI = [sys.executable, "-m", "ray_ladder.cli"]


class Model:
    def __init__(self, rung):
        self.rung = rung

    def __call__(self, payload):
        return {"rung": self.rung.name}


cloudpickle.register_pickle_by_value(sys.modules[__name__])


@ladder_task(BATCH)
def work(x, *, rung):
    return rung.name


def _timed(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)
    return time.perf_counter() - started, proc


def _traffic(url: str, stop: threading.Event) -> None:
    client = httpx.Client(timeout=30)
    while not stop.is_set():
        try:
            client.post(url, json={"x": 1})
            ray.get(work.remote(1), timeout=60)
        except Exception:  # a request or call during the fall: the bench goes on
            pass
        stop.wait(0.1)


def main(runs: int = 7, timeline: str | None = None) -> dict[str, Any]:
    load_before = os.getloadavg()
    nodes = {n: {"num_cpus": 2, "resources": {f"ladder/{n}": 2}} for n in ("h100", "a100")}
    with LocalCluster(nodes, log_to_driver=False) as cluster:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    proxy_location="HeadOnly")
        serve.run(build_app(WEB, {"h100": Model, "a100": Model}), name="web")
        start_hook(HOOKED, {"provision_timeout_s": 2.0, "retry_initial_s": 2.0})
        stop = threading.Event()
        pump = threading.Thread(target=_traffic, args=(f"http://127.0.0.1:{port}/", stop),
                                daemon=True)
        pump.start()
        address = cluster.address

        def report() -> dict[str, Any]:
            _, proc = _timed("status", "--json", "--address", address)
            return json.loads(proc.stdout) if proc.returncode == 0 else {"ladders": []}

        def on_h100() -> dict[str, Any] | None:
            """The report's ladders by name once all 3 are in it, and the web app and the
            task driver are on h100 with answers there in the last minute."""
            users = {u["ladder"]: u for u in report()["ladders"]}
            ok = len(users) >= 3 and all(
                users.get(n, {}).get("current") == "h100"
                and any(r["name"] == "h100" and (r.get("served_1m") or 0) > 0
                        for r in users[n]["rungs"]) for n in ("bench-web", "bench-batch"))
            return users if ok else None

        before = wait_until(on_h100, 180, 0.5, "3 ladders reported, web and batch on h100")
        # h100's share of each one's last minute (tests/operating/test_status_ray.py asserts
        # only that it has one: its size is the machine's speed as much as the ladder's).
        shares = {n: next(r["share_1m"] for r in before[n]["rungs"] if r["name"] == "h100")
                  for n in ("bench-web", "bench-batch")}
        cluster.remove_node(cluster.nodes("h100")[0])
        wait_until(lambda: {u["current"] for u in report()["ladders"]
                            if u["ladder"] in ("bench-web", "bench-batch")} == {"a100", "cpu"},
                   180, 0.5, "both fell")
        cluster.add_node("h100")
        wait_until(lambda: all(u["current"] == "h100" for u in report()["ladders"]),
                   180, 0.5, "all back on h100")
        times, found = [], []
        for _ in range(runs):
            took, proc = _timed("status", "--json", "--address", address)
            assert proc.returncode == 0, proc.stderr
            times.append(took)
            found = [f"{u['part']}:{u['ladder']}" for u in json.loads(proc.stdout)["ladders"]]
        events_s, proc = _timed("events", "--json", "--address", address)
        n_events = len(proc.stdout.splitlines())
        drawn = None
        if timeline:
            _, proc = _timed("timeline", "--address", address, "-o", timeline)
            drawn = proc.stdout.strip() or proc.stderr.strip()
        stop.set()
        pump.join(timeout=60)
        serve.shutdown()
    return {
        "status_s": round(statistics.median(times), 3),
        "status_s_runs": [round(t, 3) for t in times],
        "status_s_max": round(max(times), 3),
        "goal_status_s": 2.0,
        "h100_share_1m_before_kill": shares,
        "goals": {"status_s_lt_2": statistics.median(times) < 2.0,
                  "web_h100_share_1m_ge_0_5": (shares["bench-web"] or 0) >= 0.5,
                  "batch_h100_share_1m_1": shares["bench-batch"] == 1.0},
        "ladders_found": found,
        "events_s": round(events_s, 3),
        "events_listed": n_events,
        "timeline": drawn,
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "ray": ray.__version__,
                    "loadavg_before": [round(x, 2) for x in load_before],
                    "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--timeline", default=None, help="also write the timeline PNG here")
    args = parser.parse_args()
    from _json_out import json_stdout

    out = json_stdout()  # Ray's notices go to stderr: stdout is the JSON alone
    print(json.dumps(main(args.runs, args.timeline)), file=out, flush=True)
