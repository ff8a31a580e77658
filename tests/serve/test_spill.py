"""Latency targets without Ray: the load estimate, slow rungs, spilling past a full rung,
and which targets a request runs under (serve/load.py, serve/walk.py, serve/targets.py)."""

from __future__ import annotations

import math

import pytest

from ray_ladder import Constraints, Ladder
from ray_ladder.core.latency import LatencyTargets
from ray_ladder.serve import http
from ray_ladder.serve.load import LoadBook, expected_s
from ray_ladder.serve.state import RouterState
from ray_ladder.serve.targets import for_path, request_targets, route_target_table
from ray_ladder.serve.walk import SHED, RequestView, Shed, Try, Walk

LADDER = Ladder.from_yaml("""
name: spill
policy: {targets: {answer_s: 1.0, slow_after_s: 5}}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, tags: {jurisdiction: us}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9, tags: {jurisdiction: eu}}
  - {name: l4, resources: {ladder/l4: 1}, quality: 0.5, tags: {jurisdiction: us}}
  - {name: shed, kind: shed}
""")
UP = {"h100": True, "a100": True, "l4": True}


def _book(on_slow=None) -> LoadBook:
    return LoadBook({"h100": 2, "a100": 2, "l4": 2}, answer_s=1.0, ttft_s=None,
                    slow_after_s=5.0, on_slow=on_slow)


def _state() -> RouterState:
    state = RouterState(LADDER, down_cooldown_s=1.0)
    state.observe({"h100": 1, "a100": 1, "l4": 1}, UP, now=0.0)
    return state


def _load(book: LoadBook, rung: str, in_flight: int, service_s: float) -> None:
    book.sent(rung)
    book.answered(rung, service_s, now=0.0)
    book.ended(rung)
    for _ in range(in_flight):
        book.sent(rung)


# --- the estimate ---------------------------------------------------------------------------

@pytest.mark.parametrize("in_flight,slots,service,want", [
    (0, 2, 0.2, 0.2), (1, 2, 0.2, 0.2), (2, 2, 0.2, 0.3), (5, 2, 0.2, 0.6),
    (9, 1, 0.1, 1.0), (0, 0, 0.2, math.inf), (3, 2, None, math.inf), (0, 2, None, 0.0)])
def test_the_expected_time_is_the_queue_ahead_then_the_own_service(in_flight, slots,
                                                                   service, want) -> None:
    assert expected_s(in_flight, slots, service) == pytest.approx(want)


def test_a_stream_expects_its_first_piece_after_the_queue() -> None:
    # 2 ahead of it on 2 places holding streams of 2 s each: one round, then 0.1 s.
    assert expected_s(3, 2, 2.0, first_s=0.1) == pytest.approx(2.0 + 0.1)


def test_the_book_counts_in_flight_and_averages_service_times() -> None:
    book = _book()
    _load(book, "h100", 3, 0.2)
    assert book.rungs["h100"].in_flight == 3
    assert book.expected_s("h100", replicas=1, now=0.0, kind="answer") == pytest.approx(0.4)
    assert book.expected_s("h100", replicas=2, now=0.0, kind="answer") == pytest.approx(0.2)
    book.answered("h100", 0.4, now=0.1)
    assert book.rungs["h100"].service_s == pytest.approx(0.2 + 0.3 * 0.2)


# --- slow rungs -----------------------------------------------------------------------------

def test_a_rung_that_breaks_its_target_for_slow_after_s_is_slow_once() -> None:
    found = []
    book = _book(on_slow=lambda *a: found.append(a))
    for t in (0.0, 2.0, 4.9):
        book.answered("a100", 1.5, now=t)
    assert found == []  # 4.9 s of breaches: not yet
    book.answered("a100", 1.5, now=5.0)
    assert [(r, until) for r, _, until, _ in found] == [("a100", 10.0)]
    assert "1.50s against the 1s target" in found[0][1]
    book.answered("a100", 1.5, now=6.0)  # an answer in flight before: no second report
    assert len(found) == 1


def test_one_answer_within_target_ends_a_run_of_breaches() -> None:
    found = []
    book = _book(on_slow=lambda *a: found.append(a))
    book.answered("a100", 1.5, now=0.0)
    book.answered("a100", 0.5, now=3.0)
    book.answered("a100", 1.5, now=4.0)
    book.answered("a100", 1.5, now=8.0)
    assert found == []  # the breaches since 4.0 last 4 s
    book.answered("a100", 1.5, now=9.0)
    assert len(found) == 1


