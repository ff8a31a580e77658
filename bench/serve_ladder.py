"""Serve ladder benchmark: router overhead, failover under load, climb back (prints JSON).

One run on a LocalCluster (head + an h100 node + an a100 node):

- router_overhead_ratio: p50 latency through the ladder app / p50 through a plain Serve app,
  the median over 6 interleaved rounds (``router_overhead_rounds``, and their spread)
  whose pass-through ingress calls the same model deployment (the ladder's h100 rung).
- failover_*: the h100 node is SIGKILLed while 50 req/s go through the ladder app.
- climb_back_s: the h100 node is re-added; time until answers come from h100 again,
  with the terms of its goal (hysteresis x probe interval + replica start + 1 s), and
  router_climbed_to_first_answer_s: from the router's climb to the first h100 answer
  (goal <= 0.5 s), and after_climb_not_on_h100_requests: requests sent from 0.5 s after
  the climb on that were not answered by h100 (goal 0). Run it at --rate 20 and --rate 50.

Usage: python bench/serve_ladder.py [--rate 50] [--overhead-requests 300]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import multiprocessing as mp
import os
import queue
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from ray_ladder import Ladder  # noqa: E402
from ray_ladder.testing import LocalCluster, free_port, wait_until  # noqa: E402

LADDER = Ladder.from_yaml("""
name: bench-serve
policy: {promotion_hysteresis: 2, probe_interval_s: 0.5, pending_timeout_s: 5,
         retry_after_s: 5}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, quality: 1.0, cost_per_hour: 12.3,
     standby_replicas: 1}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.95, cost_per_hour: 4.1,
     standby_replicas: 1}
  - {name: cache, kind: cache, quality: 0.3, cache: {max_entries: 1000, ttl_s: 60}}
  - {name: shed, kind: shed, quality: 0}
""")


#: How often the driver polls serve.status() for the new replica (the resolution of the
#: replica_start_s term).
STATUS_POLL_S = 0.25


class Model:
    """A small CPU model: a few hundred microseconds of arithmetic per request."""

    def __init__(self, rung, **kwargs):
        self.rung = rung

    def __call__(self, payload):
        x = float(payload.get("x", 1.0))
        for _ in range(2000):
            x = (x * 1.000001 + 0.5) % 1000.0
        return {"y": x, "model": self.rung.params.get("model", self.rung.name)}


def plain_app():
    """A plain Serve app: a pass-through ingress in front of the ladder's h100 deployment."""
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    @serve.deployment(num_replicas=1, max_ongoing_requests=1000, ray_actor_options={
        "num_cpus": 0, "resources": {"node:__internal_head__": 0.001}})
    class Ingress:
        def __init__(self):
            self.model = serve.get_deployment_handle("h100", app_name="ladder")

        async def __call__(self, request: Request):
            return JSONResponse(await self.model.remote(await request.json()))

    return Ingress.bind()


#: The overhead's requests come in this many rounds; the ratio is the rounds' median.
ROUNDS = 6


def p50(values):
    return statistics.median(values) if values else None


def overhead(client, base, n):
    def run(path):
        t = time.perf_counter()
        r = client.post(base + path, json={"x": 1.5})
        r.raise_for_status()
        return time.perf_counter() - t

    for path in ("/ladder", "/plain"):
        for _ in range(30):
            run(path)
    ladder, plain, ratios = [], [], []
    per_round = max(1, n // ROUNDS)
    for _ in range(ROUNDS):  # interleaved pairs, so machine noise hits both alike
        lr, pr = [], []
        for _ in range(per_round):
            lr.append(run("/ladder"))
            pr.append(run("/plain"))
        ratios.append(p50(lr) / p50(pr))
        ladder += lr
        plain += pr
    return p50(ladder), p50(plain), ratios


class Load:
    """Sends requests at a steady rate from a thread pool; records every outcome."""

    def __init__(self, client, url, rate):
        self.client, self.url, self.rate = client, url, rate
        self.records = []  # (start, end, status, rung)
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=256)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _one(self, i, start):
        # Latency counts from the scheduled send time, so waiting for a free client
        # thread shows up as latency instead of hiding it.
        try:
            r = self.client.post(self.url, json={"x": i % 100})
            status, rung = r.status_code, r.headers.get("x-ladder-rung")
        except httpx.HTTPError as err:
            status, rung = type(err).__name__, None
        self.records.append((start, time.monotonic(), status, rung))

    def _run(self):
        t0, i = time.monotonic(), 0
        while not self._stop.is_set():
            due = t0 + i / self.rate
            delay = due - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            self._pool.submit(self._one, i, due)
            i += 1

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()
        self._pool.shutdown(wait=True)


