"""The fleet's one node table (cluster/node_table.py): what a reader uses, when it reads
the GCS itself, and how often it asks the KV; no Ray (clocks and the KV are injected)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ray_ladder.cluster.capacity import ray_node_states, resolve_node_source
from ray_ladder.cluster.node_table import (
    RECHECK_S,
    SharedNodeTable,
    Table,
    _Latest,
    decode,
    encode,
    usable,
)
from ray_ladder.core.placement import NodeState
from ray_ladder.testing import FakeNodes

GCS = [NodeState("gcs-node", True, {"CPU": 1.0}, {"CPU": 1.0})]


class World:
    """A wall clock, a monotonic clock and a KV value, all set by the test; counts KV reads."""

    def __init__(self) -> None:
        self.wall, self.mono = 1000.0, 50.0
        self.value: bytes | None = None
        self.kv_reads = 0
        self.latest = _Latest()

    def kv_get(self) -> bytes | None:
        self.kv_reads += 1
        return self.value

    def publish(self, nodes: list[NodeState], every_s: float = 0.25) -> None:
        self.value = encode(nodes, self.wall, every_s)

    def tick(self, s: float) -> None:
        self.wall += s
        self.mono += s

    def reader(self, max_age_s: float) -> SharedNodeTable:
        return SharedNodeTable(max_age_s, direct=lambda: list(GCS), kv_get=self.kv_get,
                               wall_clock=lambda: self.wall, clock=lambda: self.mono,
                               latest=self.latest)


def cluster_nodes() -> list[NodeState]:
    nodes = FakeNodes()
    nodes.add({"ladder/h100": 2}, labels={"ladder.rung": "h100"})
    (going,) = nodes.add({"ladder/a100": 1})
    nodes.drain(going, deadline=1234.5)
    return nodes()


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@given(st.lists(st.builds(
    NodeState, node_id=names, alive=st.booleans(),
    total=st.dictionaries(names, st.floats(0, 1e6)),
    available=st.dictionaries(names, st.floats(0, 1e6)),
    labels=st.dictionaries(names, names), draining=st.booleans(),
    drain_deadline=st.none() | st.floats(0, 2e9)), max_size=5))
def test_a_published_table_reads_back_as_the_same_nodes(nodes) -> None:
    table = decode(encode(nodes, 12.5, 0.25))
    assert list(table.nodes) == nodes and (table.published, table.every_s) == (12.5, 0.25)


def test_a_fresh_table_serves_every_reader_of_the_process_with_one_kv_read() -> None:
    world = World()
    world.publish(cluster_nodes())
    first, second = world.reader(1.0), world.reader(0.5)
    world.tick(0.1)
    assert first() == cluster_nodes() and second() == cluster_nodes()
    assert world.kv_reads == 1
    assert (first.last, second.last) == ("shared", "shared")


def test_a_table_older_than_the_readers_interval_is_not_used() -> None:
    world = World()
    world.publish(cluster_nodes())
    reader = world.reader(0.5)
    world.tick(0.6)  # the arbiter missed a tick: this read goes to the GCS
    assert reader() == GCS and reader.last == "gcs"
    world.publish(cluster_nodes())  # its next table is used at once (no back-off)
    assert reader() == cluster_nodes() and reader.last == "shared"


def test_without_an_arbiter_a_reader_asks_the_kv_once_per_recheck_period() -> None:
    world = World()
    reader = world.reader(0.25)
    for _ in range(10):
        assert reader() == GCS
        world.tick(0.1)
    assert world.kv_reads == 1 and reader.reads == {"shared": 0, "gcs": 10}
    world.tick(RECHECK_S)
    world.publish(cluster_nodes())  # an arbiter started
    assert reader() == cluster_nodes()
    assert world.kv_reads == 2


def test_a_table_published_less_often_than_a_reader_refreshes_is_not_for_it() -> None:
    world = World()
    world.publish(cluster_nodes(), every_s=1.0)
    fast, slow = world.reader(0.25), world.reader(2.0)
    assert fast() == GCS and slow() == cluster_nodes()
    assert fast() == GCS  # backed off: no KV read for the fast one until the recheck
    assert world.kv_reads == 1


def test_clocks_that_disagree_cannot_make_an_old_table_look_fresh() -> None:
    world = World()
    world.publish(cluster_nodes())
    world.wall -= 5.0  # the reader's wall clock is 5 s behind the arbiter's
    assert world.reader(0.5)() == GCS
    world.wall += 5.0
    reader = world.reader(0.5)
    assert reader() == cluster_nodes()
    world.mono += 0.6  # used by this process longer than the interval: stale whatever
    assert reader() == GCS  # the wall clock says


def test_usable_names_the_three_rules() -> None:
    table = Table(published=100.0, every_s=0.5, nodes=())
    assert usable(table, 0.5, 100.5) and usable(table, 0.5, 99.5)
    assert not usable(table, 0.5, 100.51) and not usable(table, 0.4, 100.0)


def test_takers_with_an_interval_read_the_shared_table_the_arbiter_reads_the_gcs() -> None:
    shared = resolve_node_source(None, "CapacityView", max_age_s=0.25)
    assert isinstance(shared, SharedNodeTable) and shared.max_age_s == 0.25
    assert resolve_node_source(None, "FleetArbiter") is ray_node_states
    nodes = FakeNodes()
    assert resolve_node_source(nodes, "CapacityView", max_age_s=0.25) is nodes