def test_a_slow_rung_is_retried_forgetting_its_estimate_and_one_breach_is_enough() -> None:
    found = []
    book = _book(on_slow=lambda *a: found.append(a))
    book.answered("h100", 3.0, now=0.0)
    book.answered("h100", 3.0, now=5.0)
    assert book.expected_s("h100", 1, now=6.0, kind="answer") == pytest.approx(3.0)
    # At the retry (5 s later) the old estimate is gone: a free place meets any target.
    assert book.expected_s("h100", 1, now=10.0, kind="answer") == 0.0
    book.answered("h100", 3.0, now=10.5)  # still slow: at once, and retried later
    assert [round(until - now, 3) for _, _, until, now in found] == [5.0, 10.0]


def test_a_retried_rung_that_meets_its_target_is_no_longer_slow() -> None:
    book = _book()
    book.answered("h100", 3.0, now=0.0)
    book.answered("h100", 3.0, now=5.0)
    book.expected_s("h100", 1, now=10.0, kind="answer")
    book.answered("h100", 0.2, now=10.2)
    assert book.snapshot("h100", 10.2)["slow"] is False
    assert book.expected_s("h100", 1, now=10.3, kind="answer") == pytest.approx(0.2)


def test_a_slow_rung_is_unobtainable_until_its_retry_and_the_fall_says_slow() -> None:
    state = _state()
    assert state.selector(None, 0.0).current == "h100"
    decision = state.mark_slow("h100", "its replicas took 3.00s", until=5.0, now=1.0)
    assert decision.rung == "a100"
    assert decision.cause == "slow" and "slow: its replicas took" in decision.reason
    assert state.why_unobtainable("h100", 2.0).startswith("slow: ")
    row = next(r for r in state.snapshot(2.0)["rungs"] if r["name"] == "h100")
    assert row["slow"] is True
    state.observe(None, UP, now=5.0)
    assert state.obtainable(5.0)["h100"]


# --- the walk spills ------------------------------------------------------------------------

def _walk(now=0.0, target=1.0, constraints=None, book=None):
    state = _state()
    book = book or _book()
    view = RequestView(state, state.selector(constraints, now), book)
    return Walk(LADDER, give_up_at=now + target, target_at=now + target), view, book


def test_a_rung_expected_to_miss_the_target_is_spilled_past_to_the_next() -> None:
    walk, view, book = _walk()
    _load(book, "h100", 10, 0.2)  # 9 ahead on 2 places: 0.9 s, then its own 0.2 s
    assert walk.next_step(view, 0.0) == Try("a100")
    assert walk.spills == ["h100"]
    assert [(a.rung, a.cause) for a in walk.attempts] == [("h100", "busy")]


def test_with_room_the_top_rung_takes_it() -> None:
    walk, view, book = _walk()
    _load(book, "h100", 4, 0.2)  # 3 ahead: 0.3 + 0.2 s
    assert walk.next_step(view, 0.0) == Try("h100")


def test_an_eu_bound_request_never_spills_to_a_rung_outside_the_eu() -> None:
    walk, view, book = _walk(constraints=Constraints(jurisdiction="eu"))
    _load(book, "a100", 10, 0.2)  # the eu rung is full; h100 and l4 are empty but us
    step = walk.next_step(view, 0.0)
    assert step == Shed("shed")
    assert walk.spills == ["a100"]


def test_a_full_ladder_sheds_at_once_with_retry_after_from_the_queues() -> None:
    walk, view, book = _walk()
    _load(book, "h100", 13, 0.2)  # 1.6 s: 0.6 late
    _load(book, "a100", 11, 0.4)  # 2.4 s: 1.4 late
    _load(book, "l4", 30, 0.2)
    # l4 could come back if it were down, but full is not down: no wait, shed now.
    assert walk.next_step(view, 0.0) == Shed("shed")
    assert walk.spills == ["h100", "a100", "l4"]
    err = walk.refusal(retry_after_s=5.0)
    assert err.retry_after_s == 1.0  # h100's queue is 0.6 s too long: ask again in 1 s
    assert [a.cause for a in err.attempts] == ["busy", "busy", "busy", "shed"]
    assert err.attempts[-1].reason == SHED


