"""The task ladder's retry rules, one by one, without Ray (microseconds each)."""

from __future__ import annotations

import pytest

from ray_ladder.task.policy import (
    NODE_DIED_SUSPECT_S,
    WORKER_CRASH_SUSPECT_S,
    Action,
    AttemptFailure,
    admit,
    node_in,
    on_attempt_failure,
    on_call_error,
    on_pending_timeout,
)

NODE = "ab" * 28


def test_an_attempt_the_ladder_stopped_to_fall_falls_with_its_reason() -> None:
    f = AttemptFailure("TaskCancelledError", cancelled="not scheduled within 2s",
                       cancel_cause="timeout", cancel_falls=True, rung_gone=True)
    assert on_attempt_failure(f) == Action("fall", "not scheduled within 2s", cause="timeout")


def test_an_attempt_stopped_because_its_rung_went_away_is_retried_not_fallen() -> None:
    f = AttemptFailure("TaskCancelledError", cancelled="h100 became unobtainable",
                       cancel_cause="unobtainable")
    assert on_attempt_failure(f) == Action("retry", "h100 became unobtainable",
                                           cause="unobtainable")


def test_fallback_on_errors_fall_one_rung_before_any_other_rule() -> None:
    f = AttemptFailure("OutOfMemoryError", "8 GiB", fallback=True, rung_gone=True)
    assert on_attempt_failure(f) == Action("fall", "OutOfMemoryError: 8 GiB", cause="failed",
                                           error="OutOfMemoryError")


def test_a_dead_node_is_retried_and_suspected_for_a_minute() -> None:
    f = AttemptFailure("NodeDiedError", "gone", rung_gone=True, node=NODE)
    assert on_attempt_failure(f) == Action("retry", f"NodeDiedError on node {NODE[:8]}",
                                           NODE, NODE_DIED_SUSPECT_S, cause="failed",
                                           error="NodeDiedError")


def test_a_crashed_worker_suspects_its_node_only_briefly() -> None:
    f = AttemptFailure("WorkerCrashedError", "crash", rung_gone=True, worker_crash=True,
                       node=NODE)
    assert on_attempt_failure(f).suspect_ttl_s == WORKER_CRASH_SUSPECT_S


def test_the_node_comes_from_the_message_when_the_attempt_never_said() -> None:
    f = AttemptFailure("NodeDiedError", f"The node with node ID: {NODE} died", rung_gone=True)
    action = on_attempt_failure(f)
    assert action.kind == "retry" and action.suspect_node == NODE


def test_a_gone_rung_without_a_known_node_suspects_nothing() -> None:
    action = on_attempt_failure(AttemptFailure("ObjectLostError", "lost", rung_gone=True))
    assert action == Action("retry", "ObjectLostError", None, 0.0, cause="failed",
                            error="ObjectLostError")


def test_a_failed_stream_is_the_answer_of_a_single_call() -> None:
    f = AttemptFailure("RayTaskError", "cannot pickle", stream_failed=True, batch_size=1)
    assert on_attempt_failure(f) == Action("raise")


def test_a_failed_stream_of_a_batch_splits_it_to_find_the_culprit() -> None:
    f = AttemptFailure("RayTaskError", "cannot pickle", stream_failed=True, batch_size=4)
    assert on_attempt_failure(f) == Action("split")


def test_any_other_error_goes_to_the_caller() -> None:
    assert on_attempt_failure(AttemptFailure("ValueError", "bad")).kind == "raise"


def test_a_call_error_falls_only_when_fallback_on_matches() -> None:
    assert on_call_error("MemoryError", "big", fallback=True) == Action(
        "fall", "MemoryError: big", cause="failed", error="MemoryError")
    assert on_call_error("ValueError", "bad", fallback=False) == Action("raise")


@pytest.mark.parametrize(("lower", "ahead", "expected"), [
    (False, 3, Action("wait")),
    (True, 3, Action("fall", "not scheduled within 2.5s (3 attempt(s) ahead)",
                     cause="timeout")),
    (True, None, Action("fall", "not scheduled within 2.5s", cause="timeout")),
])
def test_a_pending_timeout_falls_only_when_something_below_can_take_it(
        lower: bool, ahead: int | None, expected: Action) -> None:
    assert on_pending_timeout(2.5, lower_obtainable=lower, ahead=ahead) == expected


def test_admission_exhausts_on_attempts_before_asking_about_rungs() -> None:
    assert admit(3, 3, routable=True) == Action("exhaust", "max_attempts (3) reached")
    assert admit(3, 3, routable=False).reason == "max_attempts (3) reached"
    assert admit(1, 3, routable=False) == Action("exhaust", "no eligible rung obtainable",
                                                 cause="no_rung")
    assert admit(0, 3, routable=True) == Action("run")


def test_the_cause_is_data_the_words_never_decide_it() -> None:
    # A cancel's cause is what the ladder stopped it for, whatever its sentence says.
    f = AttemptFailure("TaskCancelledError", cancelled="reworded: it took too long",
                       cancel_cause="busy", cancel_falls=True)
    assert (on_attempt_failure(f).cause, on_attempt_failure(f).error) == ("busy", None)
    # An error's class is recorded apart from its message (which may name anything).
    f = AttemptFailure("NodeDiedError", "timeout within unobtainable", rung_gone=True)
    assert (on_attempt_failure(f).cause, on_attempt_failure(f).error) == (
        "failed", "NodeDiedError")


def test_node_ids_are_read_only_from_the_exact_form_ray_prints() -> None:
    assert node_in(f"... node ID: {NODE} ...") == NODE
    assert node_in("node ID: abc") is None
