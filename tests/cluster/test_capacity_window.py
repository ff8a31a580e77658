"""The capacity view applies a capacity block's window (issue 19): nodes up, clock outside."""

from __future__ import annotations

from ray_ladder import Ladder, Selector
from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.core.capacity_type import WINDOW_CLOSED_REASON
from ray_ladder.testing import FakeNodes

# Usable in [1000, 1900): the block opens at 1000 and is left 100 s before its end (2000).
LADDER = Ladder.from_yaml("""
name: block
rungs:
  - {name: h100-block, resources: {ladder/h100-block: 1},
     capacity: {type: capacity-block, reservation: cr-1, leave_before_s: 100,
                start: "1970-01-01T00:16:40Z", end: "1970-01-01T00:33:20Z"}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9}
""")
NODES = FakeNodes(LADDER)
NODES.add("h100-block")
NODES.add("a100")


def view_at(now: float) -> CapacityView:
    return CapacityView(LADDER, node_source=NODES, follow_hook=False, wall_clock=lambda: now)


def test_a_block_with_nodes_is_obtainable_only_inside_its_window() -> None:
    seen = {}
    for now in (999.0, 1000.0, 1899.0, 1900.0, 2100.0):
        snap = view_at(now).refresh()
        seen[now] = snap.obtainable["h100-block"]
        assert snap.obtainable["a100"]
        assert snap.rungs["h100-block"].obtainable  # the nodes are there all along
        assert snap.why("h100-block") == ("free" if seen[now] else WINDOW_CLOSED_REASON)
    assert seen == {999.0: False, 1000.0: True, 1899.0: True, 1900.0: False, 2100.0: False}


def test_the_selector_fed_by_the_view_leaves_the_block_when_it_closes() -> None:
    selector = Selector(LADDER)
    rungs = [selector.observe(view_at(now).refresh().obtainable, now).rung
             for now in (1000.0, 1500.0, 1900.0)]
    assert rungs == ["h100-block", "h100-block", "a100"]
