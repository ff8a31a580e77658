"""The hook steers a Serve ladder on Ray's real autoscaler: fall on a stock-out, climb back,
give the lesser node back, and no HTTP request fails on the way."""

from __future__ import annotations

import json
import sys
import threading
import time

import cloudpickle
import httpx
import pytest

from ray_ladder import Ladder
from ray_ladder.testing import free_port, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.long, pytest.mark.timeout(600),
              pytest.mark.filterwarnings("ignore:The `metrics_interval_s`:DeprecationWarning")]

LADDER = Ladder.from_yaml("""
name: fake-serve
policy: {promotion_hysteresis: 2, probe_interval_s: 0.5, pending_timeout_s: 30}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9}
""")
# A short drain on purpose: the hook may release a100 while h100's replica is still
# starting; the router keeps a100 until h100 has a running replica, so nothing is lost.
OPTIONS = {"retry_initial_s": 2.0, "retry_max_s": 4.0, "provision_timeout_s": 60.0,
           "drain_s": 2.0, "interval_s": 0.5}
# Serve pushes request metrics every 10 s over a 30 s window by default: a released rung
# waits for its last request to leave that window. Shorter here so the test is quick.
QUICK = {"graceful_shutdown_timeout_s": 1.0,
         "autoscaling_config": {"metrics_interval_s": 0.5, "look_back_period_s": 2.0}}
SLOW = 120  # generous deadlines: the machine is small and shared


class Where:
    """A rung class that says which node type answered."""

    def __init__(self, rung) -> None:
        self.rung = rung.name

    def __call__(self, payload):
        import ray

        node = ray.get_runtime_context().get_node_labels().get("ladder.node-type")
        return {"rung": self.rung, "node": node}


def where_task(*, rung):  # the task ladder's probe: which node ran it
    import ray

    return ray.get_runtime_context().get_node_labels().get("ladder.node-type")


# Workers cannot import this test module by name: ship the rung class by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Load:
    """Posts every 0.2 s and records every answer: (time, status, rung header, node)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.results: list[tuple[float, int, str | None, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=60) as client:
            while not self._stop.wait(0.2):
                try:
                    r = client.post(self.url, json={"n": len(self.results)})
                    node = r.json().get("node") if r.status_code == 200 else None
                    self.results.append((time.time(), r.status_code,
                                         r.headers.get("x-ladder-rung"), node))
                except httpx.HTTPError as err:  # a dropped connection is a failure too
                    self.results.append((time.time(), -1, None, type(err).__name__))

    def start(self) -> Load:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=90)

    def first(self, node: str, after: float = 0.0) -> float:
        return min(t for t, s, _, n in self.results if s == 200 and n == node and t >= after)


@pytest.fixture(scope="module")
def stack():
    """Fake autoscaling cluster refusing h100, the hook, and the ladder's Serve app."""
    import ray
    from ray import serve

    from ray_ladder.autoscale import start_hook, stop_hook
    from ray_ladder.autoscale.fake.cluster import FakeAutoscalingCluster, fake_worker_type
    from ray_ladder.serve import build_app

    # Two placements a node: one for the rung's replica, one for the task ladder's probe.
    cluster = FakeAutoscalingCluster(
        {n: fake_worker_type({f"ladder/{n}": 2}, labels={"ladder.node-type": n})
         for n in ("h100", "a100")},
        schedule="h100 unavailable", idle_timeout_minutes=0.1)
    t0 = time.time()
    cluster.start()
    try:
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
        hook = start_hook(LADDER, OPTIONS)
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    proxy_location="HeadOnly")
        serve.run(build_app(LADDER, {"h100": Where, "a100": Where},
                            deployment_options={"h100": QUICK, "a100": QUICK}),
                  name="fake-serve", route_prefix="/")
        yield {"cluster": cluster, "hook": hook, "url": f"http://127.0.0.1:{port}/",
               "t0": t0}
    finally:
        try:
            try:
                serve.shutdown()
            finally:
                stop_hook(LADDER.name)
        finally:
            ray.shutdown()
            cluster.shutdown()


def _hook(stack) -> dict:
    import ray

    return ray.get(stack["hook"].state.remote(), timeout=30)


def _alive_types() -> set[str]:
    import ray

    return {n["Labels"].get("ladder.node-type") for n in ray.nodes() if n["Alive"]}


def _replicas(rung: str) -> int:
    from ray import serve

    app = serve.status().applications.get("fake-serve")
    status = app.deployments.get(rung) if app is not None else None
    return sum((status.replica_states if status is not None else {}).values())


