"""Going away (a preemption notice) without Ray: capacity, selector words, router, metrics."""

from __future__ import annotations

from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.cluster.metrics import transition_label
from ray_ladder.core.placement import PREEMPTION_NOTICE, rung_capacity
from ray_ladder.core.selector import Selector
from ray_ladder.core.spec import Ladder
from ray_ladder.serve.state import RouterState
from ray_ladder.testing import FakeNodes

LADDER = Ladder.from_yaml("""
name: notice
policy: {promotion_hysteresis: 2, probe_interval_s: 0.5}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}}
  - {name: cpu, resources: {ladder/cpu: 1}}
""")


def _h100_draining(deadline: float | None) -> FakeNodes:
    """An h100 node on notice until ``deadline`` and an a100 node staying."""
    nodes = FakeNodes(LADDER)
    [h100] = nodes.add("h100")
    nodes.drain(h100, deadline=deadline)
    nodes.add("a100")
    return nodes


def test_a_rung_all_on_draining_nodes_is_going_away_not_absent():
    rung = LADDER.rung("h100")
    nodes = _h100_draining(50.0)
    cap = rung_capacity(rung, nodes())
    assert (cap.obtainable, cap.going_away, cap.deadline, cap.state) == (
        False, True, 50.0, "going away")
    # One node of it still staying: the rung stays (only *all* draining is going away).
    nodes.add("h100")
    cap = rung_capacity(rung, nodes())
    assert (cap.obtainable, cap.going_away, cap.available) == (True, False, 1)
    # A draining node takes no new work: never free, even with require_available.
    cap = rung_capacity(rung, _h100_draining(None)(), require_available=True)
    assert (cap.obtainable, cap.available, cap.deadline) == (False, 0, None)


def test_capacity_view_reports_going_away_with_deadline_and_reason():
    view = CapacityView(LADDER, node_source=_h100_draining(110.0), follow_hook=False,
                        wall_clock=lambda: 100.0)
    snap = view.refresh()
    assert snap.obtainable["h100"] is False and snap.going_away == {"h100": 110.0}
    assert snap.why("h100").startswith(PREEMPTION_NOTICE)
    assert "deadline in 10.0 s" in snap.why("h100")


def test_selector_falls_at_once_names_the_notice_and_never_climbs_while_draining():
    sel = Selector(LADDER)
    sel.observe({"h100": True, "a100": True}, now=0)
    snap = CapacityView(LADDER, node_source=_h100_draining(10.0), follow_hook=False,
                        wall_clock=lambda: 0.0).refresh()
    decision = sel.observe(snap.obtainable, now=1, why=snap.held, going=snap.going_away)
    assert decision.rung == "a100" and decision.direction == "down"
    assert PREEMPTION_NOTICE in decision.reason
    event = decision.event("notice")
    assert event is not None and transition_label(event.to_dict()) == "preemption_notice"
    for t in range(2, 10):  # hysteresis never counts a going-away rung
        assert sel.observe(snap.obtainable, now=t, why=snap.held).rung == "a100"
    # A fall on a dead node keeps its plain label.
    dead = Selector(LADDER)
    dead.observe({"h100": True, "a100": True}, now=0)
    fall = dead.observe({"a100": True}, now=1).event("notice")
    assert fall is not None and transition_label(fall.to_dict()) == "lost"


def _router(running: dict[str, int]) -> RouterState:
    state = RouterState(LADDER, down_cooldown_s=1.0)
    state.observe(running, {"h100": True, "a100": True, "cpu": True}, now=0)
    return state


def test_router_keeps_the_draining_rung_until_the_next_one_runs_and_warms_it():
    # a100 keeps no standby (cold): on the notice the router primes it and stays on h100.
    state = _router({"h100": 1, "a100": 0, "cpu": 0})
    placeable = {"h100": True, "a100": True, "cpu": True}
    state.observe({"h100": 1, "a100": 0, "cpu": 0}, placeable, now=1,
                  going_away={"h100": 11.0})
    assert state.current == "h100" and state.lost == []  # in-flight requests stay
    assert state.leaving == []  # nowhere warm to move open streams to: they stay
    assert state.to_prime() == ["a100"]
    # The next rung's replica answers: traffic moves at once, and the reason says why.
    decision = state.observe(None, placeable, now=2, alive=["a100"],
                             going_away={"h100": 11.0})
    assert decision.rung == "a100" and PREEMPTION_NOTICE in decision.reason
    assert state.lost == []
    assert state.leaving == ["h100"]  # open streams there move now, before the kill
    # Never climbs back while it drains, and new constrained selectors never start there.
    for t in range(3, 8):
        assert state.observe(None, placeable, now=t, going_away={"h100": 11.0}).rung == "a100"
    assert state.snapshot(8)["rungs"][0]["going_away"] is True


def test_router_falls_at_once_when_the_next_rung_is_warm():
    state = _router({"h100": 1, "a100": 1, "cpu": 0})
    decision = state.observe({"h100": 1, "a100": 1, "cpu": 0},
                             {"h100": True, "a100": True, "cpu": True}, now=1,
                             going_away={"h100": None})
    assert decision.rung == "a100" and "no deadline" in decision.reason
    assert decision.cause == "preemption_notice"  # the router's label, from data
    assert state.events[-1].cause == "preemption_notice"
