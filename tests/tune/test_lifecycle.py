"""A Tune trial's lifecycle rules, one by one, without Ray (microseconds each)."""

from __future__ import annotations

import typing

import pytest

from ray_ladder.core.placement import PREEMPTION_NOTICE
from ray_ladder.tune.lifecycle import (
    BUDGET_DEMOTED,
    HELD,
    Move,
    Phase,
    at_checkpoint,
    on_close,
    on_error,
    on_listed,
    on_status,
    resume_cause,
    resume_reason,
)

PHASES: tuple[Phase, ...] = typing.get_args(Phase)
ORDER = ("h100", "a100", "cpu")  # the ladder's rungs, best first
LADDER_PHASES = sorted(set(PHASES) - {"placed", "pending"})  # set by the ladder only


# --- at a checkpoint: stay, climb or leave ------------------------------------------------

def test_a_better_target_climbs_and_gives_its_placement_back() -> None:
    move = at_checkpoint("placed", "a100", "h100", going=False, order=ORDER)
    assert move == Move("climb", "climbing", "climbed to h100", release=True)


def test_a_rung_going_away_leaves_at_the_checkpoint_even_downwards() -> None:
    move = at_checkpoint("placed", "h100", "cpu", going=True, order=ORDER)
    assert move == Move("leave", "leaving", PREEMPTION_NOTICE, release=False)


def test_leaving_a_rung_going_away_keeps_nothing_of_it_even_upwards() -> None:
    move = at_checkpoint("placed", "a100", "h100", going=True, order=ORDER)
    assert (move.kind, move.release) == ("leave", False)


def test_a_lower_target_is_no_reason_to_move_at_a_checkpoint() -> None:
    assert at_checkpoint("placed", "h100", "a100", going=False,
                         order=ORDER) == Move("stay", "placed")


@pytest.mark.parametrize("going", [False, True])
def test_the_target_where_it_is_stays_even_on_a_rung_going_away(going: bool) -> None:
    assert at_checkpoint("placed", "h100", "h100", going=going, order=ORDER).kind == "stay"


@pytest.mark.parametrize(("placed", "target"), [(None, "h100"), ("h100", None), (None, None)])
def test_no_rung_or_no_target_stays(placed: str | None, target: str | None) -> None:
    assert at_checkpoint("pending", placed, target, going=True,
                         order=ORDER) == Move("stay", "pending")


# --- held by the ladder, and resumed ---------------------------------------------------------

def test_the_ladder_holds_a_trial_parked_or_paused_for_a_move() -> None:
    assert sorted(HELD) == ["climbing", "demoting", "leaving", "parked"]


@pytest.mark.parametrize(("phase", "reason"), [("parked", "capacity free"),
                                               ("climbing", "climb at checkpoint"),
                                               ("leaving", PREEMPTION_NOTICE),
                                               ("demoting", BUDGET_DEMOTED)])
def test_a_held_trial_is_placed_again_with_the_reason_it_was_held(phase: Phase,
                                                                  reason: str) -> None:
    assert resume_reason(phase) == reason


@pytest.mark.parametrize(("phase", "cause"), [("parked", "promoted"),
                                              ("climbing", "promoted"),
                                              ("leaving", "preemption_notice"),
                                              ("demoting", "lost")])
def test_a_resumed_trial_carries_its_cause_as_data(phase: Phase, cause: str) -> None:
    assert resume_cause(phase) == cause


@pytest.mark.parametrize("phase", sorted(set(PHASES) - HELD))
def test_only_a_held_trial_has_a_reason_to_be_resumed(phase: Phase) -> None:
    held = "held phases: \\['climbing', 'demoting', 'leaving', 'parked'\\]"
    with pytest.raises(ValueError, match=held):
        resume_reason(phase)
    with pytest.raises(ValueError, match="held phases"):
        resume_cause(phase)


# --- added with no rung free: held once listed -----------------------------------------------

def test_a_trial_added_with_no_rung_free_is_parked_once_tune_queues_it() -> None:
    assert on_listed("to_park", pending=True) == "parked"


def test_a_trial_added_with_no_rung_free_that_tune_did_not_queue_is_tunes() -> None:
    assert on_listed("to_park", pending=False) == "placed"


@pytest.mark.parametrize("phase", sorted(set(PHASES) - {"to_park"}))
@pytest.mark.parametrize("pending", [False, True])
def test_being_listed_changes_no_other_phase(phase: Phase, pending: bool) -> None:
    assert on_listed(phase, pending=pending) == phase


# --- Tune's status: a queued trial is promised its placement -----------------------------

def test_a_placed_trial_tune_queues_is_promised_its_placement() -> None:
    assert on_status("placed", pending=True) == "pending"


def test_a_promise_ends_when_the_trial_leaves_tunes_queue() -> None:
    assert on_status("pending", pending=False) == "placed"


@pytest.mark.parametrize(("phase", "pending"), [("placed", False), ("pending", True)])
def test_a_status_that_agrees_changes_nothing(phase: Phase, pending: bool) -> None:
    assert on_status(phase, pending=pending) == phase


@pytest.mark.parametrize("phase", LADDER_PHASES)
@pytest.mark.parametrize("pending", [False, True])
def test_tunes_status_never_overrides_the_ladders_own_phases(phase: Phase,
                                                             pending: bool) -> None:
    assert on_status(phase, pending=pending) == phase


# --- a span closes, a trial fails ----------------------------------------------------------

def test_a_closed_span_ends_the_promise() -> None:
    assert on_close("pending") == "placed"


@pytest.mark.parametrize("phase", sorted(set(PHASES) - {"pending"}))
def test_a_closed_span_keeps_every_other_phase(phase: Phase) -> None:
    assert on_close(phase) == phase


@pytest.mark.parametrize("phase", ["pending", "climbing", "leaving"])
def test_a_failure_ends_the_move_or_the_promise(phase: Phase) -> None:
    assert on_error(phase) == "placed"


@pytest.mark.parametrize("phase", ["placed", "parked", "to_park"])
def test_a_failure_keeps_a_hold_the_ladder_had_not_begun_a_move_for(phase: Phase) -> None:
    assert on_error(phase) == phase


def test_every_rule_answers_a_phase() -> None:
    # The phase is one value: whatever a rule answers is one of the phases, never a mix.
    for phase in PHASES:
        for pending in (False, True):
            assert on_listed(phase, pending=pending) in PHASES
            assert on_status(phase, pending=pending) in PHASES
        assert on_close(phase) in PHASES and on_error(phase) in PHASES
