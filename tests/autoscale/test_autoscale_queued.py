"""Queued capacity on Ray's real autoscaler: a flex-start rung refused for a while, then granted.

The a100 rung serves while the h100-flex request stands (no backoff that abandons it); once
the fake cloud grants h100-flex, the ladder climbs after its hysteresis, the a100 node is
released, and no task is lost.
"""

from __future__ import annotations

import time

import pytest

from ray_ladder import Ladder
from ray_ladder.testing import wait_until
from tests.autoscale._fake import Consumer, alive_node_types, fake_cluster
from tests.autoscale._fake import hook_state as _state

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
    with fake_cluster(("h100-flex", "a100"), "h100-flex unavailable") as c:
        yield c


@pytest.fixture(scope="module")
def hook(cluster):
    import ray

    from ray_ladder.autoscale import start_hook

    handle = start_hook(LADDER, OPTIONS)
    ray.get(handle.state.remote(), timeout=120)
    yield handle
    from ray_ladder.autoscale import stop_hook

    stop_hook(LADDER.name)


def test_queued_rung_stands_while_a100_serves_then_climbs_when_granted(cluster, hook):
    from click.testing import CliRunner

    from ray_ladder.cli import main

    with Consumer(hook, LADDER) as consumer:
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
        wait_until(lambda: "a100" not in alive_node_types(), 120,
                   message="a100 node released after the climb")
        climbed = len(consumer.sent)
        wait_until(lambda: sum(r == "h100-flex" for _, r, _ in consumer.sent[climbed:]) >= 3,
                   30, message="tasks went to h100-flex after the climb")
    results = consumer.results()  # raises if any task was lost
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
