"""Pure placement arithmetic: demand, label selectors, fitting, rung capacity."""

from __future__ import annotations

from ray_ladder import Ladder, Rung
from ray_ladder.core.placement import (
    NodeState,
    demand,
    fits,
    label_matches,
    ladder_capacity,
    rung_capacity,
)


def node(total, available=None, labels=None, alive=True, node_id="n"):
    return NodeState(node_id, alive, total, total if available is None else available,
                     labels or {})


def test_demand_collects_every_placement_field():
    rung = Rung(name="x", resources={"ladder/h100": 2}, num_cpus=1, num_gpus=1,
                accelerator_type="H100")
    assert demand(rung) == {"ladder/h100": 2.0, "CPU": 1.0, "GPU": 1.0,
                            "accelerator_type:H100": 0.001}


def test_label_selector_operators():
    labels = {"zone": "b", "site": "onprem"}
    assert label_matches({"zone": "b"}, labels)
    assert not label_matches({"zone": "a"}, labels)
    assert label_matches({"zone": "!a"}, labels)
    assert not label_matches({"zone": "!b"}, labels)
    assert label_matches({"zone": "in(a, b)"}, labels)
    assert not label_matches({"zone": "!in(a,b)"}, labels)
    assert not label_matches({"missing": "x"}, labels)
    assert label_matches({"missing": "!x"}, labels)


def test_fits_counts_whole_placements():
    assert fits({"ladder/h100": 1}, {"ladder/h100": 8}) == 8
    assert fits({"ladder/h100": 2, "CPU": 1}, {"ladder/h100": 8, "CPU": 3}) == 3
    assert fits({"ladder/h100": 1}, {"CPU": 8}) == 0
    assert fits({}, {"CPU": 8}) == 0


def test_absent_busy_free_are_told_apart():
    rung = Rung(name="h100", resources={"ladder/h100": 1})
    assert rung_capacity(rung, [node({"CPU": 1})]).state == "absent"
    busy = rung_capacity(rung, [node({"ladder/h100": 1}, {})])
    assert (busy.total, busy.available, busy.obtainable, busy.state) == (1, 0, True, "busy")
    strict = rung_capacity(rung, [node({"ladder/h100": 1}, {})], require_available=True)
    assert not strict.obtainable
    assert rung_capacity(rung, [node({"ladder/h100": 1})]).state == "free"


def test_dead_nodes_and_label_mismatch_do_not_count():
    rung = Rung(name="eu", resources={"ladder/h100": 1}, label_selector={"site": "eu"})
    nodes = [
        node({"ladder/h100": 4}, labels={"site": "eu"}, alive=False),
        node({"ladder/h100": 4}, labels={"site": "us"}),
    ]
    assert rung_capacity(rung, nodes).total == 0
    nodes.append(node({"ladder/h100": 1}, labels={"site": "eu"}))
    assert rung_capacity(rung, nodes).total == 1


def test_cache_and_shed_always_obtainable():
    ladder = Ladder.from_dict({"name": "l", "rungs": [
        {"name": "cpu", "num_cpus": 1},
        {"name": "cache", "kind": "cache"},
        {"name": "shed", "kind": "shed"},
    ]})
    caps = ladder_capacity(ladder, [])
    assert not caps["cpu"].obtainable
    assert caps["cache"].obtainable and caps["shed"].obtainable