def test_a_queued_request_leaves_in_time_though_the_rung_below_was_never_timed() -> None:
    # a100 never answered: its expected time is 0, which used to mean "no reserve" and
    # a stream that waited on a full h100 past its target (bench/spill.py, first 2x burst)
    walk, view, book = _walk()
    _load(book, "h100", 3, 0.2)  # full: 2 ahead on 2 places, 0.4 s expected
    assert walk.next_step(view, 0.0) == Try("h100")
    assert walk.reserved == "a100"
    assert walk.leave_at == pytest.approx(1.0 - 0.2)  # a place after 0.8 s is late anyway



def test_a_queued_request_leaves_early_enough_for_the_spread_of_the_rung_below() -> None:
    # a100's answers took 0.1 s on average but up to 0.3 s: leaving with 1.5 x its mean to
    # spare is late whenever it answers slowly (bench/spill.py's streams at 2x: the ones
    # that left the full top rung last came first-token 0.53 s against a 0.5 s target)
    steady, spread = _walk(), _walk()
    for _, _, book in (steady, spread):
        _load(book, "h100", 3, 0.05)  # full: 2 ahead on 2 places
    for t, took in enumerate((0.1, 0.1, 0.1, 0.1)):
        steady[2].answered("a100", took, now=float(t))
    for t, took in enumerate((0.1, 0.3, 0.02, 0.3)):
        spread[2].answered("a100", took, now=float(t))
    for walk, view, _ in (steady, spread):
        assert walk.next_step(view, 0.0) == Try("h100")
    assert steady[0].leave_at == pytest.approx(1.0 - 1.5 * 0.1)
    assert spread[0].leave_at < 1.0 - 0.3  # before a100's slow answers would be late

def test_without_a_target_nothing_spills() -> None:
    state = _state()
    book = _book()
    _load(book, "h100", 50, 1.0)
    walk = Walk(LADDER, give_up_at=10.0)
    assert walk.next_step(RequestView(state, state.selector(None, 0.0), book), 0.0) \
        == Try("h100")


# --- which targets a request runs under ------------------------------------------------------

def test_the_operator_overrides_per_app_and_route_and_a_request_only_narrows() -> None:
    table = route_target_table(LADDER, {"ttft_s": 0.5}, {"/batch": {"answer_s": 30}})
    assert (table[""].answer_s, table[""].ttft_s) == (1.0, 0.5)
    assert for_path(table, "/batch/v1/completions").answer_s == 30.0
    base = for_path(table, "/")
    assert request_targets(base, {"x-ladder-target-s": "0.25"}).answer_s == 0.25
    assert request_targets(base, {"x-ladder-target-s": "60"}).answer_s == 1.0  # not widened
    client = request_targets(base, {"x-stainless-read-timeout": "0.3"})
    assert (client.answer_s, client.ttft_s, client.inter_token_s) == (0.3, 0.3, 0.3)


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "nan", "inf"])
def test_a_malformed_target_header_is_a_400_naming_it(raw) -> None:
    with pytest.raises(http.HttpError) as err:
        request_targets(LatencyTargets(), {"x-ladder-target-s": raw})
    assert err.value.status == 400 and "X-Ladder-Target-S" in err.value.message


def test_the_targets_count_from_the_requests_arrival_not_from_its_walk() -> None:
    targets = LatencyTargets(answer_s=2.0, ttft_s=0.5, inter_token_s=0.3)
    left = targets.spent(0.2)  # reading and checking the body took 0.2 s
    assert (left.answer_s, left.ttft_s) == pytest.approx((1.8, 0.3))
    assert left.inter_token_s == 0.3  # a gap between pieces, not a deadline
    late = targets.spent(5.0)  # already past: every rung misses it, the shed rung answers
    assert 0 < late.ttft_s < 0.01 and 0 < late.answer_s < 0.01
    assert LatencyTargets().spent(1.0) == LatencyTargets()  # no targets: nothing to spend


def test_malformed_operator_targets_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"route_targets\['/b'\]\.answer_s"):
        route_target_table(LADDER, None, {"/b": {"answer_s": -1}})
    with pytest.raises(ValueError, match="a path prefix"):
        route_target_table(LADDER, None, {"b": {"answer_s": 1}})


def test_a_rung_everyone_spills_past_is_found_slow_without_new_answers() -> None:
    found = []
    book = _book(on_slow=lambda *a: found.append(a))
    book.answered("h100", 2.0, now=0.0)  # one slow answer; then requests go below
    book.expected_s("h100", 1, now=4.9, kind="answer")
    assert found == []
    book.expected_s("h100", 1, now=5.0, kind="answer")
    assert [r for r, *_ in found] == ["h100"]


