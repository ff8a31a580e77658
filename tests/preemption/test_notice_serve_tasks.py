"""Preemption notices on a real LocalCluster: the top rung's node is drained with a deadline
(Ray's own drain API, reason DRAIN_NODE_REASON_PREEMPTION, or SIGTERM to the `ray start`
process that owns the node), then SIGKILLed at the deadline, under Serve and task load."""

from __future__ import annotations

import signal
import sys
import threading
import time

import cloudpickle
import httpx
import psutil
import pytest
import ray
from ray import serve

from ray_ladder import Ladder, ladder_task
from ray_ladder.cluster import ray_private
from ray_ladder.core.placement import PREEMPTION_NOTICE
from ray_ladder.serve import build_app
from ray_ladder.task import call_info
from ray_ladder.testing import free_port, wait_until
from tests.preemption._notice import Load, RayStartNode, p99, start_log

pytestmark = [pytest.mark.ray, pytest.mark.long, pytest.mark.timeout(240)]

DEADLINE_S = 8.0  # the cloud's grace period in these tests (GCP gives about 30 s)
LADDER = Ladder.from_yaml("""
name: notice-it
policy: {promotion_hysteresis: 2, probe_interval_s: 0.25, pending_timeout_s: 8}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, standby_replicas: 1}
  - {name: a100, resources: {ladder/a100: 1}, standby_replicas: 1}
""")
# Two units per node: one for the rung's Serve replica, one for task attempts.
NODES = {"h100": {"num_cpus": 1, "resources": {"ladder/h100": 2}},
         "a100": {"num_cpus": 1, "resources": {"ladder/a100": 2}}}
# Serve stops a draining replica at deadline - graceful_shutdown_timeout_s (20 s by
# default: at once for an 8 s notice), so the rungs' replicas get a short one.
QUICK = {"graceful_shutdown_timeout_s": 1.0}


class Model:
    """A small CPU model: answers with its rung's name."""

    def __init__(self, rung):
        self.rung = rung

    def __call__(self, payload):
        time.sleep(0.01)
        return {"rung": self.rung.name}


@ladder_task(LADDER, num_cpus=0)
def work(key, starts, *, rung):
    """Record this attempt's start (key, node, wall time), then work for 0.3 s."""
    ray.get(starts.start.remote(key, ray.get_runtime_context().get_node_id(), time.time()))
    time.sleep(0.3)
    return rung.name


cloudpickle.register_pickle_by_value(sys.modules[__name__])


class App:
    def __init__(self, cluster, port: int, prefix: str = "/") -> None:
        self.cluster = cluster
        self.port = port
        self.url = f"http://127.0.0.1:{port}{prefix}"
        self.client = httpx.Client(timeout=30)

    def state(self) -> dict:
        return self.client.get(self.url + "-/ladder").json()

    def rung(self, name: str) -> dict:
        return next(r for r in self.state()["rungs"] if r["name"] == name)

    def notice_falls(self, after: float) -> list[dict]:
        return [e for e in self.state()["events"] if e["time"] >= after
                and e["from"] == "h100" and e["direction"] == "down"]


@pytest.fixture(scope="module")
def app(local_cluster):
    cluster = local_cluster(NODES)
    port = free_port()
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
        serve.run(build_app(LADDER, {"h100": Model, "a100": Model},
                            deployment_options=dict.fromkeys(["h100", "a100"], QUICK)),
                  name="notice", route_prefix="/")
        yield App(cluster, port)
    finally:
        serve.shutdown()


def _on_h100(app) -> None:
    wait_until(lambda: app.client.post(app.url, json={}).headers["x-ladder-rung"] == "h100",
               90, 0.1, "serving from h100")


@pytest.fixture
def healthy(app):
    """The ladder serves from h100, with a100's standby replica running (warm). An h100
    node a failed test left draining (its kill never came) is removed first."""
    draining = ray_private.draining_nodes()
    for node in app.cluster.nodes("h100"):
        if node.node_id in draining:
            app.cluster.remove_node(node)
    if not app.cluster.nodes("h100"):
        app.cluster.add_node("h100")
    _on_h100(app)
    wait_until(lambda: app.rung("a100")["running_replicas"] >= 1, 90, 0.2, "a100 warm")
    return app


#: build_app's assign_timeout_s: a request no replica of its rung takes within it is
#: copied to the next rung (a hedge). A request that waited on the draining rung took at
#: least this long, and the router counted it.
HEDGE_WAIT_S = 0.25


def _resends(app) -> int:
    """Requests the router hedged or sent again after a failure so far (its counts)."""
    counts = app.state()["metrics"]
    return sum(counts["hedges"].values()) + sum(counts["resent"].values())


