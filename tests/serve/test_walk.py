"""The Serve request walk's rules, one by one, without Ray (serve/walk.py)."""

from __future__ import annotations

import pytest

from ray_ladder import Constraints, Ladder
from ray_ladder.serve.state import RouterState
from ray_ladder.serve.walk import (
    CACHE_MISS,
    SHED,
    Exhausted,
    Facts,
    FromCache,
    RequestView,
    Shed,
    Try,
    Wait,
    Walk,
    decide,
    next_rung,
    shed_rung,
)

LADDER = Ladder.from_yaml("""
name: walk
rungs:
  - {name: h100, resources: {ladder/h100: 1}, tags: {jurisdiction: us}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9, tags: {jurisdiction: eu}}
  - {name: cache, kind: cache, quality: 0.3}
  - {name: shed, kind: shed}
""")
UP = {"h100": True, "a100": True}


def _view(placeable=UP, running=None, constraints=None, now=0.0) -> RequestView:
    state = RouterState(LADDER, down_cooldown_s=1.0)
    state.observe(running if running is not None else {n: 1 for n in placeable},
                  placeable, now=now)
    return RequestView(state, state.selector(constraints, now))


# --- decide: one rule each ----------------------------------------------------------------

def test_a_compute_rung_is_tried() -> None:
    assert decide(Walk(LADDER, 5.0), Facts("a100", False), 0.0) == Try("a100")


def test_a_cache_rung_is_looked_up() -> None:
    assert decide(Walk(LADDER, 5.0), Facts("cache", False), 0.0) == FromCache("cache")


def test_shed_waits_while_a_rung_can_come_back_and_time_is_left() -> None:
    assert decide(Walk(LADDER, 5.0), Facts("shed", True), 4.9) == Wait(5.0)


@pytest.mark.parametrize("now,back", [(5.0, True), (0.0, False)])
def test_shed_answers_once_time_is_up_or_nothing_can_come_back(now, back) -> None:
    assert decide(Walk(LADDER, 5.0), Facts("shed", back), now) == Shed("shed")


def test_nothing_left_waits_then_is_exhausted() -> None:
    walk = Walk(LADDER, 5.0)
    assert decide(walk, Facts(None, True), 1.0) == Wait(5.0)
    assert decide(walk, Facts(None, True), 5.0) == Exhausted()
    assert decide(walk, Facts(None, False), 1.0) == Exhausted()


# --- next_rung: where the walk goes ----------------------------------------------------------

def test_the_selectors_rung_first_then_the_best_untried_compute_rung() -> None:
    view = _view()
    assert next_rung(LADDER, view, set()) == "h100"
    assert next_rung(LADDER, view, {"h100"}) == "a100"


def test_then_the_rungs_that_answer_without_compute_in_order() -> None:
    view = _view()
    assert next_rung(LADDER, view, {"h100", "a100"}) == "cache"
    assert next_rung(LADDER, view, {"h100", "a100", "cache"}) == "shed"
    assert next_rung(LADDER, view, {"h100", "a100", "cache", "shed"}) is None


def test_a_constrained_request_never_walks_to_a_rung_it_may_not_use() -> None:
    view = _view(constraints=Constraints(jurisdiction="eu"))
    assert next_rung(LADDER, view, set()) == "a100"
    assert next_rung(LADDER, view, {"a100"}) == "cache"


def test_an_unobtainable_rung_is_skipped() -> None:
    view = _view(placeable={"h100": False, "a100": True})
    assert next_rung(LADDER, view, set()) == "a100"


# --- the walk's record ---------------------------------------------------------------------

def test_a_walk_records_tries_and_failures_with_their_causes() -> None:
    walk = Walk(LADDER, 5.0)
    view = _view()
    assert walk.next_step(view, 0.0) == Try("h100")
    walk.failed("h100", "NodeDiedError: gone", 0.1, cause="failed", error="NodeDiedError")
    assert walk.next_step(view, 0.2) == Try("a100")
    walk.failed("a100", "rung went down", 0.3, cause="rung_down")
    assert walk.next_step(view, 0.4) == FromCache("cache")
    walk.cache_missed("cache", 0.4)
    assert walk.next_step(view, 6.0) == Shed("shed")
    err = walk.refusal(7.0)
    assert [(a.rung, a.cause) for a in err.attempts] == [
        ("h100", "failed"), ("a100", "rung_down"), ("cache", "cache_miss"), ("shed", "shed")]
    assert err.attempts[2].reason == CACHE_MISS and err.attempts[3].reason == SHED
    assert err.attempts[0].error == "NodeDiedError" and err.retry_after_s == 7.0
    assert shed_rung(err.attempts) == "shed"


def test_after_a_wait_rungs_that_failed_may_be_tried_again() -> None:
    walk = Walk(LADDER, 5.0)
    view = _view()
    walk.tried.update({"h100", "a100", "cache"})
    assert walk.next_step(view, 1.0) == Wait(5.0)
    assert walk.waits == 1 and walk.next_step(view, 1.5) == Try("h100")


def test_rungs_a_request_never_takes_are_never_named() -> None:
    walk = Walk(LADDER, 5.0, never=frozenset({"h100"}))
    assert walk.next_step(_view(), 0.0) == Try("a100")


def test_an_exhausted_walk_with_no_attempt_says_no_rung_was_obtainable() -> None:
    walk = Walk(LADDER, 0.0, never=frozenset({"h100", "a100", "cache", "shed"}))
    assert walk.next_step(_view(), 0.0) == Exhausted()
    [attempt] = walk.refusal(1.0).attempts
    assert attempt.rung is None and attempt.cause == "no_rung"
    assert shed_rung(walk.attempts) is None