def _load_child(url, rate, out, stop):
    """Child process: run a :class:`Load` and stream its records to ``out``."""
    client = httpx.Client(timeout=60, limits=httpx.Limits(max_connections=300))
    load = Load(client, url, rate).start()
    sent = 0
    while not stop.wait(0.1):
        fresh = load.records[sent:]
        if fresh:
            out.put(fresh)
            sent += len(fresh)
    load.stop()
    out.put(load.records[sent:])
    out.put(None)


class LoadProcess:
    """:class:`Load` in a spawned process: the driver holds its GIL for a second or more
    while it starts a node, which would delay the load's requests and fake latency."""

    def __init__(self, url, rate):
        ctx = mp.get_context("spawn")
        self._out, self._stop = ctx.Queue(), ctx.Event()
        self._proc = ctx.Process(target=_load_child, args=(url, rate, self._out, self._stop),
                                 daemon=True)
        self.records = []
        self._done = False

    def start(self):
        self._proc.start()
        return self

    def _take(self, item):
        if item is None:
            self._done = True
        else:
            self.records.extend(item)

    def poll(self):
        """Records received so far (time.monotonic is one clock for both processes)."""
        while True:
            try:
                self._take(self._out.get_nowait())
            except queue.Empty:
                return self.records

    def stop(self):
        self._stop.set()
        while not self._done:
            self._take(self._out.get(timeout=180))
        self._proc.join(timeout=30)
        return self.records


