"""A real Prometheus scrapes the ladder's metrics through the service-discovery file Ray
writes; after a scripted fall and climb, its HTTP API shows them, every dashboard and rule
expression returns data, and both alerts fired.

Needs Debian's ``prometheus`` package (``make test`` installs it when run as root); skipped,
saying so, where it is missing. Never faked: the server is the real binary.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import httpx
import pytest
import ray
from ray import serve

from ray_ladder import Ladder, LadderExhaustedError, ladder_task
from ray_ladder.autoscale import start_hook
from ray_ladder.cli.dashboards import alert_rules, expressions
from ray_ladder.cluster import grants, ray_private
from ray_ladder.core.fleet import Fleet
from ray_ladder.fleet import start_arbiter
from ray_ladder.serve import build_app
from ray_ladder.testing import LocalCluster, free_port, wait_until

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.ray, pytest.mark.long, pytest.mark.timeout(600),
    pytest.mark.skipif(PROMETHEUS is None, reason="Prometheus is not installed (Debian "
                       "package `prometheus`: `make test` installs it when run as root, "
                       "else `apt-get install -y prometheus`)"),
]

WEB = Ladder.from_yaml("""
name: prom-web
policy: {probe_interval_s: 0.25, pending_timeout_s: 5, max_degraded_seconds: 2,
         targets: {answer_s: 0.5, slow_after_s: 0.5}}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, cost_per_hour: 10}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.8, cost_per_hour: 4,
     standby_replicas: 1}
  - {name: cache, kind: cache, quality: 0.3, cache: {max_entries: 100, ttl_s: 600}}
  - {name: shed, kind: shed, quality: 0}
