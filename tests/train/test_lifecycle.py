"""A Train run's climb, notice and wait rules, one by one, without Ray or a clock."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_ladder.core.placement import PREEMPTION_NOTICE
from ray_ladder.train.lifecycle import (
    WAIT_LOG_S,
    WAIT_POLL_S,
    Climbing,
    Noticed,
    RunState,
    Steady,
    Step,
    Waiting,
    at_climb,
    awaits_park,
    climb_due,
    notice_reason,
    on_no_fit,
    on_notice,
    on_probe,
    probe_due,
    started,
    while_noticed,
)

EVERY_STATE: list[RunState] = [Steady(3, 1.0), Climbing(3, "h100x8", 1.0),
                               Noticed(3, 50.0), Noticed(3, 50.0, ended=True),
                               Waiting(3, since=1.0)]


# --- does the policy read the request the workers stopped for? ------------------------------

@pytest.mark.parametrize(("state", "awaits"), zip(EVERY_STATE, [False, True, True, False,
                                                                False], strict=True))
def test_the_park_is_read_only_while_a_climb_or_an_unended_notice_stands(
        state: RunState, awaits: bool) -> None:
    assert awaits_park(state) is awaits


# --- the workers stopped for a climb ---------------------------------------------------------

def test_a_climb_is_due_once_the_workers_stopped_for_its_request() -> None:
    climb = Climbing(2, "h100x8")
    assert climb_due(climb, parked=2) is climb


@pytest.mark.parametrize("parked", [None, 1, 3])
def test_no_climb_is_due_before_the_workers_stopped_for_it(parked: int | None) -> None:
    assert climb_due(Climbing(2, "h100x8"), parked=parked) is None


@pytest.mark.parametrize("state", [s for s in EVERY_STATE if not isinstance(s, Climbing)])
def test_no_climb_is_due_when_none_stands(state: RunState) -> None:
    assert climb_due(state, parked=3) is None


def test_a_due_climb_to_a_rung_still_obtainable_moves_and_starts_afresh() -> None:
    assert at_climb(Climbing(2, "h100x8", 7.0), obtainable=True) == Step(
        "move", Steady(2), rung="h100x8")


def test_a_due_climb_whose_rung_went_away_is_cancelled_and_the_group_goes_on() -> None:
    assert at_climb(Climbing(2, "h100x8", 7.0), obtainable=False) == Step(
        "cancel", Steady(2, 7.0), request=2)


# --- probing for a better rung -----------------------------------------------------------------

@pytest.mark.parametrize(("now", "due"), [(10.5, False), (11.0, True), (12.0, True)])
@pytest.mark.parametrize("state", [Steady(0, 10.0), Climbing(1, "h100x8", 10.0)])
def test_a_group_is_probed_every_interval(state: RunState, now: float, due: bool) -> None:
    assert probe_due(state, now, interval_s=1.0) is due


@pytest.mark.parametrize("state", [Steady(), Noticed(1), Waiting(0, since=9.0)])
def test_a_new_group_or_one_without_a_probe_time_is_probed_at_once(state: RunState) -> None:
    assert probe_due(state, 10.0, interval_s=3600.0)


def test_a_better_rung_asks_the_workers_to_stop_with_a_new_request() -> None:
    assert on_probe(Steady(4, 1.0), 9.0, "h100x8") == Step(
        "ask", Climbing(5, "h100x8", 9.0), rung="h100x8", request=5)


def test_the_standing_climbs_rung_again_changes_nothing_but_the_probe_time() -> None:
    assert on_probe(Climbing(5, "h100x8", 1.0), 9.0, "h100x8") == Step(
        "none", Climbing(5, "h100x8", 9.0))


def test_another_better_rung_replaces_the_standing_climb() -> None:
    assert on_probe(Climbing(5, "a100x8", 1.0), 9.0, "h100x8") == Step(
        "ask", Climbing(6, "h100x8", 9.0), rung="h100x8", request=6)


def test_a_climb_whose_rung_is_no_longer_better_is_cancelled() -> None:
    assert on_probe(Climbing(5, "h100x8", 1.0), 9.0, None) == Step(
        "cancel", Steady(5, 9.0), request=5)


@pytest.mark.parametrize("state", [Steady(5, 1.0), Noticed(5, None, ended=True),
                                   Waiting(5, since=0.0)])
def test_nothing_better_and_no_climb_standing_is_nothing(state: RunState) -> None:
    assert on_probe(state, 9.0, None) == Step("none", Steady(5, 9.0))


# --- a preemption notice -------------------------------------------------------------------

@pytest.mark.parametrize("state", [Steady(4), Climbing(4, "h100x8"), Noticed(4, 1.0),
                                   Noticed(4, 1.0, ended=True)])
def test_a_notice_asks_the_workers_to_stop_with_a_new_request(state: RunState) -> None:
    assert on_notice(state, deadline=60.0, parked=None) == Step(
        "notice", Noticed(5, 60.0), request=5)


def test_a_notice_replaces_a_climb_the_workers_have_not_stopped_for() -> None:
    assert on_notice(Climbing(4, "h100x8"), deadline=None, parked=3) == Step(
        "notice", Noticed(5, None), request=5)


def test_workers_stopped_for_a_climb_are_the_notices_at_once() -> None:
    assert on_notice(Climbing(4, "h100x8"), deadline=60.0, parked=4) == Step(
        "none", Noticed(4, 60.0))


def test_the_wait_ends_once_the_workers_stopped_for_the_notice() -> None:
    assert while_noticed(Noticed(4, 60.0), parked=4) == Step(
        "end_wait", Noticed(4, 60.0, ended=True))


@pytest.mark.parametrize("parked", [None, 3])
def test_the_wait_goes_on_until_the_workers_stopped_for_the_notice(parked: int | None) -> None:
    assert while_noticed(Noticed(4, 60.0), parked=parked) == Step("none", Noticed(4, 60.0))


@pytest.mark.parametrize("state", [Noticed(4, 60.0, ended=True), Steady(4),
                                   Climbing(4, "h100x8"), Waiting(4, since=0.0)])
def test_a_wait_is_ended_once_and_only_for_a_notice(state: RunState) -> None:
    assert while_noticed(state, parked=4) == Step("none", state)


def test_a_move_at_a_checkpoint_says_how_long_before_the_deadline() -> None:
    assert notice_reason(Noticed(4, 100.0, ended=True), 87.66) == (
        f"{PREEMPTION_NOTICE}: moved at a committed checkpoint, 12.3 s before the deadline")


def test_a_move_past_the_deadline_says_zero_never_a_negative_time() -> None:
    assert notice_reason(Noticed(4, 100.0, ended=True), 130.0).endswith(
        ", 0.0 s before the deadline")


def test_a_move_for_a_drain_without_a_deadline_says_so() -> None:
    assert notice_reason(Noticed(4, None, ended=True), 1.0).endswith(
        "checkpoint, no deadline")


@pytest.mark.parametrize("state", [Noticed(4, 100.0), Steady(4), Climbing(4, "x"),
                                   Waiting(4, since=0.0)])
def test_a_restart_without_an_ended_wait_was_ray_trains_own_at_the_deadline(
        state: RunState) -> None:
    assert notice_reason(state, 1.0) == f"{PREEMPTION_NOTICE}: restarted at the drain's deadline"


# --- no gang fits: wait, then give up ------------------------------------------------------

def test_the_first_wait_starts_the_clock_and_says_why() -> None:
    assert on_no_fit(Climbing(2, "h100x8"), 10.0, max_wait_s=300.0, poll_s=0.1) == Step(
        "wait", Waiting(2, since=10.0, logged_at=10.0), sleep_s=0.1, waited_s=0.0, log=True)


def test_a_wait_lasts_a_probe_interval_at_most_half_a_second() -> None:
    step = on_no_fit(Steady(), 10.0, max_wait_s=None, poll_s=60.0)
    assert step.sleep_s == WAIT_POLL_S == 0.5


def test_a_wait_says_why_again_only_after_the_log_interval() -> None:
    waiting = Waiting(0, since=0.0, logged_at=0.0)
    quiet = on_no_fit(waiting, WAIT_LOG_S, max_wait_s=None, poll_s=0.1)
    assert (quiet.log, quiet.state) == (False, waiting)
    loud = on_no_fit(waiting, WAIT_LOG_S + 0.1, max_wait_s=None, poll_s=0.1)
    assert loud.log and loud.state == Waiting(0, since=0.0, logged_at=WAIT_LOG_S + 0.1)


def test_a_wait_counts_from_its_start_and_gives_up_past_max_wait() -> None:
    waiting = Waiting(1, since=5.0, logged_at=5.0)
    assert on_no_fit(waiting, 305.0, max_wait_s=300.0, poll_s=0.1).kind == "wait"
    assert on_no_fit(waiting, 305.5, max_wait_s=300.0, poll_s=0.1) == Step(
        "exhaust", waiting, waited_s=300.5)


def test_without_max_wait_a_run_waits_as_long_as_it_takes() -> None:
    step = on_no_fit(Waiting(0, since=0.0), 1e9, max_wait_s=None, poll_s=0.1)
    assert (step.kind, step.waited_s) == ("wait", 1e9)


# --- a new group ---------------------------------------------------------------------------

@pytest.mark.parametrize("state", EVERY_STATE)
def test_a_new_group_starts_with_no_request_and_its_probe_due(state: RunState) -> None:
    assert started(state) == Steady(3, -math.inf)


# --- request numbers never repeat ----------------------------------------------------------

@given(st.lists(st.sampled_from(["probe_up", "probe_other", "probe_none", "park", "notice",
                                 "start", "no_fit"]), max_size=40))
def test_every_request_asked_has_a_number_never_used_before(ops: list[str]) -> None:
    state: RunState = Steady()
    asked: list[int] = []
    now = 0.0
    for op in ops:
        now += 1.0
        if op.startswith("probe"):
            to = {"probe_up": "h100x8", "probe_other": "a100x8", "probe_none": None}[op]
            step = on_probe(state, now, to)
        elif op == "park":
            climb = climb_due(state, state.request)
            step = (at_climb(climb, obtainable=True) if climb is not None
                    else while_noticed(state, parked=state.request))
        elif op == "notice":
            step = on_notice(state, deadline=None, parked=None)
        elif op == "no_fit":
            step = on_no_fit(state, now, max_wait_s=None, poll_s=0.1)
        else:
            step = Step("none", started(state))
        if step.kind in ("ask", "notice"):
            asked.append(step.request)
        state = step.state
    assert asked == sorted(set(asked))  # strictly increasing