def replica_running(app, deployment):
    from ray import serve

    status = serve.status().applications.get(app)
    dep = status.deployments.get(deployment) if status else None
    states = dep.replica_states if dep else {}
    return sum(n for s, n in states.items() if getattr(s, "value", s) == "RUNNING")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--overhead-requests", type=int, default=300)
    args = parser.parse_args()

    import cloudpickle
    from ray import serve

    from ray_ladder.serve import build_app

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    logging.getLogger("ray").setLevel(logging.WARNING)
    from _machine import MachineProbe

    probe = MachineProbe()  # the machine field: measured at the start and at the end
    out = {"machine": None, "rate_req_s": args.rate}
    t_start = time.monotonic()
    # Worker logs stay in their files: stdout carries this script's JSON alone.
    cluster = LocalCluster.from_ladder(LADDER, log_to_driver=False).start()
    try:
        port = free_port()
        # No per-request access log lines: on a 2-core box, writing, tailing and
        # forwarding three log lines per request costs more CPU than the model.
        quiet = {"log_level": "WARNING", "enable_access_log": False}
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    proxy_location="HeadOnly", logging_config=quiet)
        # Room for the burst a fall sends to the rung below: with Serve's default of 5
        # ongoing requests per replica, the handle's routing backs off under the burst
        # and a 2-core machine never drains the queue. The plain app calls the same h100
        # deployment, so both sides run with this setting.
        roomy = {"max_ongoing_requests": 32}
        serve.run(build_app(LADDER, {"h100": Model, "a100": Model},
                            deployment_options={"h100": roomy, "a100": roomy}),
                  name="ladder", route_prefix="/ladder", logging_config=quiet)
        serve.run(plain_app(), name="plain", route_prefix="/plain", logging_config=quiet)
        base = f"http://127.0.0.1:{port}"
        client = httpx.Client(timeout=30, limits=httpx.Limits(max_connections=100))
        wait_until(lambda: client.get(base + "/ladder/-/ladder").json()["current"] == "h100",
                   120, 0.2, "ladder on h100")
        wait_until(lambda: replica_running("ladder", "a100") >= 1, 120, 0.2, "a100 standby")
        out["setup_s"] = round(time.monotonic() - t_start, 1)

        ladder_p50, plain_p50, ratios = overhead(client, base, args.overhead_requests)
        out["ladder_p50_ms"] = round(ladder_p50 * 1000, 2)
        out["plain_p50_ms"] = round(plain_p50 * 1000, 2)
        out["router_overhead_ratio"] = round(p50(ratios), 3)  # the rounds' median
        out["router_overhead_rounds"] = [round(r, 3) for r in ratios]
        out["router_overhead_spread"] = round(max(ratios) - min(ratios), 3)
        out["router_overhead_goal"] = 1.10

        # --- failover under load ---------------------------------------------------------
        load = LoadProcess(base + "/ladder", args.rate).start()
        t_running = t_add_wall = None
        try:
            wait_until(lambda: len(load.poll()) >= 2 * args.rate, 120, 0.1, "load running")
            t_kill = time.monotonic()
            cluster.remove_node(cluster.nodes("h100")[0])  # SIGKILL: a preemption
            # The new replica's start counts from a status that no longer shows the dead
            # one as RUNNING (Serve's controller notices it at a health check).
            gone = {"seen": False}

            def new_replica_running() -> bool:
                running = replica_running("ladder", "h100")
                gone["seen"] = gone["seen"] or running == 0
                return gone["seen"] and running >= 1

            with contextlib.suppress(TimeoutError):  # the outage lasts 4 s either way
                wait_until(lambda: gone["seen"] or new_replica_running(), 4.0, STATUS_POLL_S,
                           "the dead replica leaves Serve's count")
            time.sleep(max(0.0, t_kill + 4.0 - time.monotonic()))
            # --- climb back ----------------------------------------------------------------
            t_add, t_add_wall = time.monotonic(), time.time()
            cluster.add_node("h100")
            # serve.status() is dear (the controller builds every app's details): polling
            # it 20 times a second loads a 2-core box enough to back the traffic up.
            wait_until(new_replica_running, 60, STATUS_POLL_S, "h100 replica")
            t_running = time.monotonic()
            wait_until(lambda: any(r[3] == "h100" and r[0] > t_add for r in load.poll()),
                       60, 0.05, "answers from h100 again")
            time.sleep(float(os.environ.get("BENCH_TAIL_S", "1.0")))
        except TimeoutError as err:  # report what was measured, and that this did not come
            out["error"] = str(err)
        finally:
            load.stop()

        recs = sorted(load.records)
        if os.environ.get("BENCH_DUMP"):  # per-request timeline, for digging into a run
            with open(os.environ["BENCH_DUMP"], "w") as fh:
                json.dump({"t_kill": t_kill, "t_add": t_add, "records": recs}, fh)
        failed = [r for r in recs if r[2] != 200]
        during = [r for r in recs if t_kill - 1.0 <= r[0] <= t_add]
        lower = [r for r in recs if r[0] >= t_kill - 1.0 and r[3] not in (None, "h100")
                 and r[1] >= t_kill]
        back = [r for r in recs if r[0] > t_add and r[3] == "h100"]
        out["requests_sent"] = len(recs)
        out["failover_failed_requests"] = len(failed)
        out["failover_failed_statuses"] = sorted({str(r[2]) for r in failed})
        out["failover_first_lower_answer_s"] = (
            round(min(r[1] for r in lower) - t_kill, 3) if lower else None)
        out["failover_max_latency_s"] = round(max(r[1] - r[0] for r in during), 3)
        before = sorted(r[1] - r[0] for r in recs if r[0] < t_kill - 1.0)
        if before:  # the same load before the kill: what this machine does without one
            out["baseline_p99_latency_s"] = round(before[int(0.99 * (len(before) - 1))], 3)
            out["baseline_max_latency_s"] = round(before[-1], 3)
            # Above this the machine could not keep up with the rate before any kill: the
            # failover latencies then measure its queue, not the ladder.
            out["saturated_before_kill"] = out["baseline_p99_latency_s"] > 0.5
        out["failover_answers_by_rung"] = {
            rung: sum(1 for r in during if r[3] == rung) for rung in {r[3] for r in during}}
        hysteresis_term = LADDER.policy.promotion_hysteresis * LADDER.policy.probe_interval_s
        out["climb_back_s"] = round(min(r[1] for r in back) - t_add, 3) if back else None
        start_s = (t_running - t_add) if t_running is not None else None
        ups = [e["time"] for e in client.get(base + "/ladder/-/ladder").json()["events"]
               if t_add_wall is not None and e["to"] == "h100" and e["direction"] == "up"
               and e["time"] > t_add_wall]
        out["climb_back_terms"] = {
            "hysteresis_x_probe_interval_s": hysteresis_term,
            "replica_start_s": round(start_s, 3) if start_s is not None else None,
            "slack_s": 1.0,
            "replica_start_resolution_s": STATUS_POLL_S,
            # seen, not goal terms: when the router's ladder moved up (its event)
            "router_climbed_s": round(ups[0] - t_add_wall, 3) if ups else None,
        }
        out["climb_back_goal_s"] = (round(hysteresis_term + start_s + 1.0, 3)
                                    if start_s is not None else None)
        # From the router's decision to climb to the first answer from h100: the climb
        # takes effect when it is decided (negative: a hedge reached h100 first).
        out["router_climbed_to_first_answer_s"] = (
            round(min(r[1] for r in back) - (t_add + ups[0] - t_add_wall), 3)
            if back and ups and t_add_wall is not None else None)
        # Requests sent from 0.5 s after the router's climb on and answered by another
        # rung (a100: hedged, h100's new replica slow to take them): the climb takes
        # effect when it is decided (tests/serve/test_serve_ray.py asserts only that they
        # are answered, from h100 or a100, and that h100 answers).
        climbed_at = (t_add + ups[0] - t_add_wall) if ups and t_add_wall is not None else None
        after_climb = [r for r in recs if climbed_at is not None and r[0] > climbed_at + 0.5]
        out["after_climb_requests"] = len(after_climb)
        out["after_climb_not_on_h100_requests"] = sum(
            1 for r in after_climb if r[2] != 200 or r[3] != "h100")
        # The same for requests sent while the node came back (its raylet and replica
        # start on these cores): a backlog then delays the first h100 answer after the
        # climb by the time the queue ahead of it takes to drain, not by the ladder.
        climbing = sorted(r[1] - r[0] for r in recs if t_add <= r[0] <= t_add + (
            (ups[0] - t_add_wall) if ups and t_add_wall is not None else 0.0))
        if climbing:
            out["climb_window_p99_latency_s"] = round(
                climbing[int(0.99 * (len(climbing) - 1))], 3)
            out["saturated_during_climb"] = out["climb_window_p99_latency_s"] > 0.5
        goals = {
            "router_overhead_ratio": out["router_overhead_ratio"] <= 1.10,
            "failover_failed_requests": out["failover_failed_requests"] == 0,
            "failover_first_lower_answer_s": (out["failover_first_lower_answer_s"] or 99)
            <= 0.5,
            "failover_max_latency_s": out["failover_max_latency_s"] <= 1.0,
            "climb_back_s": (out["climb_back_s"] or 99) <= (out["climb_back_goal_s"] or 0),
            "router_climbed_to_first_answer_s":
                (out["router_climbed_to_first_answer_s"] or 99) <= 0.5,
            "after_climb_not_on_h100_requests": (out["after_climb_requests"] > 0 and
                                                 out["after_climb_not_on_h100_requests"] == 0),
        }
        out["goals_met"] = goals
        out["total_s"] = round(time.monotonic() - t_start, 1)
    finally:
        try:
            serve.shutdown()
        finally:
            cluster.shutdown()
    out["machine"] = probe.report()
    print(json.dumps(out, indent=2), file=JSON_OUT, flush=True)


if __name__ == "__main__":
    from _json_out import json_stdout

    JSON_OUT = json_stdout()
    main()
