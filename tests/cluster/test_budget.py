"""Budgets acting on a team's ladders without Ray: the one rule (grants.budget_rungs), the
arbiter's window end in the team's entry, and a team's capacity view demoting (issue 28)."""

from __future__ import annotations

import pickle

import pytest

from ray_ladder import BudgetExhaustedError, Ladder, LadderExhaustedError
from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.cluster.grants import (
    BUDGET_HELD,
    BudgetHold,
    budget_hold,
    budget_rungs,
    team_entry,
)
from ray_ladder.core.arbiter import Holdings, decide
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.fleet import Fleet
from ray_ladder.serve import http
from ray_ladder.testing import FakeNodes

COSTS = {"h100": 12.0, "a100": 4.0, "cpu-us": 0.5, "cpu-eu": 1.0, "free": 0.0}
ALL = ["h100", "a100", "cpu-us", "cpu-eu", "free"]
UP = dict.fromkeys(ALL, True)


# --- the rule --------------------------------------------------------------------------------

def test_ok_takes_nothing() -> None:
    assert budget_rungs("ok", COSTS, ALL, UP) == []


def test_demote_keeps_only_the_cheapest_obtainable_rungs() -> None:
    up = {**UP, "free": False}
    assert budget_rungs("demote", COSTS, ALL, up) == ["h100", "a100", "cpu-eu"]
    # ties at the floor both stay
    assert budget_rungs("demote", {"a": 2.0, "b": 1.0, "c": 1.0}, ["a", "b", "c"],
                        {"a": True, "b": True, "c": True}) == ["a"]


def test_demote_falls_only_as_far_as_what_is_obtainable_now() -> None:
    up = {"h100": True, "a100": True, "cpu-us": False, "cpu-eu": False, "free": False}
    assert budget_rungs("demote", COSTS, ALL, up) == ["h100"]


def test_demote_never_takes_a_free_rung_nor_a_rung_outside_the_eligible_ones() -> None:
    assert budget_rungs("demote", COSTS, ALL, UP) == ["h100", "a100", "cpu-us", "cpu-eu"]
    # an eu-only ladder's floor is its own cheapest rung: the us rung is not considered
    eu = ["h100", "cpu-eu"]
    assert budget_rungs("demote", COSTS, eu, UP) == ["h100"]
    assert "cpu-us" not in budget_rungs("demote", COSTS, eu, UP)


def test_queue_and_reject_take_every_priced_rung_whatever_is_obtainable() -> None:
    for action in ("queue", "reject"):
        assert budget_rungs(action, COSTS, ALL, {}) == ["h100", "a100", "cpu-us", "cpu-eu"]


def test_the_hold_reads_the_entry_and_an_old_entry_without_an_end() -> None:
    assert budget_hold(None) is None and budget_hold({"team": "b", "budget": "ok"}) is None
    hold = budget_hold({"team": "b", "budget": "queue", "budget_until": 160.0})
    assert hold == BudgetHold("b", "queue", 160.0)
    assert hold.retry_after_s(100.0, 5.0) == 60.0 and "60 s more" in hold.reason(100.0)
    old = budget_hold({"team": "b", "budget": "reject"})  # an arbiter before budget_until
    assert old == BudgetHold("b", "reject", None) and old.retry_after_s(100.0, 5.0) == 5.0


# --- the arbiter publishes the window's end ----------------------------------------------------

FLEET = Fleet.from_dict({"fleet": "f", "rungs": {"h100": {"resources": {"g": 1},
                                                           "cost_per_hour": 3600.0}},
                         "teams": [{"name": "b", "quota": {"h100": 1},
                                    "budget": {"max_cost": 1.5, "window_s": 10.0,
                                               "on_exhausted": "reject"}}]})


def test_the_spent_window_end_is_in_the_round_and_the_entry_and_it_rolls_over() -> None:
    state = Holdings()
    rounds = []
    for now in (0.0, 1.0, 2.0, 3.0, 10.0, 11.0):
        out = decide(FLEET, state, {"h100": 1}, {"b": {"h100": 1}}, now)
        rounds.append((now, out.budget["b"], out.budget_until.get("b")))
        entry = team_entry("f", "b", out, ["h100"], now)
        assert entry["budget_until"] == out.budget_until.get("b")
        state = out.state
    # one unit at 3600/h costs 1 per second: 2 spent after the round at 2 s (>= 1.5),
    # seen by the next round, which grants b no priced unit until the window ends at 10 s
    assert rounds[:4] == [(0.0, "ok", None), (1.0, "ok", None), (2.0, "ok", None),
                          (3.0, "reject", 10.0)]
    assert rounds[4][1] == "ok" and rounds[4][2] is None  # the window rolled over