def _serve_through_notice(app, notice, kill) -> dict:
    """Load over HTTP; ``notice()`` at t0; ``kill()`` at t0 + DEADLINE_S; figures."""
    with Load(app.url, rate=20) as load:
        wait_until(lambda: load.count("h100", 0) >= 60, 60, 0.05, "baseline window on h100")
        resent_before = _resends(app)
        t0, wall0 = time.monotonic(), time.time()
        notice()
        moved = wait_until(lambda: next((r[0] for r in list(load.rows)
                                         if r[0] > t0 and r[3] == "a100"), None),
                           DEADLINE_S, 0.02, "traffic on a100 before the deadline")
        wait_until(lambda: time.monotonic() >= t0 + DEADLINE_S, DEADLINE_S + 1, 0.02)
        kill()
        t_kill = time.monotonic()
        wait_until(lambda: load.count("a100", t_kill) >= 40, 60, 0.05, "serving after the kill")
    # Baseline: answered before the notice; judged: what the notice could delay, a request
    # still open at the notice or sent before the traffic moved, or answered by the
    # draining rung. (A request sent later to a100 pays only the machine's noise: one at
    # 0.45 s against a 0.37 s limit, 8 s after the move, failed a fresh-clone CI run.)
    # Slow: over the machine's own noise (twice the baseline's p99 + 0.1 s), and at least
    # the hedge's wait, which is what a request that waited on the draining rung paid (on
    # two busy cores the noise alone reached 0.206 s against a 0.201 s limit in CI).
    base = [lat for sent, lat, *_ in load.rows[10:] if sent + lat < t0]
    limit = max(2 * p99(base) + 0.1, HEDGE_WAIT_S)
    judged = [r for r in load.rows if r[0] + r[1] >= t0 and (r[0] <= moved or r[3] == "h100")]
    return {"rows": load.rows, "t0": t0, "wall0": wall0, "moved": moved, "t_kill": t_kill,
            "limit": limit, "slow": [r for r in judged if r[1] > limit],
            "failed": [r for r in load.rows if r[2] != 200],
            "resent": _resends(app) - resent_before}


def _assert_no_cost(app, run: dict) -> None:
    """What a user relies on across a notice, under any load: no request failed, the
    ladder fell for the notice before the kill, never back on the draining rung. Whether
    a request was hedged or re-sent, or slower than the machine's own noise and a hedge's
    wait, is the machine's speed as much as the ladder's: printed here, goals of
    bench/preemption_notice.py (``noticed_hedged_requests_0``,
    ``noticed_over_noise_and_hedge_wait_requests_0``). A fresh-clone CI run beside other
    work hedged one request and lost none (issue 46)."""
    print(f"notice -> traffic on a100: {run['moved'] - run['t0']:.3f} s; max latency after "
          f"the notice {max(r[1] for r in run['rows'] if r[0] + r[1] >= run['t0']):.3f} s; "
          f"hedged or re-sent {run['resent']}; {len(run['slow'])} over "
          f"max(baseline p99 x 2 + 0.1 s, hedge wait) = {run['limit']:.3f} s "
          "(figures, not asserted: bench/preemption_notice.py)")
    assert run["failed"] == []
    falls = app.notice_falls(run["wall0"])
    assert falls and "fell on preemption notice" in falls[0]["reason"]
    # The ladder itself moved before the kill (not only a hedged request).
    fell = falls[0]["time"] - run["wall0"] + run["t0"]  # on the load's monotonic clock
    assert fell < run["t_kill"], (fell - run["t0"], run["t_kill"] - run["t0"])
    # Once on a100, never back on the draining rung. (From the fall: a request a busy
    # machine hedged to a100 before the ladder fell is not the move.)
    since = max(run["moved"], fell)
    assert not any(r[3] == "h100" and r[0] > since for r in run["rows"])


def test_serve_moves_before_the_kill_and_loses_no_request(healthy):
    app = healthy
    node = app.cluster.nodes("h100")[0]

    def notice():
        accepted, why = ray_private.drain_node(app.cluster.address, node.node_id, DEADLINE_S)
        assert accepted, why

    run = _serve_through_notice(app, notice, lambda: app.cluster.remove_node(node))
    _assert_no_cost(app, run)


