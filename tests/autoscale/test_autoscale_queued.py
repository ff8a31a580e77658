"""Queued capacity on Ray's real autoscaler: a flex-start rung refused for a while, then granted.

The a100 rung serves while the h100-flex request stands (no backoff that abandons it); once
the fake cloud grants h100-flex, the ladder climbs after its hysteresis, the a100 node is
released, and no task is lost.
"""

from __future__ import annotations

import threading
import time

import pytest

from ray_ladder import Ladder
from ray_ladder.testing import wait_until

pytestmark = pytest.mark.ray

LADDER = Ladder.from_yaml("""
name: queued-as
policy: {promotion_hysteresis: 2, probe_interval_s: 0.5}
rungs:
  - {name: h100-flex, resources: {ladder/h100-flex: 1},
     capacity: {type: flex-start, max_wait_s: 600}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9}
  - {name: cpu, num_cpus: 0, resources: {ladder/cpu: 1}, quality: 0.5}
""")
# A short backoff would re-ask a stocked-out rung within seconds anyway; a long one shows
# that the queued rung is never backed off: its request must stand the whole time.
OPTIONS = {"retry_initial_s": 300.0, "retry_max_s": 600.0, "provision_timeout_s": 60.0,
           "drain_s": 1.0, "interval_s": 0.5}
FLEX = {"ladder/h100-flex": 1.0}


@pytest.fixture(scope="module")
def cluster():
    import ray

    from ray_ladder.autoscale.fake.cluster import FakeAutoscalingCluster, fake_worker_type

    c = FakeAutoscalingCluster(
        {name: fake_worker_type({f"ladder/{name}": 1}, labels={"ladder.node-type": name})
         for name in ("h100-flex", "a100")},
        head_resources={"CPU": 1, "ladder/cpu": 8}, schedule="h100-flex unavailable",
        idle_timeout_minutes=0.1)
    c.start()
    try:
        ray.init(address=c.address, logging_level="WARNING", log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def hook(cluster):
    import ray

    from ray_ladder.autoscale import start_hook

    handle = start_hook(LADDER, OPTIONS)
    ray.get(handle.state.remote(), timeout=120)
    yield handle
    from ray_ladder.autoscale import stop_hook

    stop_hook(LADDER.name)


def _state(hook) -> dict:
    import ray

    return ray.get(hook.state.remote(), timeout=30)


class Consumer:
    """Sends one small task every 0.2 s to the rung the hook says is serving."""

    def __init__(self, hook) -> None:
        import ray

        @ray.remote(max_retries=0)
        def where(rung: str) -> tuple[str, str]:
            return rung, ray.get_runtime_context().get_node_labels().get("ladder.node-type", "")

        self.hook, self.where = hook, where
        self.sent: list[tuple[float, str | None, object]] = []
        self.requests: list[list[dict]] = []  # the hook's node request at each send
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            state = _state(self.hook)
            if not state:
                continue
            rung = state["serving"]
            self.requests.append(state["request"])
            ref = None if rung is None else \
                self.where.options(**LADDER.rung(rung).placement()).remote(rung)
            self.sent.append((time.time(), rung, ref))

    def __enter__(self) -> Consumer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def test_queued_rung_stands_while_a100_serves_then_climbs_when_granted(cluster, hook):
    import ray
    from click.testing import CliRunner

    from ray_ladder.cli import main

    with Consumer(hook) as consumer:
        # 1. The flex-start request is refused: a100 serves, the queue stands.
        wait_until(lambda: _state(hook).get("serving") == "a100", 180,
                   message="serving on a100 while h100-flex is queued")
        wait_until(lambda: _state(hook)["rungs"]["h100-flex"]["failures"] >= 2, 60,
                   message="the fake cloud refused h100-flex at least twice")
        queued_from = len(consumer.requests)
        time.sleep(3.0)  # several hook steps and autoscaler updates while refused
        flex = _state(hook)["rungs"]["h100-flex"]
        assert flex["status"] == "queued" and flex["next_retry"] is None
        assert flex["queued_since"] is not None
        assert "InsufficientInstanceCapacity" in flex["last_stockout_reason"]
        standing = consumer.requests[queued_from:]
        assert standing and all(FLEX in req for req in standing)  # never dropped
        refused = [e for e in cluster.events()
                   if e["event"] == "refused" and e["node_type"] == "h100-flex"]
        assert len(refused) >= 2  # Ray's autoscaler kept trying: the request stood
        table = CliRunner().invoke(main, ["autoscale", "status", "--address", cluster.address,
                                          "--ladder", LADDER.name])
        assert table.exit_code == 0, table.output
        assert "queued since" in table.output
        kinds = [(e["kind"], e["rung"]) for e in _state(hook)["events"]]
        assert ("probe", "h100-flex") not in kinds
        # 2. Granted: the ladder climbs after the hysteresis and lets a100 go.
        cluster.set_schedule(None)
        wait_until(lambda: _state(hook).get("serving") == "h100-flex", 180,
                   message="serving on h100-flex once the queue is granted")
        wait_until(lambda: "a100" not in {n["Labels"].get("ladder.node-type")
                                         for n in ray.nodes() if n["Alive"]}, 120,
                   message="a100 node released after the climb")
        climbed = len(consumer.sent)
        wait_until(lambda: sum(r == "h100-flex" for _, r, _ in consumer.sent[climbed:]) >= 3,
                   30, message="tasks went to h100-flex after the climb")
    assert all(ref is not None for _, _, ref in consumer.sent), "no rung to send work to"
    results = ray.get([ref for _, _, ref in consumer.sent], timeout=120)  # raises if lost
    assert len(results) == len(consumer.sent) > 20
    assert all(node == (rung if rung != "cpu" else "head") for rung, node in results)
    order = [r for i, (r, _) in enumerate(results) if i == 0 or results[i - 1][0] != r]
    assert order[-2:] == ["a100", "h100-flex"]
    state = _state(hook)
    assert state["rungs"]["h100-flex"]["status"] == "up"
    kinds = [(e["kind"], e["rung"], e["direction"]) for e in state["events"]]
    assert ("transition", "h100-flex", "up") in kinds and ("released", "a100", None) in kinds
    launched = [e["node_type"] for e in cluster.events() if e["event"] == "launched"]
    assert launched.count("h100-flex") == 1  # granted once, not relaunched
