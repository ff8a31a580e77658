"""The one capped exponential backoff and the failure streak it drives (pure)."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ray_ladder.core.backoff import Backoff, FailureStreak, capped_exponential

ROUTER = Backoff(base_s=2.0, cap_s=30.0)  # the Serve router's rung cooldown, x2 up to 30 s

# Backoffs whose numbers span the whole float range, infinite caps included.
bases = st.floats(min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False)
multipliers = st.one_of(st.just(1.0), st.just(2.0),
                        st.floats(min_value=1.0, max_value=1e300, allow_nan=False))
counts = st.one_of(st.integers(-3, 2_000), st.integers(0, 10**6), st.integers(0, 10**400))
times = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False)


@st.composite
def backoffs(draw: st.DrawFn) -> Backoff:
    base = draw(bases)
    cap = draw(st.one_of(st.just(base), st.just(math.inf),
                         st.floats(min_value=base, max_value=1e308, allow_nan=False,
                                   allow_infinity=False)))
    return Backoff(base, cap, draw(multipliers))


def test_the_delay_doubles_from_the_base_up_to_the_cap() -> None:
    assert [ROUTER.delay(n) for n in range(0, 7)] == [2.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert capped_exponential(30.0, 2.0, 600.0, 3) == 120.0
    assert capped_exponential(5.0, 1.0, 60.0, 10**9) == 5.0  # no growth: the base forever


@pytest.mark.parametrize("n", [1_025, 10**4, 10**9, 10**100, 10**4000])
def test_counts_that_overflowed_the_power_give_the_cap(n: int) -> None:
    # 2 ** 1_025 * 2.0 raised OverflowError in the router and the planner before.
    assert ROUTER.delay(n) == 30.0
    assert capped_exponential(1.0, 10.0, 1e300, n) == 1e300
    assert capped_exponential(1.0, 2, math.inf, n) == math.inf  # an int multiplier too


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"base_s": 0.0, "cap_s": 1.0}, "base_s"),
    ({"base_s": math.nan, "cap_s": 1.0}, "base_s"),
    ({"base_s": 2.0, "cap_s": 1.0}, "cap_s"),
    ({"base_s": 1.0, "cap_s": math.nan}, "cap_s"),
    ({"base_s": 1.0, "cap_s": 2.0, "multiplier": 0.5}, "multiplier"),
    ({"base_s": 1.0, "cap_s": 2.0, "multiplier": math.nan}, "multiplier"),
])
def test_parameters_out_of_range_name_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Backoff(**kwargs)
    with pytest.raises(ValueError, match=field):
        capped_exponential(kwargs["base_s"], kwargs.get("multiplier", 2.0), kwargs["cap_s"], 1)


@given(backoffs(), counts)
@settings(max_examples=400, deadline=None)
def test_no_count_raises_or_leaves_base_to_cap(backoff: Backoff, n: int) -> None:
    delay = backoff.delay(n)
    assert backoff.base_s <= delay <= backoff.cap_s
    assert delay == capped_exponential(backoff.base_s, backoff.multiplier, backoff.cap_s, n)


@given(backoffs(), counts, st.integers(0, 10**6))
@settings(max_examples=400, deadline=None)
def test_the_delay_never_decreases_as_failures_grow(backoff: Backoff, n: int,
                                                    more: int) -> None:
    assert backoff.delay(n) <= backoff.delay(n + 1) <= backoff.delay(n + 1 + more)


@given(backoffs(), st.integers(0, 10**6))
@settings(max_examples=300, deadline=None)
def test_every_count_from_saturation_waits_the_same(backoff: Backoff, more: int) -> None:
    # A counter that stops at saturated_at changes no wait.
    assert backoff.delay(backoff.saturated_at + more) == backoff.delay(backoff.saturated_at)


def test_a_backend_that_stays_down_doubles_its_cooldown_then_holds_the_cap() -> None:
    streak, now, cooldowns = FailureStreak(), 0.0, []
    for _ in range(8):  # its probation ping fails as soon as each cooldown ends
        streak = streak.after_failure(now, ROUTER)
        cooldowns.append(streak.cooldown_s)
        assert streak.until == now + streak.cooldown_s and streak.cooling(now)
        now = streak.until + 0.1
    assert cooldowns == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]
    assert streak.count == ROUTER.saturated_at  # bounded, not 8


def test_a_failure_after_the_applied_cooldown_restarts_at_the_base() -> None:
    # The bug: the gap was compared against the uncapped cooldown (2 * 2 ** strikes), so
    # after one flapping spell every later failure, however far apart, got the 30 s max.
    streak, now = FailureStreak(), 0.0
    for _ in range(10):
        streak = streak.after_failure(now, ROUTER)
        now = streak.until
    assert streak.cooldown_s == 30.0
    # 31 s after the cooldown ended: longer than the 30 s applied, far shorter than the
    # uncapped 2 * 2 ** 9 s the old code compared against.
    later = streak.after_failure(streak.until + 31.0, ROUTER)
    assert (later.count, later.cooldown_s) == (1, 2.0)


def test_repeats_count_against_the_cooldown_actually_applied() -> None:
    first = FailureStreak().after_failure(0.0, ROUTER)  # 2 s cooldown, ends at 2
    assert first.after_failure(3.9, ROUTER).count == 2  # 1.9 s after the end: a repeat
    assert first.after_failure(4.0, ROUTER).count == 1  # one full cooldown later: healthy
    assert first.after_failure(1.0, ROUTER).count == 2  # failed during its cooldown


def test_the_first_failure_waits_the_base() -> None:
    streak = FailureStreak().after_failure(1e9, ROUTER)
    assert (streak.count, streak.cooldown_s, streak.until) == (1, 2.0, 1e9 + 2.0)
    assert not FailureStreak().cooling(0.0)


@given(backoffs(), st.lists(times, min_size=1, max_size=60), st.integers(0, 10**400),
       times, st.floats(0.0, 1.0))
@settings(max_examples=300, deadline=None)
def test_no_failures_over_any_span_raise_or_exceed_the_cap(
        backoff: Backoff, moments: list[float], start: int, until: float,
        share: float) -> None:
    # Any order of failure times (a clock that steps back too), from any stored streak.
    streak = FailureStreak(start, until, min(backoff.cap_s, share * backoff.cap_s))
    for now in moments:
        streak = streak.after_failure(now, backoff)
        assert backoff.base_s <= streak.cooldown_s <= backoff.cap_s
        assert 1 <= streak.count <= backoff.saturated_at


@given(backoffs(), st.lists(st.floats(0.0, 1e6, allow_nan=False), min_size=1, max_size=40),
       st.floats(0.0, 1e6, allow_nan=False))
@settings(max_examples=300, deadline=None)
def test_healthy_for_the_longest_cooldown_starts_from_the_base(
        backoff: Backoff, gaps: list[float], extra: float) -> None:
    streak, now = FailureStreak(), 0.0
    for gap in gaps:  # any spell of failures
        streak = streak.after_failure(now, backoff)
        now = streak.until + gap
    if math.isinf(backoff.cap_s) or math.isinf(streak.until):
        return  # an endless cooldown never ends: there is no "healthy since"
    later = streak.until + backoff.cap_s + extra
    assume(later - streak.until >= backoff.cap_s)  # healthy that long in float arithmetic
    healthy = streak.after_failure(later, backoff)
    assert (healthy.count, healthy.cooldown_s) == (1, backoff.base_s)


@given(backoffs(), st.integers(1, 200))
@settings(max_examples=200, deadline=None)
def test_back_to_back_failures_follow_the_delay_sequence(backoff: Backoff, n: int) -> None:
    streak, now = FailureStreak(), 0.0
    for i in range(1, n + 1):
        streak = streak.after_failure(now, backoff)
        assert streak.cooldown_s == backoff.delay(i)
        if math.isinf(streak.until):
            break
        now = streak.until  # tried again the moment its cooldown ended, failed again
