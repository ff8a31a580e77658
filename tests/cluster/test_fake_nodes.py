"""FakeNodes, the node source's fake: each change shows in a CapacityView fed by it (no Ray)."""

from __future__ import annotations

import pytest

from ray_ladder import Ladder
from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.core.placement import PREEMPTION_NOTICE
from ray_ladder.testing import FakeNodes, node_type_for_rung

LADDER = Ladder.from_dict({
    "name": "fake",
    "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}, "num_cpus": 1,
         "label_selector": {"zone": "in(eu-1,eu-2)", "spot": "!true"}},
        {"name": "a100", "resources": {"ladder/a100": 1}, "accelerator_type": "A100"},
        {"name": "cpu", "num_cpus": 2},
        {"name": "shed", "kind": "shed"},
    ],
})


def view(nodes: FakeNodes, **kw) -> CapacityView:
    return CapacityView(LADDER, 0, node_source=nodes, follow_hook=False, **kw)


def test_a_node_built_for_a_rung_advertises_what_local_cluster_gives_it() -> None:
    nodes = FakeNodes(LADDER)
    [h100] = nodes.add("h100", labels={"pool": "big"})
    state = nodes.node(h100)
    assert h100 == "h100-1" and state.alive and not state.draining
    assert state.total == state.available == {"ladder/h100": 1.0, "CPU": 1}
    assert state.labels == {"zone": "eu-1", "ladder.rung": "h100", "pool": "big"}
    local = node_type_for_rung(LADDER.rung("a100"))
    [a100] = nodes.add(LADDER.rung("a100"))  # a Rung works as well as its name
    assert local is not None and nodes.node(a100).labels == dict(local.labels)
    assert nodes.node(a100).total == {**local.resources, "CPU": local.num_cpus}
    assert nodes.node(nodes.add("cpu")[0]).total == {"CPU": 2}  # the rung's CPUs, not 1


def test_the_view_sees_nodes_arrive_die_and_leave() -> None:
    nodes = FakeNodes(LADDER)
    capacity = view(nodes)
    assert not any(capacity.obtainable()[r] for r in ("h100", "a100", "cpu"))
    ids = nodes.add("h100", count=2)
    assert ids == ["h100-1", "h100-2"] and nodes.node_ids("h100") == ids
    assert capacity["h100"].total == 2 and capacity.obtainable()["h100"]
    nodes.kill("h100-1")
    assert capacity["h100"].total == 1 and nodes.node_ids() == ["h100-2"]
    assert nodes.node("h100-1").available == {}  # the GCS has nothing free on a dead node
    nodes.kill("h100-2")
    assert not capacity.obtainable()["h100"] and capacity["h100"].state == "absent"
    assert [n.node_id for n in nodes()] == ["h100-1", "h100-2"]  # dead nodes stay listed
    nodes.remove("h100-1")
    assert [n.node_id for n in nodes()] == ["h100-2"]
    assert nodes.add("h100", node_id="h100-1") == ["h100-1"]  # the id may come back
    assert capacity.obtainable()["h100"] and nodes.add("h100") == ["h100-3"]


def test_the_view_sees_a_drain_as_a_preemption_notice_with_its_deadline() -> None:
    nodes = FakeNodes(LADDER)
    [h100] = nodes.add("h100")
    nodes.add("cpu")
    capacity = view(nodes, wall_clock=lambda: 1000.0)
    nodes.drain(h100, deadline=1030.0)
    state = nodes.node(h100)
    assert (state.alive, state.draining, state.drain_deadline) == (True, True, 1030.0)
    snap = capacity.snapshot()
    assert snap.going_away == {"h100": 1030.0} and not snap.obtainable["h100"]
    assert snap.held["h100"].startswith(PREEMPTION_NOTICE) and "in 30.0 s" in snap.held["h100"]
    assert snap.obtainable["cpu"]
    nodes.drain(nodes.add("h100")[0])  # a second, draining with no deadline
    assert view(nodes).snapshot().going_away == {"h100": None}  # one could stay forever


def test_the_view_sees_units_taken_and_given_back() -> None:
    nodes = FakeNodes(LADDER)
    [cpu] = nodes.add("cpu")
    busy = view(nodes, require_available=True)
    nodes.use(cpu, {"CPU": 1.5})
    assert nodes.node(cpu).available == {"CPU": 0.5}
    assert busy["cpu"].state == "busy" and not busy.obtainable()["cpu"]
    assert view(nodes).obtainable()["cpu"]  # busy is still obtainable without require_available
    nodes.free(cpu, {"CPU": 5})  # never more than the node has
    assert nodes.node(cpu).available == {"CPU": 2} and busy.obtainable()["cpu"]
    nodes.use(cpu)  # everything
    assert nodes.node(cpu).available == {"CPU": 0}
    nodes.free(cpu)
    assert nodes.node(cpu).available == nodes.node(cpu).total
    nodes.kill(cpu)
    nodes.free(cpu)  # what ran there died with it
    assert nodes.node(cpu).available == {}
    with pytest.raises(ValueError, match="cannot use"):
        nodes.use(cpu, {"CPU": 1})


def test_a_node_of_bare_resources_and_the_reads_count() -> None:
    nodes = FakeNodes()
    assert nodes.add({"ladder/h100": 8}, labels={"pool": "big"}) == ["node-1"]
    assert nodes.add({"CPU": 1}, node_id="big") == ["big"]
    assert nodes.node("node-1").total == {"ladder/h100": 8} and nodes.node_ids("h100") == []
    assert nodes.reads == 0
    nodes()
    view(nodes).refresh()
    assert nodes.reads == 2


@pytest.mark.parametrize(("call", "match"), [
    (lambda n: n.add("h100", node_id="h100-1"), "in the table already"),
    (lambda n: n.add("h100", node_id="x", count=2), "1 with a node_id"),
    (lambda n: n.add("h100", count=0), "count must be >= 1"),
    (lambda n: n.kill("gone"), r"unknown node 'gone'; known: \['h100-1'\]"),
    (lambda n: n.use("h100-1", {"ladder/h100": 2}), "cannot use"),
    (lambda n: n.use("h100-1", {"CPU": -1}), "cannot use"),
    (lambda n: n.free("h100-1", {"CPU": -1}), "negative"),
])
def test_a_test_s_mistake_is_an_error_that_says_what(call, match) -> None:
    nodes = FakeNodes(LADDER)
    nodes.add("h100")
    with pytest.raises(ValueError, match=match):
        call(nodes)


def test_a_rung_name_needs_the_ladder_and_names_the_rungs() -> None:
    with pytest.raises(ValueError, match="pass the ladder"):
        FakeNodes().add("h100")
    with pytest.raises(KeyError, match="rungs:"):
        FakeNodes(LADDER).add("h200")


def test_the_old_keyword_still_works_for_a_release_and_says_the_new_one() -> None:
    nodes = FakeNodes(LADDER)
    nodes.add("h100")
    with pytest.warns(DeprecationWarning, match="node_source="):
        old = CapacityView(LADDER, 0, source=nodes, follow_hook=False)
    assert old.obtainable()["h100"]
    with pytest.raises(TypeError, match="node_source= only"):
        CapacityView(LADDER, 0, source=nodes, node_source=nodes, follow_hook=False)
