"""The same kill of the top rung's node with and without a preemption notice (deadline 10 s).

One LocalCluster: a head, an h100 node and an a100 node (four units of their rung's
resource each, so that Serve replicas, task attempts and the Tune trial never wait for one
another). On it, at once:

* two Serve apps on the same two rungs under HTTP load: ``warm`` (a100 keeps a standby
  replica) and ``cold`` (a100 keeps none: the notice must start it);
* ``@ladder_task`` calls (0.3 s each, one every 0.4 s) that record each start (key, node,
  time) in an actor on the head;
* one Tune trial (0.1 s steps, a checkpoint every 25 steps) that also checkpoints when
  ``ray_ladder.tune.should_checkpoint()`` says its node got a notice.

Phase 1 SIGKILLs the h100 node with no notice (while a task attempt runs there); a new h100
node joins and everything climbs back; phase 2 drains it through Ray's own drain API
(``DRAIN_NODE_REASON_PREEMPTION``, deadline 10 s) and SIGKILLs it at the deadline. Hedged
requests are the routers' own counts (``GET /-/ladder``: copies after ``assign_timeout_s``
and re-sends after a failure); requests merely as slow as a hedge's wait are counted apart
(``*_over_hedge_wait_requests``; over both that and twice the baseline's p99 + 0.1 s:
``*_over_noise_and_hedge_wait_requests``, goal 0 with a notice). Prints
ONE JSON object on stdout (progress on stderr). Run: ``python bench/preemption_notice.py``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from _machine import MachineProbe  # noqa: E402

from ray_ladder import Ladder  # noqa: E402
from ray_ladder.testing import LocalCluster, free_port, wait_until  # noqa: E402

DEADLINE_S = 10.0
EVERY = 25  # the trial's checkpoint interval (steps of 0.1 s)
HEDGE_S = 0.25  # build_app's assign_timeout_s: a request not taken within it is hedged
RUNGS = """
policy: {promotion_hysteresis: 2, probe_interval_s: 0.25, pending_timeout_s: 8}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, num_cpus: 0, standby_replicas: 1}
  - {name: a100, resources: {ladder/a100: 1}, num_cpus: 0, standby_replicas: %d}
"""
WARM = Ladder.from_yaml("name: bench-notice-warm" + RUNGS % 1)
COLD = Ladder.from_yaml("name: bench-notice-cold" + RUNGS % 0)
WORK = Ladder.from_yaml("name: bench-notice-work" + RUNGS % 0)
NODES = {n: {"num_cpus": 2, "resources": {f"ladder/{n}": 4}} for n in ("h100", "a100")}
# Serve stops a draining replica at deadline - graceful_shutdown_timeout_s (20 s by
# default: at once for a 10 s notice). The cold rung gets a short look-back: with Serve's
# default (30 s) its replica was asked for 6 s or more after the notice (docs/capacity.md).
QUICK = {"graceful_shutdown_timeout_s": 1.0}
COLD_A100 = {**QUICK, "autoscaling_config": {"downscale_delay_s": 1.0, "look_back_period_s": 2.0}}


class Model:
    """A small CPU model."""

    def __init__(self, rung, **kwargs):
        self.rung = rung

    def __call__(self, payload):
        time.sleep(0.01)
        return self.rung.name


def log(msg: str) -> None:
    print(f"[preemption_notice] {msg}", file=sys.stderr, flush=True)


def train(config):
    """Count steps of 0.1 s; checkpoint every EVERY steps, or when the node got a notice."""
    from ray import tune

    from ray_ladder.tune import current_rung, should_checkpoint

    step = resumed_from = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            step = resumed_from = json.loads(Path(d, "state.json").read_text())["step"]
    rung = current_rung().name
    while True:
        time.sleep(0.1)
        step += 1
        with open(config["log"], "a") as f:
            f.write(json.dumps({"step": step, "rung": rung, "time": time.time(),
                                "resumed_from": resumed_from}) + "\n")
        if step % EVERY == 0 or (config["honour"] and should_checkpoint()):
            with tempfile.TemporaryDirectory() as d:
                Path(d, "state.json").write_text(json.dumps({"step": step}))
                tune.report({"step": step}, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            tune.report({"step": step})


def steps(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


class Load:
    """HTTP requests from a few threads: (sent at, latency, rung or error) each. Over HTTP,
    so that the driver's own work (Tune's controller, the task submitter) does not sit in
    the request path as it would for handle calls routed in this process."""

    def __init__(self, url: str, threads: int = 2) -> None:
        self.url, self.rows, self._stop = url, [], threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def _run(self) -> None:
        import httpx

        client = httpx.Client(timeout=60)
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                r = client.post(self.url, json={"x": 1})
                rung = r.headers.get("x-ladder-rung") if r.status_code == 200 else None
                self.rows.append((t, time.monotonic() - t, rung or f"error: {r.status_code}"))
            except Exception as err:  # a failed request is a figure, not a crash
                self.rows.append((t, time.monotonic() - t, f"error: {type(err).__name__}"))
            self._stop.wait(0.05)

    def start(self) -> Load:
        for th in self._threads:
            th.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for th in self._threads:
            th.join(timeout=90)

    def first(self, rung: str, after: float) -> float | None:
        return next((t for t, _, r in list(self.rows) if t > after and r == rung), None)


def p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(0.99 * len(s)))] if s else 0.0


def router_state(url: str) -> dict:
    """The app's router state (``GET /-/ladder``; reading it resets ``max_loop_lag_s``)."""
    import httpx

    return httpx.get(url + "-/ladder", timeout=30).json()