""")
BATCH = Ladder.from_yaml("""
name: prom-batch
policy: {probe_interval_s: 0.2, pending_timeout_s: 5}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, cost_per_hour: 10}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.8, cost_per_hour: 4}
""")
HOOKED = Ladder.from_yaml("""
name: prom-hook
policy: {probe_interval_s: 0.5}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}}
""")
SLOW = 120


class Model:
    def __init__(self, rung):
        self.rung = rung

    def __call__(self, payload):
        if isinstance(payload, dict) and isinstance(payload.get("sleep"), float):
            time.sleep(payload["sleep"])  # a slow answer (the ladder's target is 0.5 s)
        return {"rung": self.rung.name, "echo": payload}


cloudpickle.register_pickle_by_value(sys.modules[__name__])


@ladder_task(BATCH)
def batch(x, seconds=0.0, *, rung):
    time.sleep(seconds)
    return rung.name


def _slow_answers_until(url: str, found: Any, router: Any) -> None:
    """Three clients at once ask for 1 s answers, each again as soon as it has one, until
    ``found()``: on a busy machine three answers alone may not outlast the background
    traffic's fast ones in the router's estimate. A timeout names the router's counts."""
    stop = threading.Event()

    def post() -> None:
        with httpx.Client(timeout=SLOW) as client:
            while not stop.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    client.post(url, json={"sleep": 1.0})

    threads = [threading.Thread(target=post, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        wait_until(found, SLOW, 0.1, "h100 spilled past and found slow")
    except TimeoutError as err:
        state = router()  # the counts, and each rung's replicas and load (in flight...)
        raise TimeoutError(f"{err}; router: {state['metrics']}; rungs: {state['rungs']}; "
                           f"load: {state['load']}") from err
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=SLOW)


class Prometheus:
    """A Prometheus server of our own (its process, its port, its data folder)."""

    def __init__(self, folder: Path, sd_file: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        rules = folder / "ray-ladder-rules.yml"
        rules.write_text(alert_rules())
        config = folder / "prometheus.yml"
        config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "scrape_configs": [{"job_name": "ray", "file_sd_configs": [
                {"files": [str(sd_file)], "refresh_interval": "1s"}]}],
        }))
        self.log = open(folder / "prometheus.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={config}",
             f"--storage.tsdb.path={folder / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.http = httpx.Client(base_url=self.url, timeout=10)
        wait_until(lambda: self.http.get("/-/ready").status_code == 200, 60, 0.2,
                   "Prometheus ready")

    def query_range(self, expr: str, start: float, end: float) -> list[dict[str, Any]]:
        reply = self.http.get("/api/v1/query_range", params={
            "query": expr, "start": start, "end": end, "step": "1s"}).json()
        assert reply["status"] == "success", (expr, reply)
        return reply["data"]["result"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        reply = self.http.get("/api/v1/query", params={"query": expr}).json()
        assert reply["status"] == "success", (expr, reply)
        return reply["data"]["result"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()


class Traffic:
    """Requests to the Serve app and calls of the task from background threads."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.exhausted = 0
        self.threads = [threading.Thread(target=self._requests, daemon=True),
                        threading.Thread(target=self._calls, daemon=True)]
        for t in self.threads:
            t.start()

    def _requests(self) -> None:
        client = httpx.Client(timeout=30)
        i = 0
        while not self.stop.is_set():
            i += 1
            # Half repeat (the cache rung can answer them), half are new (shed when down).
            payload = {"q": i % 5} if i % 2 else {"q": f"new-{i}"}
            with contextlib.suppress(httpx.HTTPError):
                client.post(self.url, json=payload)
            self.stop.wait(0.05)

    def _calls(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            try:  # every 5th call is long: one is running when a node goes
                ray.get(batch.remote(i, 0.8 if i % 5 == 0 else 0.0), timeout=60)
            except LadderExhaustedError:
                self.exhausted += 1
                self.stop.wait(0.1)
            except Exception:
                self.stop.wait(0.1)

    def end(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=90)


def _replica_pid(class_name: str) -> int:
    """The process of the one ALIVE actor of ``class_name`` (Ray's state API)."""
    from ray.util.state import list_actors

    (actor,) = wait_until(lambda: list_actors(filters=[("class_name", "=", class_name),
                                                       ("state", "=", "ALIVE")]) or None,
                          SLOW, 0.2, f"the {class_name} actor")
    return int(actor.pid)


FLEET = Fleet.from_yaml("""
fleet: prom-fleet
control_period_s: 0.5
rungs: {h100: {resources: {ladder/h100: 1}, cost_per_hour: 1}}
teams:
  - {name: a, quota: {h100: 2}, cohort: c}
  - {name: b, cohort: c, reclaim_grace_s: 1}
""")


def _held(team: str) -> int:
    raw = ray_private.kv_get(grants.GRANTS_PREFIX + team, namespace=grants.KV_NAMESPACE)
    return json.loads(raw)["rungs"]["h100"]["held"] if raw else 0


@pytest.fixture(scope="module")
def run(local_cluster, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """The scripted run: on h100, fall to a100, lose a100 too (cache and shed, the task
    exhausted), h100 back (climb), a100 back; Prometheus scraping all along."""
    nodes = {n: {"num_cpus": 2, "resources": {f"ladder/{n}": 2}} for n in ("h100", "a100")}
    cluster: LocalCluster = local_cluster(
        nodes, include_dashboard=True, system_config={"metrics_report_interval_ms": 1000})
    session = Path(ray._private.worker.global_worker.node.get_session_dir_path())
    sd_file = session / "prom_metrics_service_discovery.json"
    wait_until(sd_file.exists, 60, 0.2, "Ray's dashboard writes the service-discovery file")
    prom = Prometheus(tmp_path_factory.mktemp("prometheus"), sd_file)
    traffic = None
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    proxy_location="HeadOnly")
        quick = {"graceful_shutdown_timeout_s": 1.0}
        serve.run(build_app(WEB, {"h100": Model, "a100": Model},
                            deployment_options={"h100": quick, "a100": quick}), name="web")
        start_hook(HOOKED, {"provision_timeout_s": 1.0, "retry_initial_s": 1.0,
                            "retry_max_s": 2.0, "interval_s": 0.5})
        # The fleet arbiter's team metrics: b borrows an idle h100 unit, a reclaims it.
        start_arbiter(FLEET)
        grants.report_demand("b", "prom-b", {"h100": 1})
        wait_until(lambda: _held("b") == 1, SLOW, 0.2, "b borrows a's idle h100 unit")
        grants.report_demand("a", "prom-a", {"h100": 2})
        http = httpx.Client(timeout=30)

        def router() -> dict[str, Any]:
            return http.get(f"http://127.0.0.1:{port}/-/ladder").json()

        wait_until(lambda: router()["current"] == "h100"
                   and router()["rungs"][1]["running_replicas"] >= 1, SLOW, 0.2,
                   "on h100 with a warm a100")
        start = time.time()
        traffic = Traffic(f"http://127.0.0.1:{port}/")
        wait_until(lambda: prom.query('ray_ladder_requests_total{rung="h100"}') and prom.query(
            'max(ray_ladder_current_rung{ladder="prom-web",part="serve"}) == 0'), SLOW, 0.5,
                   "Prometheus scraped traffic on h100 and the ladder on it")
        promoted = ('sum(ray_ladder_transitions_total{ladder="prom-web",direction="up",'
                    'reason="promoted"})')
        # The climbs of the start-up (shed -> a100 -> h100), counted before the fall. The
        # scrape above already holds the ladder on h100, and a climb's count is reported
        # with the rung it climbed to, so no series means none: on a busy machine h100's
        # replica may be up before a100's standby is, and the router starts on h100.
        started = prom.query(promoted)
        before = float(started[0]["value"][1]) if started else 0.0

        # The series the tests read back holds the ladder on h100 since `start` (its
        # samples lag the router by a report and a scrape interval).
        on_h100 = 'max(ray_ladder_current_rung{ladder="prom-web",part="serve"})'
        wait_until(lambda: any(int(float(v)) == 0 for series in prom.query_range(
            on_h100, start, time.time()) for _, v in series["values"]), SLOW, 0.5,
            "Prometheus holds a sample of the ladder on h100 since the start")
        # A stalled h100 replica (SIGSTOP: a hung process, a long GC pause) takes no
        # request: the router hedges them to a100 (ray_ladder_hedges_total) until it runs
        # again. A SIGKILL alone may fail requests fast (re-sent, not hedged).
        stalled = _replica_pid("ServeReplica:web:h100")
        os.kill(stalled, signal.SIGSTOP)
        try:
            wait_until(lambda: router()["metrics"]["hedges"].get("h100", 0) >= 1, SLOW, 0.1,
                       "a request the stalled h100 replica did not take, hedged")
        finally:
            os.kill(stalled, signal.SIGCONT)
        wait_until(lambda: router()["current"] == "h100", SLOW, 0.2, "back on h100")
        # Requests that take h100 1 s, past the ladder's 0.5 s target: the next ones spill
        # past it (ray_ladder_spills_total) and it is found slow (ray_ladder_slow_total),
        # then retried and climbed back to.
        _slow_answers_until(f"http://127.0.0.1:{port}/", lambda: (
            router()["metrics"]["slow"].get("h100", 0) >= 1
            and router()["metrics"]["spills"].get("h100", 0) >= 1), router)
        wait_until(lambda: router()["current"] == "h100", SLOW, 0.2, "still on h100")
        cluster.remove_node(cluster.nodes("h100")[0])  # SIGKILL: a preemption
        fall = time.time()
        wait_until(lambda: router()["current"] == "a100"
                   and router()["metrics"]["alerts"] >= 1, SLOW, 0.2, "fell; alert fired")
        # The task falls too: a call runs on a100 before a100 goes (its traffic, scraped).
        wait_until(lambda: ray.get(batch.remote(0), timeout=SLOW) == "a100", SLOW, 0.2,
                   "the task's calls run on a100")
        cluster.remove_node(cluster.nodes("a100")[0])
        wait_until(lambda: router()["current"] == "cache"
                   and router()["metrics"]["requests"].get("shed", 0) >= 20
                   and traffic.exhausted >= 5, SLOW, 0.2, "cache and shed; task exhausted")
        cluster.add_node("h100")
        wait_until(lambda: router()["current"] == "h100", SLOW, 0.2, "climbed to h100")
        climb = time.time()
        cluster.add_node("a100")
        wait_until(lambda: router()["rungs"][1]["running_replicas"] >= 1
                   and ray.get(batch.remote(0)) == "h100", SLOW, 0.2, "a100 warm again")
        wait_until(lambda: prom.query(f"{promoted} > {before}") and prom.query(
            'max(ray_ladder_current_rung{ladder="prom-web",part="serve"}) == 0'),
            SLOW, 0.5, "Prometheus scraped the climb")
        wait_until(lambda: prom.query("ray_ladder_team_reclaims_total")
                   and prom.query("ray_ladder_team_budget_spent"), SLOW, 0.5,
                   "Prometheus scraped the fleet's team metrics")
        traffic.end()
        yield {"prom": prom, "start": start, "fall": fall, "climb": climb,
               "end": time.time() + 1, "sd_file": sd_file, "cluster": cluster,
               "promoted_before": before}
    finally:
        if traffic is not None:
            traffic.end()
        serve.shutdown()
        prom.stop()


def test_prometheus_scrapes_every_node_named_in_rays_discovery_file(run):
    targets = {t for group in json.loads(run["sd_file"].read_text())
               for t in group["targets"]}
    head = f"{ray.util.get_node_ip_address()}:" \
           f"{ray._private.worker.global_worker.node.metrics_export_port}"
    assert head in targets
    active = run["prom"].http.get("/api/v1/targets").json()["data"]["activeTargets"]
    up = {t["labels"]["instance"] for t in active if t["health"] == "up"}
    assert head in up


def test_prometheus_sees_the_fall_the_climb_and_traffic_per_rung(run):
    prom, start, end = run["prom"], run["start"], run["end"]
    rung = 'max(ray_ladder_current_rung{ladder="prom-web",part="serve"})'
    # The first samples may still show the start-up's cache rung (report + scrape lag).
    before = [int(float(v)) for _, v in prom.query_range(rung, start, run["fall"])[0]["values"]]
    after = [int(float(v)) for _, v in prom.query_range(rung, run["fall"], end)[0]["values"]]
    assert 0 in before  # on h100 before the kill
    # then a100 (1), then cache (2) once a100 went too, and back on h100 (0) at the end.
    # The first samples after the kill may still show the slow spell before it (a report
    # and a scrape behind, more on a loaded machine), so the order is read from a100 on.
    on_a100 = after.index(1)
    assert 2 in after[on_a100:] and after[-1] == 0, after
    falls = prom.query('sum by (reason) (ray_ladder_transitions_total{ladder="prom-web",'
                       'direction="down"})')
    assert {r["metric"]["reason"] for r in falls} >= {"lost"}
    climbs = prom.query('sum(ray_ladder_transitions_total{ladder="prom-web",direction="up",'
                        'reason="promoted"})')
    assert float(climbs[0]["value"][1]) > run["promoted_before"]  # the climb after the fall
    traffic = {r["metric"]["rung"]: float(r["value"][1]) for r in prom.query(
        'sum by (rung) (ray_ladder_requests_total{ladder="prom-web"})')}
    assert all(traffic.get(r, 0) > 0 for r in ("h100", "a100", "cache", "shed")), traffic
    calls = {r["metric"]["rung"] for r in prom.query(
        'sum by (rung) (ray_ladder_calls_total{ladder="prom-batch"})')}
    assert calls >= {"h100", "a100", "exhausted"}
    down = prom.query_range('max(ray_ladder_degraded_seconds{ladder="prom-web"})',
                            run["fall"], run["climb"])
    assert max(float(v) for _, v in down[0]["values"]) > 2


@pytest.mark.parametrize("expr", expressions())
def test_every_dashboard_and_rule_expression_returns_data(run, expr):
    assert run["prom"].query_range(expr, run["start"], run["end"]), expr


def test_prometheus_fired_both_alerts(run):
    fired = {r["metric"]["alertname"] for r in run["prom"].query_range(
        'ALERTS{alertstate="firing"}', run["start"], run["end"])}
    assert fired >= {"LadderDegradedTooLong", "LadderExhausted"}
