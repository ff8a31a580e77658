"""A team's capacity view (CapacityView(team=)): the fleet's grants as obtainability,
a reclaim notice as going away, without Ray (FakeNodes and a scripted grants source)."""

from __future__ import annotations

from ray_ladder import Ladder
from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.testing import FakeNodes

LADDER = Ladder.from_yaml("""
name: team
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}}
""")


def _view(entry) -> CapacityView:
    nodes = FakeNodes(LADDER)
    nodes.add("h100")
    nodes.add("a100")
    return CapacityView(LADDER, node_source=nodes, follow_hook=False, team="b",
                        grant_source=lambda team: entry, wall_clock=lambda: 100.0)


def _grant(held: int, noticed: int = 0, deadline: float | None = None) -> dict:
    return {"team": "b", "rungs": {"h100": {"held": held, "noticed": noticed,
                                            "deadline": deadline}}}


def test_a_rung_with_units_granted_is_obtainable_for_the_team() -> None:
    snap = _view(_grant(1)).refresh()
    assert snap.obtainable == {"h100": True, "a100": True} and snap.going_away == {}


def test_a_shared_rung_with_no_unit_granted_is_not() -> None:
    snap = _view(_grant(0)).refresh()
    assert snap.obtainable["h100"] is False and snap.obtainable["a100"] is True
    assert snap.why("h100") == "no h100 unit granted to team b"


def test_a_reclaim_of_every_held_unit_is_going_away_with_its_deadline() -> None:
    snap = _view(_grant(2, noticed=2, deadline=130.0)).refresh()
    assert snap.obtainable["h100"] is False and snap.going_away == {"h100": 130.0}
    assert "reclaim notice" in snap.why("h100") and "30.0 s" in snap.why("h100")


def test_a_partial_reclaim_leaves_the_rung_to_the_team() -> None:
    snap = _view(_grant(2, noticed=1, deadline=130.0)).refresh()
    assert snap.obtainable["h100"] is True and snap.going_away == {}
    assert snap.granted == {"h100": 1}  # what its work may use at once


def test_without_an_arbiter_the_team_view_is_the_plain_view() -> None:
    snap = _view(None).refresh()
    assert snap.obtainable == {"h100": True, "a100": True}


def test_a_rung_with_no_unit_granted_is_a_hard_hold_the_router_does_not_place_on() -> None:
    # b's units went back to a at the reclaim's deadline while b's own h100 replica still
    # ran: b's router must not count h100 hostable and climb back onto a's unit (a soft
    # hold, like a hook's release, stays hostable when nothing better is up).
    from ray_ladder.cluster.grants import GRANT_HELD
    from ray_ladder.serve.probe import placeable_rungs

    snap = _view(_grant(0)).refresh()
    assert snap.held_kind == {"h100": GRANT_HELD}
    assert placeable_rungs(snap) == {"h100": False, "a100": True}
    assert placeable_rungs(_view(_grant(1)).refresh()) == {"h100": True, "a100": True}


def test_each_hold_writes_its_cause_as_data_with_its_reason() -> None:
    # `ray-ladder status` says why a rung is unobtainable: the cause is written where the
    # hold is, never read out of its sentence; a rung nothing holds has no why.
    denied = _view(_grant(0)).refresh()
    assert denied.why_not("h100") == {"cause": "grant",
                                      "reason": "no h100 unit granted to team b"}
    assert denied.why_not("a100") is None
    reclaimed = _view(_grant(2, noticed=2, deadline=130.0)).refresh().why_not("h100")
    assert reclaimed is not None and reclaimed["cause"] == "going_away"
    assert reclaimed["reason"].startswith("reclaim notice")
    nodes = FakeNodes(LADDER)
    nodes.add("h100")
    released = {"time": 100.0, "interval_s": 1.0,
                "rungs": {"h100": {"role": "serving"}, "a100": {"role": "released"}}}
    view = CapacityView(LADDER, node_source=nodes, hook_source=lambda name: released,
                        wall_clock=lambda: 100.0)
    assert view.refresh().why_unobtainable() == {
        "a100": {"cause": "no_node", "reason": "no alive node can host it"}}
    nodes.add("a100")
    assert view.refresh().why_unobtainable() == {
        "a100": {"cause": "released", "reason": "released by the autoscaler hook"}}


def test_a_part_sees_its_own_share_of_the_team_ledger() -> None:
    """The team holds 2 units, 1 under a notice that falls on the later part (the ledger,
    core/ledger.py): that part's view is going away, the other part's is not, and each
    counts its own units, not the team's."""
    entry = _grant(2, noticed=1, deadline=130.0)
    entry["rungs"]["h100"]["parts"] = {"app": {"held": 1, "noticed": 0},
                                       "task:work": {"held": 1, "noticed": 1}}

    def view(part: str | None) -> CapacityView:
        nodes = FakeNodes(LADDER)
        nodes.add("h100")
        nodes.add("a100")
        return CapacityView(LADDER, node_source=nodes, follow_hook=False, team="b",
                            grant_source=lambda team: entry, wall_clock=lambda: 100.0,
                            part=part)

    app, task, new = view("app").refresh(), view("task:work").refresh(), view("new").refresh()
    assert app.obtainable["h100"] is True and app.granted["h100"] == 1
    assert task.going_away == {"h100": 130.0} and task.granted["h100"] == 0
    assert new.obtainable["h100"] is False  # no share yet: it reports demand first
    assert view(None).refresh().granted["h100"] == 1  # the team's: 2 held, 1 noticed