def resends(url: str) -> int:
    """Requests the app's router copied to another rung (a hedge: no replica of their rung
    took them within ``assign_timeout_s``) or sent again after their rung failed them,
    so far (its ``GET /-/ladder`` counts)."""
    import httpx

    counts = httpx.get(url + "-/ladder", timeout=30).json()["metrics"]
    return sum(counts["hedges"].values()) + sum(counts["resent"].values())


def serve_figures(load: Load, t0: float, resent: int) -> dict:
    # Baseline: answered before the notice (or kill); after: still open at it, or later.
    base = [lat for t, lat, _ in load.rows[20:] if t + lat < t0]
    after = [lat for t, lat, _ in load.rows if t + lat >= t0]
    limit = 2 * p99(base) + 0.1
    slow = [(t, lat, r) for t, lat, r in load.rows if t + lat >= t0 and lat > limit]
    return {"baseline_p99_s": round(p99(base), 4), "max_latency_s": round(max(after), 4),
            "requests": len(load.rows),
            "failed_requests": sum(1 for *_, r in load.rows if r.startswith("error")),
            "slow_requests": len(slow),
            # Counted by the router: requests that paid a hedge or a re-send.
            "hedged_requests": resent,
            # Requests as slow as a hedge's wait, whatever made them slow (on 2 cores,
            # replicas and the trial starting beside them can).
            "over_hedge_wait_requests": sum(1 for x in after if x > HEDGE_S),
            # Over both: the machine's noise and a hedge's wait (what
            # tests/preemption/test_notice_serve_tasks.py asserted before issue 46).
            "over_noise_and_hedge_wait_requests": sum(1 for x in after
                                                      if x > max(limit, HEDGE_S)),
            # (sent at, from the notice or the kill; latency; rung) of each slow request
            "slow": [(round(t - t0, 2), round(lat, 3), r) for t, lat, r in slow]}


def serve_replica_start(logs: Path, app: str, deployment: str, after: float) -> dict:
    """When Serve's controller started the first replica of ``deployment`` after ``after``
    (wall time) and when it reported it ready: its own log lines ("Starting Replica(...)"
    and "... started successfully ... after X s", the figure Serve gives for a replica
    start), so the bench's own polling takes no CPU from what it measures."""
    stamp = re.compile(r"^\w+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) controller ")
    who = f"deployment='{deployment}', app='{app}')"
    started: dict[str, float] = {}
    for path in sorted((logs / "serve").glob("controller_*.log")):
        for line in path.read_text(errors="replace").splitlines():
            m = stamp.match(line)
            if m is None or who not in line:
                continue
            at = time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%d %H:%M:%S")) + int(
                m.group(1)[20:]) / 1000.0
            rid = re.search(r"Replica\(id='([^']+)'", line)
            if rid is None or at < after:
                continue
            if "Starting Replica(" in line:
                started.setdefault(rid.group(1), at)
            elif "started successfully" in line and rid.group(1) in started:
                return {"asked": started[rid.group(1)], "ready": at}
    return {}


def running(app: str, deployment: str) -> int:
    from ray import serve

    states = serve.status().applications[app].deployments[deployment].replica_states
    return sum(n for s, n in states.items() if getattr(s, "value", s) == "RUNNING")


def replicas(app: str, deployment: str) -> int:
    """Replicas of ``deployment`` in any state (starting, running, stopping)."""
    from ray import serve

    states = serve.status().applications[app].deployments[deployment].replica_states
    return sum(states.values())