# --- a team's capacity view demotes --------------------------------------------------------------

LADDER = Ladder.from_yaml("""
name: budget
rungs:
  - {name: h100, resources: {ladder/h100: 1}, cost_per_hour: 12}
  - {name: a100, resources: {ladder/a100: 1}, cost_per_hour: 4, quality: 0.9,
     tags: {jurisdiction: eu}}
  - {name: cpu-us, resources: {ladder/cpu-us: 1}, cost_per_hour: 0.5, quality: 0.5,
     tags: {jurisdiction: us}}
  - {name: cpu-eu, resources: {ladder/cpu-eu: 1}, cost_per_hour: 1, quality: 0.5,
     tags: {jurisdiction: eu}}
  - {name: shed, kind: shed}
""")


def _view(entry: dict | None, constraints: Constraints | None = None,
          rungs: tuple[str, ...] = ("h100", "a100", "cpu-us", "cpu-eu")) -> CapacityView:
    nodes = FakeNodes(LADDER)
    for rung in rungs:
        nodes.add(rung)
    return CapacityView(LADDER, node_source=nodes, follow_hook=False, team="b",
                        grant_source=lambda team: entry, wall_clock=lambda: 100.0,
                        constraints=constraints)


def _entry(budget: str, until: float | None = 160.0, h100: int = 1) -> dict:
    return {"team": "b", "budget": budget, "budget_until": until,
            "rungs": {"h100": {"held": h100, "noticed": 0, "deadline": None}}}


def test_a_demoted_team_sees_only_its_cheapest_rung_with_the_cause_as_data() -> None:
    snap = _view(_entry("demote")).refresh()
    assert [n for n, ok in snap.obtainable.items() if ok and n != "shed"] == ["cpu-us"]
    assert snap.held_kind == {"h100": BUDGET_HELD, "a100": BUDGET_HELD,
                              "cpu-eu": BUDGET_HELD}
    assert snap.why("a100") == "team b's budget is spent (demote) for 60 s more"
    assert snap.budget == BudgetHold("b", "demote", 160.0)


def test_a_demoted_eu_bound_team_falls_to_its_eu_rung_never_the_cheaper_us_one() -> None:
    snap = _view(_entry("demote"), Constraints(jurisdiction="eu")).refresh()
    assert snap.obtainable["cpu-eu"] is True  # its own cheapest rung, though cpu-us is cheaper
    assert snap.held_kind == {"a100": BUDGET_HELD}  # its eu rungs only: cpu-us is not its


def test_a_rung_without_a_grant_is_no_floor_the_demote_rule_reads_the_granted_view() -> None:
    # no h100 grant and cpu rungs gone: a100 is the cheapest left, so it stays
    snap = _view(_entry("demote", h100=0), rungs=("h100", "a100")).refresh()
    assert snap.obtainable["a100"] is True and "a100" not in snap.held_kind
    assert snap.why("h100") == "no h100 unit granted to team b"


def test_queue_and_reject_do_not_move_the_ladder_and_ok_climbs_back() -> None:
    for action in ("queue", "reject"):
        snap = _view(_entry(action)).refresh()
        assert all(snap.obtainable.values()) and snap.held_kind == {}
        assert snap.budget is not None and snap.budget.action == action
    entry = _entry("demote")
    view = _view(entry)
    assert view.refresh().obtainable["h100"] is False
    entry.update(budget="ok", budget_until=None)  # the window rolled over
    snap = view.refresh()
    assert snap.obtainable["h100"] is True and snap.budget is None and snap.held_kind == {}


# --- the error --------------------------------------------------------------------------------

def test_the_error_is_an_exhaustion_with_the_team_and_the_window_end_and_pickles() -> None:
    err = BudgetExhaustedError("budget", [], 60.0, team="b", until=160.0)
    assert isinstance(err, LadderExhaustedError) and "team 'b'" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert (back.team, back.until, back.retry_after_s) == ("b", 160.0, 60.0)
    assert http.refusal_status(err) == 429
    assert http.refusal_status(LadderExhaustedError("budget")) == 503
    body, headers = http.unavailable(err, 0.0)
    assert body["team"] == "b" and headers["Retry-After"] == "60"


@pytest.mark.parametrize("action", ["demote", "queue", "reject"])
def test_no_budget_rule_widens_the_constraints(action: str) -> None:
    eu = [r.name for r in LADDER.eligible(Constraints(jurisdiction="eu")) if r.is_compute]
    taken = budget_rungs(action, {r.name: r.cost_per_hour for r in LADDER.rungs}, eu, UP)
    assert set(taken) <= set(eu)
