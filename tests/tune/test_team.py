"""A Tune run bound to a fleet team (pure): the binding, its demand, its grants as caps and
a reclaim notice as a move at the next checkpoint (TeamBook, no Ray)."""

from __future__ import annotations

import pytest

from ray_ladder import Ladder
from ray_ladder.cluster.capacity import CapacitySnapshot
from ray_ladder.core.placement import RungCapacity
from ray_ladder.core.selector import Selector
from ray_ladder.tune import lifecycle
from ray_ladder.tune._state import TrialState
from ray_ladder.tune.team import TeamBook, demand_user
from ray_ladder.tune.trainable import LadderTrialSpec

LADDER = Ladder.from_yaml("""
name: shared
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}}
""")


def _trial(spec: LadderTrialSpec, trial_id: str, placed: str | None,
           phase: lifecycle.Phase = "placed") -> TrialState:
    return TrialState(trial_id, spec, None, Selector(spec.trial_ladder), placed, phase=phase)


def _snap(granted: dict[str, int], going: dict[str, float | None] | None = None,
          held: dict[str, str] | None = None) -> CapacitySnapshot:
    rungs = {n: RungCapacity(n, 4, 4, 4) for n in ("h100", "a100")}
    obtainable = {n: n not in (going or {}) and n not in (held or {}) for n in rungs}
    return CapacitySnapshot(0.0, rungs, obtainable, {**(held or {})}, going or {}, granted)


def _book() -> tuple[TeamBook, list[tuple[str, str, dict[str, int]]]]:
    sent: list[tuple[str, str, dict[str, int]]] = []
    return TeamBook(report=lambda team, user, wants: sent.append((team, user, wants))), sent


def test_the_team_is_the_operators_binding_and_must_be_a_team_name() -> None:
    spec = LadderTrialSpec.build(LADDER, None, 1, team="b")
    assert spec.team == "b"
    assert LadderTrialSpec.build(LADDER, None, 1).team is None
    for bad in ("B", "team b", "", 3):
        with pytest.raises(ValueError, match="fleet team's name"):
            LadderTrialSpec.build(LADDER, None, 1, team=bad)  # type: ignore[arg-type]


def test_a_trial_cannot_ask_for_another_team() -> None:
    spec = LadderTrialSpec.build(LADDER, lambda config: {"team": config["team"]}, 1,
                                 team="b")
    with pytest.raises(ValueError, match="team"):  # a trial's constraints carry no team
        spec.constraints_for({"team": "a"})
    book, sent = _book()
    book.observe([_trial(spec, "t1", "h100")], now=0.0)
    assert [team for team, _, _ in sent] == ["b"]


def test_demand_is_the_trials_rungs_plus_one_on_the_best_while_below_it() -> None:
    spec = LadderTrialSpec.build(LADDER, None, 1, team="b")
    book, sent = _book()
    book.observe([_trial(spec, "t1", "h100"), _trial(spec, "t2", "h100")], now=0.0)
    assert sent[-1] == ("b", demand_user(_trial(spec, "t1", None)), {"h100": 2, "a100": 0})
    book.observe([_trial(spec, "t1", "h100"), _trial(spec, "t2", "a100")], now=1.0)
    assert sent[-1][2] == {"h100": 2, "a100": 1}
    # held PAUSED by the ladder (moving, or waiting for a free rung): it holds nothing
    book.observe([_trial(spec, "t1", "h100", "leaving")], now=2.0)
    assert sent[-1][2] == {"h100": 1, "a100": 0}


def test_demand_is_reported_at_most_once_a_second_and_only_for_a_team() -> None:
    bound = LadderTrialSpec.build(LADDER, None, 1, team="b")
    free = LadderTrialSpec.build(LADDER, None, 1)
    book, sent = _book()
    for now in (0.0, 0.4, 0.9, 1.0):
        book.observe([_trial(bound, "t1", "a100"), _trial(free, "t2", "h100")], now=now)
    assert len(sent) == 2 and {team for team, _, _ in sent} == {"b"}


def test_grants_cap_the_team_trials_on_a_shared_rung() -> None:
    spec = LadderTrialSpec.build(LADDER, None, 1, team="b")
    book, _ = _book()
    t1, t2 = _trial(spec, "t1", "h100"), _trial(spec, "t2", None, "parked")
    book.observe([t1, t2], now=0.0)
    snap = _snap({"h100": 1})
    assert book.free(snap, t2, "h100", 3) == 0  # t1 holds the team's one unit
    assert book.free(snap, t1, "h100", 3) == 1  # its own
    assert book.free(snap, t2, "a100", 3) == 3  # not a shared rung: the nodes decide
    assert book.free(_snap({"h100": 0}, held={"h100": "no h100 unit granted to team b"}),
                     t2, "h100", 3) == 0
    plain = LadderTrialSpec.build(LADDER, None, 1)
    assert book.free(snap, _trial(plain, "t3", None), "h100", 3) == 3  # no team: no cap