class Bench:
    def __init__(self, cluster, urls, work, starts, step_log: Path) -> None:
        self.cluster, self.urls, self.work, self.starts = cluster, urls, work, starts
        self.step_log = step_log
        self.logs = Path(cluster.head.logs_dir)  # Serve's controller logs
        self.refs: dict[str, object] = {}
        self._stop_tasks = threading.Event()
        self._submitter: threading.Thread | None = None

    def submit(self, tag: str) -> None:
        self._stop_tasks.clear()

        def run() -> None:
            i = 0
            while not self._stop_tasks.is_set():
                key = f"{tag}-{i}"
                self.refs[key] = self.work.remote(key, self.starts)
                i += 1
                self._stop_tasks.wait(0.4)

        self._submitter = threading.Thread(target=run, daemon=True)
        self._submitter.start()

    def stop_tasks(self) -> None:
        self._stop_tasks.set()
        if self._submitter is not None:
            self._submitter.join()

    def started(self) -> list:
        import ray

        return ray.get(self.starts.all.remote())

    def healthy(self) -> None:
        """Everything on h100; the cold app's a100 at zero replicas again."""
        import httpx

        for url in self.urls.values():
            wait_until(lambda url=url: httpx.post(url, json={}, timeout=30)
                       .headers.get("x-ladder-rung") == "h100", 120, 0.1, "serving from h100")
        wait_until(lambda: replicas("cold", "a100") == 0 and running("warm", "a100") >= 1,
                   120, 0.2, "cold a100 at zero replicas, warm a100 standing by")
        now = time.time()
        wait_until(lambda: any(e["rung"] == "h100" and e["time"] > now
                               for e in steps(self.step_log)), 120, 0.1, "the trial on h100")

    def phase(self, notice: bool) -> dict:
        import ray

        from ray_ladder.cluster import ray_private

        tag = "noticed" if notice else "unnoticed"
        node = self.cluster.nodes("h100")[0]
        a100 = self.cluster.nodes("a100")[0].node_id
        self.healthy()
        resent_before = {name: resends(url) for name, url in self.urls.items()}
        for url in self.urls.values():
            router_state(url)  # the loop lag below is the phase's own
        loads = {name: Load(url, threads=1).start() for name, url in self.urls.items()}
        self.submit(tag)
        # The baseline: 70 requests per app, the first 20 left out (connections, warm-up).
        wait_until(lambda: all(len(x.rows) >= 70 for x in loads.values()), 60, 0.05,
                   "baseline window")
        # A hedge (a request h100 was slow to take, copied to a100) may have woken it.
        cold_at_notice = replicas("cold", "a100") == 0
        t0, wall0 = time.monotonic(), time.time()
        if notice:
            accepted, why = ray_private.drain_node(self.cluster.address, node.node_id,
                                                   DEADLINE_S)
            assert accepted, why
            log(f"notice sent at wall {wall0:.3f}")
            wait_until(lambda: time.monotonic() >= t0 + DEADLINE_S, DEADLINE_S + 1, 0.05,
                       "the deadline")
        else:  # no notice: kill while a task runs there (a 0.3 s attempt started just now)
            wait_until(lambda: any(n == node.node_id and time.time() - t < 0.1
                                   for _, n, t in self.started()), 30, 0.02,
                       "an attempt running on h100")
        self.cluster.remove_node(node)  # SIGKILL at the deadline, or with no notice at all
        t_kill, wall_kill = time.monotonic(), time.time()
        for x in loads.values():
            wait_until(lambda x=x: any(t > t_kill + 2 and r == "a100" for t, _, r in
                                       list(x.rows)), 60, 0.1, "serving on a100 after the kill")
        wait_until(lambda: any(e["rung"] == "a100" and e["time"] > wall_kill
                               for e in steps(self.step_log)), 60, 0.1, "the trial on a100")
        wait_until(lambda: any(n == a100 and t > wall_kill for _, n, t in self.started()),
                   60, 0.1, "tasks on a100 after the kill")
        self.stop_tasks()
        for x in loads.values():
            x.stop()
        resent = {name: resends(url) - resent_before[name] for name, url in self.urls.items()}
        # How late each router's event loop woke up at worst during the phase (a probe
        # that comes late moves traffic late).
        lags = {name: router_state(url)["max_loop_lag_s"] for name, url in self.urls.items()}
        keys = [k for k in self.refs if k.startswith(tag + "-")]
        _, unfinished = ray.wait([self.refs[k] for k in keys], num_returns=len(keys),
                                 timeout=30)
        rows = self.started()
        runs: dict[str, int] = {}
        for k, _, _ in rows:
            runs[k] = runs.get(k, 0) + 1
        entries = steps(self.step_log)
        first_low = next(e for e in entries if e["rung"] == "a100" and e["time"] > wall0)
        last_top = max(e["step"] for e in entries
                       if e["rung"] == "h100" and e["time"] < first_low["time"])
        out = {
            "serve_warm": serve_figures(loads["warm"], t0, resent["warm"]),
            "serve_cold": serve_figures(loads["cold"], t0, resent["cold"]),
            "tasks": len(keys),
            "tasks_lost_30s_after_load": len(unfinished),
            "tasks_rerun": sum(1 for k in keys if runs.get(k, 0) > 1),
            "task_starts_on_draining_node_after_notice": sum(
                1 for k, n, t in rows if k.startswith(tag + "-") and n == node.node_id
                and t > wall0) if notice else None,
            "tune_steps_lost": last_top - first_low["resumed_from"],
            "tune_resumed_before_kill": first_low["time"] < wall_kill,
        }
        out["cold_a100_cold_at_notice"] = cold_at_notice
        out["router_max_loop_lag_s"] = lags
        if notice:
            moved = {n: x.first("a100", t0) for n, x in loads.items()}
            out["notice_to_traffic_moved_warm_s"] = round(moved["warm"] - t0, 3)
            out["notice_to_traffic_moved_cold_s"] = round(moved["cold"] - t0, 3)
            # When the cold app's router primed a100 (its wall time in Ray's KV): the
            # router's share of the delay; the rest is Serve's controller and the start.
            primes = ray_private.kv_get("serve/prime/cold", namespace="ray_ladder")
            primed = json.loads(primes).get("a100") if primes else None
            out["cold_a100_primed_s"] = (round(primed - wall0, 3)
                                         if primed and primed > wall0 else None)
            seen = serve_replica_start(self.logs, "cold", "a100", wall0)
            for what in ("asked", "ready"):
                out[f"cold_a100_{what}_s"] = (round(seen[what] - wall0, 3) if seen
                                              else None)
            if seen:  # Serve's own figure: replica created to replica ready
                out["cold_a100_replica_start_s"] = round(seen["ready"] - seen["asked"], 3)
        return out