def _answer(url: str) -> str | None:
    try:
        r = httpx.post(url, json={}, timeout=60)
    except httpx.HTTPError:
        return None
    return r.json().get("node") if r.status_code == 200 else None


def test_serve_ladder_follows_the_hook_down_and_back_up(stack):
    import ray

    from ray_ladder import ladder_task
    from ray_ladder.task.orchestrator.registry import get_orchestrator

    cluster, url = stack["cluster"], stack["url"]
    # 1. h100 refused: the hook asks for a100; its node comes up and answers.
    wait_until(lambda: _answer(url) == "a100", SLOW, 0.5, "answers from the a100 node")
    t_a100 = time.time()
    state = _hook(stack)
    assert state["rungs"]["h100"]["status"] in ("stocked_out", "probing")
    assert not any(e["event"] == "launching" and e["node_type"] == "h100"
                   for e in cluster.events())
    # A stocked-out h100 keeps no pending standby replica (demand v1 would retry undamped).
    wait_until(lambda: _hook(stack)["rungs"]["h100"]["status"] == "stocked_out"
               and _replicas("h100") == 0, SLOW, 0.2, "no h100 replica while stocked out")
    probe = ladder_task(LADDER, num_cpus=0)(where_task)
    assert ray.get(probe.remote(), timeout=SLOW) == "a100"
    load = Load(url).start()
    try:
        wait_until(lambda: len(load.results) >= 10, SLOW, 0.2, "load running on a100")
        # 2. h100 allowed again: its node comes, answers move there after the hysteresis.
        t_allow = time.time()
        cluster.set_schedule(None)
        wait_until(lambda: any(s == 200 and n == "h100" for _, s, _, n in load.results),
                   SLOW, 0.2, "answers from the h100 node")
        # 3. a100 is released: no new task lands there while its node is still up ...
        orch = get_orchestrator()

        def task_ladder_holds_a100() -> bool:
            tasks = ray.get(orch.status.remote(), timeout=30)["tasks"].values()
            return all(t["obtainable"].get("a100") is False for t in tasks)

        wait_until(lambda: _hook(stack)["rungs"]["a100"]["role"] == "released", SLOW, 0.2,
                   "hook releases a100")
        a100_up_when_held = "a100" in _alive_types()
        wait_until(task_ladder_holds_a100, SLOW, 0.2, "task ladder holds a100 back")
        a100_up_when_held &= "a100" in _alive_types()
        # ... its deployment scales to 0 and Ray's idle timeout returns the node.
        wait_until(lambda: _replicas("a100") == 0, SLOW, 0.2, "a100 deployment at 0")
        t_a100_zero = time.time()
        wait_until(lambda: "a100" not in _alive_types(), SLOW, 0.2, "a100 node released")
        t_gone = time.time()
        n = len(load.results)
        wait_until(lambda: len(load.results) >= n + 5, SLOW, 0.2, "answers after release")
    finally:
        load.stop()
    statuses = [s for _, s, _, _ in load.results]
    assert statuses.count(200) == len(statuses) > 30, [r for r in load.results if r[1] != 200]
    nodes = [n for _, _, _, n in load.results]
    assert all(r == n for _, _, r, n in load.results)  # each rung ran on its own node
    assert set(nodes[:nodes.index("h100")]) == {"a100"}
    # Once a100 is gone only h100 answers (between the climb and then, a request slow to be
    # taken by h100 may be hedged to a100: the router's choice, not a failure).
    assert {n for t, _, _, n in load.results if t > t_gone} == {"h100"}
    assert a100_up_when_held  # the hold came from the hook, not from a missing node
    assert ray.get(probe.remote(), timeout=SLOW) == "h100"
    kinds = [(e["kind"], e["rung"], e["direction"]) for e in _hook(stack)["events"]]
    assert ("transition", "h100", "up") in kinds and ("released", "a100", None) in kinds
    assert [e["node_type"] for e in cluster.events() if e["event"] == "terminated"] == ["a100"]
    t_h100 = load.first("h100", t_allow)
    print(json.dumps({  # the climb as this test saw it (machine shared, timings noisy)
        "start_to_fallback_answer_s": round(t_a100 - stack["t0"], 1),
        "capacity_return_to_top_s": round(t_h100 - t_allow, 1),
        "top_answer_to_lesser_deployment_zero_s": round(t_a100_zero - t_h100, 1),
        "lesser_node_released_s": round(t_gone - t_h100, 1),
        "requests": len(statuses), "failed": len(statuses) - statuses.count(200)}))