def test_a_reclaim_notice_makes_the_rung_going_away_for_the_trials_there() -> None:
    spec = LadderTrialSpec.build(LADDER, None, 1, team="b")
    book, _ = _book()
    t1, t2 = _trial(spec, "t1", "h100"), _trial(spec, "t2", "h100")
    book.observe([t1, t2], now=0.0)
    assert not book.going(_snap({"h100": 2}), t1)
    noticed = _snap({"h100": 0}, going={"h100": 130.0})
    assert book.going(noticed, t1) and book.going(noticed, t2)
    # one of two units reclaimed: the last trial by id leaves, the other stays
    partial = _snap({"h100": 1})
    assert not book.going(partial, t1) and book.going(partial, t2)
    assert not book.going(partial, _trial(spec, "t3", "a100"))


def test_going_away_moves_the_trial_at_its_checkpoint() -> None:
    # the scheduler's rule for the answer the book gives: leave, never stay on the units
    move = lifecycle.at_checkpoint("placed", "h100", "a100", going=True,
                                   order=["h100", "a100"])
    assert move.kind == "leave" and not move.release


BUDGETED = Ladder.from_yaml("""
name: budgeted
rungs:
  - {name: h100, resources: {ladder/h100: 1}, cost_per_hour: 12}
  - {name: a100, resources: {ladder/a100: 1}, cost_per_hour: 4}
  - {name: cpu, resources: {ladder/cpu: 1}, cost_per_hour: 0.5}
  - {name: shed, kind: shed}
""")


def _budget_snap(action: str, obtainable: dict[str, bool]) -> CapacitySnapshot:
    from ray_ladder.cluster.grants import BudgetHold

    rungs = {n: RungCapacity(n, 4, 4, 4) for n in ("h100", "a100", "cpu")}
    return CapacitySnapshot(0.0, rungs, obtainable, budget=BudgetHold("b", action, 90.0))


def test_a_spent_demote_budget_takes_a_running_trials_rung_above_the_floor() -> None:
    spec = LadderTrialSpec.build(BUDGETED, None, 1, team="b")
    book, _ = _book()
    # the trial fills a100 (the view counts it busy); cpu has room: a100 is above the floor
    on_a100 = _trial(spec, "t1", "a100")
    full = {"h100": False, "a100": False, "cpu": True}
    assert book.demoted(_budget_snap("demote", full), on_a100)
    # nothing cheaper obtainable now: a100 is the floor, the trial stays
    assert not book.demoted(_budget_snap("demote", {**full, "cpu": False}), on_a100)
    assert not book.demoted(_budget_snap("demote", full), _trial(spec, "t2", "cpu"))
    # queue and reject act on new work only; no budget spent, no move; no team, no move
    assert not book.demoted(_budget_snap("queue", full), on_a100)
    assert not book.demoted(CapacitySnapshot(0.0, {}, full), on_a100)


def test_a_demoted_trial_leaves_at_its_checkpoint_with_the_budget_as_its_cause() -> None:
    order = ["h100", "a100", "cpu"]
    move = lifecycle.at_checkpoint("placed", "a100", "cpu", going=False, demoted=True,
                                   order=order)
    assert (move.kind, move.phase, move.ended_by) == (
        "leave", "demoting", lifecycle.BUDGET_DEMOTED)
    assert lifecycle.resume_cause("demoting") == "lost"  # as the Serve and task ladders
    assert lifecycle.resume_reason("demoting") == lifecycle.BUDGET_DEMOTED
    assert "demoting" in lifecycle.HELD and lifecycle.on_error("demoting") == "placed"
    # not demoted: a lower target is the failure path's, the trial stays
    assert lifecycle.at_checkpoint("placed", "a100", "cpu", going=False,
                                   order=order).kind == "stay"


def test_a_demoted_trial_does_not_climb_back_while_it_fills_the_floor() -> None:
    spec = LadderTrialSpec.build(BUDGETED, None, 1, team="b")
    book, _ = _book()
    # on cpu, which it fills (the view: cpu busy, a100 free): a100 stays taken
    on_cpu = _trial(spec, "t1", "cpu")
    snap = _budget_snap("demote", {"h100": False, "a100": True, "cpu": False})
    assert book.budget_taken(snap, on_cpu) == {"a100"}
    assert book.free(snap, on_cpu, "a100", 1) == 0 and book.free(snap, on_cpu, "cpu", 0) == 0
    assert not book.demoted(snap, on_cpu)