def main() -> None:
    import cloudpickle
    import ray
    from ray import serve, tune

    from ray_ladder import ladder_task
    from ray_ladder.serve import build_app
    from ray_ladder.tune import Tuner, with_ladder

    probe = MachineProbe()
    t0 = time.monotonic()
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    logging.getLogger("ray").setLevel(logging.WARNING)
    tmp = Path(tempfile.mkdtemp(prefix="preemption-notice-"))
    cluster = LocalCluster(NODES, log_to_driver=False).start()
    flag = tmp / "stop"
    fit = None
    try:
        @ray.remote(num_cpus=0)
        class Starts:
            def __init__(self):
                self.rows = []

            def start(self, key, node_id, at):
                self.rows.append((key, node_id, at))

            def all(self):
                return list(self.rows)

        starts = Starts.options(label_selector={"ladder.node-type": "head"}).remote()

        @ladder_task(WORK, num_cpus=0)
        def work(key, starts, rung=None):
            ray.get(starts.start.remote(key, ray.get_runtime_context().get_node_id(),
                                        time.time()))
            time.sleep(0.3)
            return rung.name

        quiet = {"log_level": "WARNING", "enable_access_log": False}
        port = free_port()
        # The controller logs at INFO: its replica start lines are the cold case's figure.
        serve.start(proxy_location="HeadOnly",
                    logging_config={"log_level": "INFO", "enable_access_log": False},
                    http_options={"host": "127.0.0.1", "port": port})
        serve.run(build_app(WARM, {"h100": Model, "a100": Model},
                            deployment_options={"h100": QUICK, "a100": QUICK}),
                  name="warm", route_prefix="/warm", logging_config=quiet)
        serve.run(build_app(COLD, {"h100": Model, "a100": Model},
                            deployment_options={"h100": QUICK, "a100": COLD_A100}),
                  name="cold", route_prefix="/cold", logging_config=quiet)
        urls = {name: f"http://127.0.0.1:{port}/{name}/" for name in ("warm", "cold")}
        step_log = tmp / "steps.jsonl"
        stop = str(flag)
        tuner = Tuner(with_ladder(train, WORK), param_space={"log": str(step_log),
                                                             "honour": True},
                      run_config=tune.RunConfig(
                          storage_path=str(tmp / "tune"), verbose=0,
                          stop=lambda trial_id, result: os.path.exists(stop),
                          failure_config=tune.FailureConfig(max_failures=5)))
        fit = threading.Thread(target=tuner.fit, daemon=True)
        fit.start()
        bench = Bench(cluster, urls, work, starts, step_log)
        log("phase 1: kill without notice")
        unnoticed = bench.phase(notice=False)
        log(json.dumps(unnoticed))
        cluster.add_node("h100")
        log("phase 2: notice with a 10 s deadline, kill at the deadline")
        noticed = bench.phase(notice=True)
        log(json.dumps(noticed))
        warm, cold = noticed["serve_warm"], noticed["serve_cold"]
        cold_case = noticed["cold_a100_cold_at_notice"]
        start_s = noticed.get("cold_a100_replica_start_s") if cold_case else None
        result = {
            "deadline_s": DEADLINE_S,
            "noticed_max_latency_s": warm["max_latency_s"],
            "unnoticed_max_latency_s": unnoticed["serve_warm"]["max_latency_s"],
            "noticed_failed_requests": warm["failed_requests"],
            "unnoticed_failed_requests": unnoticed["serve_warm"]["failed_requests"],
            "noticed_hedged_requests": warm["hedged_requests"],
            "unnoticed_hedged_requests": unnoticed["serve_warm"]["hedged_requests"],
            "noticed_slow_requests": warm["slow_requests"],
            "noticed_over_hedge_wait_requests": warm["over_hedge_wait_requests"],
            "noticed_over_noise_and_hedge_wait_requests": warm[
                "over_noise_and_hedge_wait_requests"],
            "unnoticed_over_hedge_wait_requests": unnoticed["serve_warm"][
                "over_hedge_wait_requests"],
            "noticed_cold_max_latency_s": cold["max_latency_s"],
            "unnoticed_cold_max_latency_s": unnoticed["serve_cold"]["max_latency_s"],
            "noticed_cold_hedged_requests": cold["hedged_requests"],
            "unnoticed_cold_hedged_requests": unnoticed["serve_cold"]["hedged_requests"],
            "noticed_cold_failed_requests": cold["failed_requests"],
            "noticed_tasks_rerun": noticed["tasks_rerun"],
            "unnoticed_tasks_rerun": unnoticed["tasks_rerun"],
            "noticed_tasks_lost": noticed["tasks_lost_30s_after_load"],
            "unnoticed_tasks_lost": unnoticed["tasks_lost_30s_after_load"],
            "noticed_task_starts_on_draining_node": noticed[
                "task_starts_on_draining_node_after_notice"],
            "noticed_tune_steps_lost": noticed["tune_steps_lost"],
            "unnoticed_tune_steps_lost": unnoticed["tune_steps_lost"],
            "notice_to_traffic_moved_s": noticed["notice_to_traffic_moved_warm_s"],
            "notice_to_traffic_moved_case": "warm (a100 keeps a standby replica)",
            "notice_to_traffic_moved_cold_s": (noticed["notice_to_traffic_moved_cold_s"]
                                               if cold_case else None),
            "cold_case_measured": cold_case if cold_case else (
                "no: a hedge had woken the cold app's a100 replica before the notice"),
            "cold_next_rung_replica_start_s": start_s,
            "cold_next_rung_replica_start_source": "Serve controller's log: Starting Replica "
                                                   "-> started successfully",
            "goals": {
                "noticed_hedged_requests_0": warm["hedged_requests"] + cold["hedged_requests"]
                == 0,
                # No request after the notice slower than both twice the baseline's p99
                # + 0.1 s and a hedge's wait (tests/preemption/test_notice_serve_tasks.py
                # prints its own count).
                "noticed_over_noise_and_hedge_wait_requests_0":
                    warm["over_noise_and_hedge_wait_requests"] == 0,
                "noticed_tasks_rerun_0": noticed["tasks_rerun"] == 0,
                "noticed_tune_steps_lost_0": noticed["tune_steps_lost"] == 0,
                "moved_warm_le_0.5s": noticed["notice_to_traffic_moved_warm_s"] <= 0.5,
                "moved_cold_le_replica_start_plus_1s": (
                    None if not cold_case or start_s is None
                    else noticed["notice_to_traffic_moved_cold_s"] <= start_s + 1.0),
            },
            "noticed": noticed,
            "unnoticed": unnoticed,
        }
    finally:
        flag.touch()
        if fit is not None:
            fit.join(60)
        try:
            serve.shutdown()
        finally:
            cluster.shutdown()
    result["total_s"] = round(time.monotonic() - t0, 1)
    result["machine"] = probe.report()
    print(json.dumps(result), file=JSON_OUT, flush=True)


if __name__ == "__main__":
    from _json_out import json_stdout

    JSON_OUT = json_stdout()
    main()
