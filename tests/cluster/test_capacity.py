"""Capacity view on a real LocalCluster: fall on SIGKILL, return on add, busy vs absent."""

from __future__ import annotations

import time

import pytest

from ray_ladder import Ladder, Selector
from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.testing import FakeNodes, wait_until

LADDER = Ladder.from_dict({
    "name": "cap",
    "rungs": [
        {"name": "tpu", "resources": {"ladder/tpu": 1}},
        {"name": "h100", "resources": {"ladder/h100": 1}},
        {"name": "a100", "resources": {"ladder/a100": 1}},
        {"name": "cpu", "num_cpus": 1, "quality": 0.5},
        {"name": "shed", "kind": "shed", "quality": 0},
    ],
})


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster({
        "h100": {"resources": {"ladder/h100": 1}},
        "a100": {"resources": {"ladder/a100": 1}},
    })


@pytest.mark.ray
def test_initial_capacity_and_absent_rung(cluster):
    view = CapacityView(LADDER, refresh_interval_s=0.1)
    snap = view.refresh()
    assert snap.rungs["h100"].total == 1 and snap.rungs["h100"].obtainable
    assert snap.rungs["a100"].available == 1
    assert snap.rungs["tpu"].total == 0 and snap.rungs["tpu"].state == "absent"
    assert not snap.obtainable["tpu"]
    assert snap.obtainable["shed"]
    # head (2 CPUs) + two 1-CPU workers
    assert snap.rungs["cpu"].total == 4
    assert Selector(LADDER).observe(view.obtainable(), now=0.0).rung == "h100"


@pytest.mark.ray
def test_busy_is_not_absent(cluster):
    import ray

    @ray.remote(num_cpus=0, resources={"ladder/a100": 1})
    class Holder:
        def ping(self):
            return "ok"

    holder = Holder.remote()
    ray.get(holder.ping.remote())
    view = CapacityView(LADDER, refresh_interval_s=0.05)
    strict = CapacityView(LADDER, refresh_interval_s=0.05, require_available=True)
    busy = wait_until(lambda: view.refresh().rungs["a100"].state == "busy" and view,
                      timeout_s=10, message="a100 busy")
    cap = busy.snapshot().rungs["a100"]
    assert (cap.total, cap.available, cap.obtainable) == (1, 0, True)
    assert not strict.refresh().obtainable["a100"]
    ray.kill(holder)
    wait_until(lambda: view.refresh().rungs["a100"].state == "free", timeout_s=10,
               message="a100 free again")


@pytest.mark.ray
def test_sigkill_makes_rung_unobtainable_and_add_node_brings_it_back(cluster):
    view = CapacityView(LADDER, refresh_interval_s=0.05)
    assert view.refresh().obtainable["h100"]
    node = cluster.nodes("h100")[0]
    killed = time.monotonic()
    cluster.remove_node(node)  # SIGKILL: a preemption
    wait_until(lambda: not view.obtainable()["h100"], timeout_s=10,
               message="h100 unobtainable after SIGKILL")
    noticed = time.monotonic() - killed
    # "within about a second" is measured in bench/capacity.py; here a loose bound only
    # guards against falling back to Ray's default 14 s health checks.
    assert noticed < 8, noticed
    selector = Selector(LADDER)
    assert selector.observe(view.obtainable(), now=0.0).rung == "a100"

    cluster.add_node("h100")
    wait_until(lambda: view.obtainable()["h100"], timeout_s=20,
               message="h100 obtainable after add_node")
    assert selector.observe(view.obtainable(), now=1.0).rung == "h100"


def test_cached_reads_do_not_touch_the_source():
    nodes = FakeNodes(LADDER)
    nodes.add("h100")
    now = [0.0]
    view = CapacityView(LADDER, refresh_interval_s=1.0, node_source=nodes, clock=lambda: now[0])
    for _ in range(100):
        assert view.obtainable()["h100"]
    assert nodes.reads == 1
    now[0] = 0.99
    view.obtainable()
    assert nodes.reads == 1
    now[0] = 1.0
    view.obtainable()
    assert nodes.reads == 2


def test_background_refresh_keeps_reads_nonblocking():
    nodes = FakeNodes(LADDER)
    [h100] = nodes.add("h100")
    view = CapacityView(LADDER, refresh_interval_s=0.02, node_source=nodes).start()
    try:
        assert view.obtainable()["h100"]
        nodes.kill(h100)
        wait_until(lambda: not view.obtainable()["h100"], timeout_s=5)
    finally:
        view.stop()