def test_an_estimate_no_answer_refreshes_is_retimed_by_one_request() -> None:
    """h100's estimate sits under the 1 s target, so it is never slow, but requests that
    spent 0.1 s before their walk spill past it; with nothing sent there no answer would
    refresh it. Once it is slow_after_s old with nothing in flight, one request re-times
    it (the others still spill meanwhile) and that answer replaces the old estimate."""
    state, book = _state(), _book()
    book.sent("h100")
    book.answered("h100", 0.98, now=0.0)
    book.ended("h100")

    def step(now: float):
        walk = Walk(LADDER, give_up_at=now + 0.9, target_at=now + 0.9)  # 0.1 s spent
        return walk.next_step(RequestView(state, state.selector(None, now), book), now)

    assert [step(1.0), step(4.9)] == [Try("a100")] * 2
    assert step(5.0) == Try("h100")  # 5 s (slow_after_s) without an answer: re-timed
    book.sent("h100")
    assert step(5.1) == Try("a100")  # one request re-times it; the others still spill
    book.answered("h100", 0.8, now=5.9)  # an average with 0.98 would still spill (0.926)
    book.ended("h100")
    assert step(6.0) == Try("h100")
    assert step(7.0) == Try("h100")


def test_the_wait_per_place_is_learned_from_requests_that_queued() -> None:
    book = _book()
    _load(book, "h100", 0, 0.2)
    book.expected_s("h100", 1, now=0.0, kind="answer")  # 2 places
    assert [book.sent("h100") for _ in range(4)] == [0, 0, 1, 2]
    # Serve's handle polls a full replica: the 2nd one ahead waited 1.0 s, not 0.2 s.
    book.taken("h100", 1.0, ahead=2)
    assert book.expected_s("h100", 1, now=0.1, kind="answer") == pytest.approx(3 * 0.5 + 0.2)


def test_requests_that_left_the_queue_untaken_slow_the_learned_wait_per_place() -> None:
    """Only the lucky requests that got a place before they had to leave are timed by
    ``taken``: without the ones that left, the queue reads faster than it is."""
    lucky_only, with_leavers = _book(), _book()
    for book in (lucky_only, with_leavers):
        _load(book, "h100", 3, 0.2)  # 3 on 2 places: a new one has 2 ahead
        book.expected_s("h100", 1, now=0.0, kind="answer")  # 2 places
        book.taken("h100", 0.2, ahead=2)  # got a place after 0.1 s per place ahead
    with_leavers.left("h100", 0.4, ahead=2)  # left untaken after 0.2 s per place ahead
    before = lucky_only.expected_s("h100", 1, now=0.1, kind="answer")
    after = with_leavers.expected_s("h100", 1, now=0.1, kind="answer")
    assert after > before
    with_leavers.left("h100", 0.4, ahead=0)  # had a place: says nothing of the queue
    assert with_leavers.expected_s("h100", 1, now=0.1, kind="answer") == after


# --- sustained spill is demand ---------------------------------------------------------------

def test_sustained_spill_asks_for_the_replicas_that_would_take_it() -> None:
    book = _book()
    _load(book, "h100", 0, 0.4)
    for i in range(40):  # 4 spills a second for 10 s
        book.spilled("h100", i / 4)
    # 4/s x 0.4 s = 1.6 places = 1 more replica of 2 places.
    assert book.wanted_replicas({"h100": 1}, now=10.0) == {"h100": 2}
    assert book.wanted_replicas({"h100": 1}, now=30.0) == {}  # the burst is over


def test_a_burst_shorter_than_half_the_window_is_not_demand_yet() -> None:
    book = _book()
    _load(book, "h100", 0, 0.4)
    for i in range(20):
        book.spilled("h100", 6.0 + i / 5)
    assert book.wanted_replicas({"h100": 1}, now=10.0) == {}


def test_a_rung_serve_was_slow_to_route_to_is_found_slow_and_retried_afresh() -> None:
    # A stall: requests waited 3 s for a replica with a free place; no answer breaches,
    # but every request spills past it. Found slow after slow_after_s, then retried with
    # its estimate forgotten (else it would be spilled past forever).
    found = []
    book = _book(on_slow=lambda *a: found.append(a))
    ahead = book.sent("h100")
    book.taken("h100", 3.0, ahead)
    assert book.expected_s("h100", 1, now=0.0, kind="answer") >= 3.0
    book.expected_s("h100", 1, now=5.0, kind="answer")
    assert [r for r, *_ in found] == ["h100"]
    assert book.expected_s("h100", 1, now=10.0, kind="answer") == 0.0  # retried afresh
