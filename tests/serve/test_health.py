"""The router's rung health: one record per rung on core.backoff; no number of failures
over any span raises or exceeds the cap (the old hand-written power overflowed at the
1,025th failure and then answered 500)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ray_ladder import Ladder
from ray_ladder.serve.health import MAX_COOLDOWN_S
from ray_ladder.serve.state import RouterState

LADDER = Ladder.from_yaml("""
name: health
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}}
""")
UP = {"h100": True, "a100": True}


def _state(cooldown: float = 1.0) -> RouterState:
    state = RouterState(LADDER, down_cooldown_s=cooldown)
    state.observe({"h100": 1, "a100": 1}, UP, now=0.0)
    return state


def _down_for(state: RouterState, now: float) -> float:
    return next(r["down_for_s"] for r in state.snapshot(now)["rungs"] if r["name"] == "h100")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=120.0), min_size=1, max_size=60),
       st.floats(min_value=0.1, max_value=5.0))
def test_no_failures_over_any_span_raise_or_exceed_the_cap(gaps, cooldown) -> None:
    state, now = _state(cooldown), 0.0
    for gap in gaps:
        now += gap
        state.mark_down("h100", "backend down", now)
        assert 0.0 < _down_for(state, now) <= max(MAX_COOLDOWN_S, cooldown)


def test_two_thousand_failures_in_a_row_stay_at_the_cap() -> None:
    state, now = _state(), 0.0
    for _ in range(2000):  # an external backend down for good, pinged at each cooldown end
        state.mark_down("h100", "still down", now)
        now += _down_for(state, now)
    state.mark_down("h100", "still down", now)
    assert _down_for(state, now) == MAX_COOLDOWN_S


def test_after_a_flapping_spell_a_later_failure_starts_from_the_base_again() -> None:
    state, now = _state(), 0.0
    for _ in range(12):  # the cooldown grows to the 30 s cap
        state.mark_down("h100", "flapping", now)
        now += _down_for(state, now) + 0.1
    assert _down_for(state, now - 0.1) == 0.0
    ended = now - 0.1
    # 40 s after the last cooldown ended: longer than the 30 s actually applied (the old
    # rule compared with the uncapped 2048 s and gave the maximum again)
    state.mark_down("h100", "one-off", ended + 40.0)
    assert _down_for(state, ended + 40.0) == 1.0