def test_tasks_start_nothing_on_the_draining_node_and_lose_nothing(healthy):
    """Calls go on being sent through a drain: none starts on the draining node, none is
    lost or runs twice, and calls sent between the notice and the kill go to a100 at
    once (the ladder moved before the kill). When their attempts *start* is the machine's
    speed (a cold worker on a100: 8 s was too short on a busy CI host, issue 46)."""
    cluster = healthy.cluster
    node = cluster.nodes("h100")[0]
    starts = start_log()
    refs: dict[str, ray.ObjectRef] = {}
    sent: dict[str, float] = {}
    stop = threading.Event()

    def submit():
        i = 0
        while not stop.is_set():
            sent[f"t{i}"] = time.time()
            refs[f"t{i}"] = work.remote(f"t{i}", starts)
            i += 1
            stop.wait(0.4)

    def started() -> list[tuple[str, str, float]]:
        return ray.get(starts.all.remote())

    submitter = threading.Thread(target=submit, daemon=True)
    submitter.start()
    killed = False
    try:
        wait_until(lambda: sum(n == node.node_id for _, n, _ in started()) >= 5, 60, 0.1,
                   "attempts running on h100")
        t0 = time.monotonic()
        notice_at = time.time()
        accepted, why = ray_private.drain_node(cluster.address, node.node_id, DEADLINE_S)
        assert accepted, why
        wait_until(lambda: time.monotonic() >= t0 + DEADLINE_S, DEADLINE_S + 1, 0.02)
        cluster.remove_node(node)  # SIGKILL at the deadline
        killed, killed_at = True, time.time()
        wait_until(lambda: sum(t > killed_at for *_, t in started()) >= 3, 90, 0.1,
                   "attempts after the kill")
    finally:
        stop.set()
        submitter.join()
        if not killed:  # leave no draining node to the next test
            cluster.remove_node(node)
    answers = {key: ray.get(ref, timeout=90) for key, ref in refs.items()}  # 0 lost
    rows = started()
    on_draining = [r for r in rows if r[1] == node.node_id and r[2] > notice_at]
    assert on_draining == [], "an attempt started on the draining node after the notice"
    per_key: dict[str, int] = {}
    for key, *_ in rows:
        per_key[key] = per_key.get(key, 0) + 1
    assert sorted(per_key) == sorted(refs) and set(per_key.values()) == {1}, "a call re-ran"
    # A call still queued for h100 at the notice moved before it started: its record
    # names the notice; none ran twice (above).
    infos = {key: call_info(ref) for key, ref in refs.items()}
    moved = [a for info in infos.values() for a in info["attempts"]]
    assert all(PREEMPTION_NOTICE in a["reason"] for a in moved), moved
    # Sent between the notice and the kill: answered by a100 (moved for the notice, as
    # above, or sent there at once), and some sent straight there: the move came first.
    between = [k for k, at in sent.items() if notice_at < at < killed_at]
    assert between and all(answers[k] == "a100" for k in between), [
        (k, answers[k], infos[k]["attempts"]) for k in between]
    assert any(not infos[k]["attempts"] for k in between), "nothing went to a100 at once"
    assert set(answers.values()) == {"h100", "a100"}


def test_sigterm_to_a_ray_start_node_is_a_notice(healthy):
    """SIGTERM to `ray start --block` (what a VM's shutdown or Kubernetes sends) drains
    its node for preemption with a deadline: the ladder moves before the kill."""
    app = healthy
    cluster = app.cluster
    cluster.remove_node(cluster.nodes("h100")[0])  # the h100 node becomes a `ray start` one
    node = RayStartNode(cluster.address, node_type="h100-vm", resources={"ladder/h100": 2},
                        drain_timeout_s=DEADLINE_S)
    try:
        node.start()
        _on_h100(app)
        seen: dict[str, float | None] = {}

        def notice():
            node.sigterm()
            seen.update(wait_until(lambda: {k: v for k, v in ray_private.draining_nodes()
                                            .items() if k == node.node_id}, DEADLINE_S, 0.02,
                                   "the SIGTERMed node in the GCS's draining table"))
            seen["registered"] = time.time()

        run = _serve_through_notice(app, notice, node.kill)
    finally:
        node.kill()
    deadline = seen[node.node_id]
    # DEADLINE_S from when `ray start` handled the SIGTERM: after it was sent, before the
    # table showed it (how soon a busy machine runs the handler is Ray's speed)
    assert deadline is not None
    assert run["wall0"] + DEADLINE_S - 0.5 <= deadline <= seen["registered"] + DEADLINE_S + 0.5
    _assert_no_cost(app, run)


def test_sigterm_to_the_raylet_itself_is_no_notice(app):
    """A raylet that gets SIGTERM leaves at once (Ray 2.60's raylet main.cc): never in
    the draining table, so the ladder sees a plain loss. The notice comes from the
    `ray start` process (above) or a DrainNode call, not from the raylet."""
    cluster = app.cluster
    node = cluster.nodes("a100")[0]
    raylet = psutil.Process(ray_private.raylet_processes(node._node)[0].process.pid)
    raylet.send_signal(signal.SIGTERM)
    drained = []

    def gone() -> bool:
        drained.append(node.node_id in ray_private.draining_nodes())
        return not any(n["Alive"] for n in ray.nodes() if n["NodeID"] == node.node_id)

    wait_until(gone, 30, 0.02, "the SIGTERMed raylet's node dead")
    assert not any(drained)
    cluster.remove_node(node)
    cluster.add_node("a100")
