"""Invariants of the simulator on random ladders and traces (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_ladder import Ladder, Selector
from ray_ladder.simulate import Trace, simulate
from ray_ladder.simulate.align import Timeline

TICK = 60.0


def _trace(bits: list[bool], gap_ticks: int) -> Trace:
    gap = gap_ticks * TICK
    return Trace.from_steps([(i * gap, b) for i, b in enumerate(bits)],
                            duration_s=len(bits) * gap, resolution_s=gap)


@st.composite
def scenarios(draw: st.DrawFn, max_compute: int = 4) -> tuple[Ladder, dict[str, Trace], float]:
    """A ladder of 1-4 compute rungs (maybe cache, maybe shed) and traces for some."""
    n = draw(st.integers(1, max_compute))
    qualities = sorted(draw(st.lists(st.floats(0, 1), min_size=n + 2, max_size=n + 2)),
                       reverse=True)
    rungs: list[dict[str, object]] = [
        {"name": f"r{i}", "num_cpus": 1, "quality": qualities[i],
         "cost_per_hour": draw(st.floats(0, 50))} for i in range(n)
    ]
    if draw(st.booleans()):
        rungs.append({"name": "cache", "kind": "cache", "quality": qualities[n]})
    if draw(st.booleans()):
        rungs.append({"name": "shed", "kind": "shed", "quality": qualities[n + 1]})
    ladder = Ladder.from_dict({"name": "p", "rungs": rungs})
    ticks = draw(st.integers(1, 60))
    traces: dict[str, Trace] = {}
    for i in range(n):
        if i == 0 or draw(st.booleans()):  # the top rung always has a trace
            gap = draw(st.integers(1, 3))
            length = -(-ticks // gap)
            bits = draw(st.lists(st.booleans(), min_size=length, max_size=length))
            traces[f"r{i}"] = _trace(bits, gap)
    return ladder, traces, ticks * TICK


def _per_tick(tl: Timeline) -> list[tuple[bool, ...]]:
    out: list[tuple[bool, ...]] = []
    for i, start in enumerate(tl.starts):
        stop = tl.starts[i + 1] if i + 1 < len(tl.starts) else tl.ticks
        out += [tl.rows[i]] * (stop - start)
    return out


delays = st.sampled_from([0.0, 30.0, 60.0, 150.0])


@settings(max_examples=150, deadline=None)
@given(scenarios(), st.integers(1, 6), delays, delays, st.booleans())
def test_fractions_sum_to_one(scenario: tuple[Ladder, dict[str, Trace], float], h: int,
                              promote: float, demote: float, warm_all: bool) -> None:
    ladder, traces, duration = scenario
    warm = [r.name for r in ladder.rungs if r.is_compute] if warm_all else []
    r = simulate(ladder, traces, hysteresis=h, tick_s=TICK, duration_s=duration,
                 promotion_delay_s=promote, demotion_delay_s=demote, warm=warm)
    for p in [r.oracle, *r.policies]:
        assert sum(p.rung_fraction.values()) + p.unserved_fraction == pytest.approx(1.0)
        assert all(f >= 0 for f in p.rung_fraction.values())
        assert 0 <= p.degraded_s_total <= r.duration_s + 1e-6
        assert p.degraded_longest_s <= p.degraded_s_total + 1e-6
        # No policy beats the oracle on quality: it always serves the best obtainable rung.
        assert p.quality_weighted_availability <= r.oracle.quality_weighted_availability + 1e-9


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_hysteresis_one_without_switching_cost_tracks_the_top_trace(
    scenario: tuple[Ladder, dict[str, Trace], float],
) -> None:
    ladder, traces, duration = scenario
    r = simulate(ladder, traces, hysteresis=1, tick_s=TICK, duration_s=duration)
    top = ladder.rungs[0].name
    # Exactly, not approximately: both are counts of ticks over the same total.
    assert r.policies[0].rung_fraction[top] == r.timeline.obtainable_ticks(top) / r.ticks
    assert r.policies[0].rung_fraction[top] == r.rungs[0]["obtainable_fraction"]


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.integers(1, 6))
def test_zero_cost_replay_serves_exactly_what_the_live_selector_decides(
    scenario: tuple[Ladder, dict[str, Trace], float], h: int,
) -> None:
    ladder, traces, duration = scenario
    r = simulate(ladder, traces, hysteresis=h, tick_s=TICK, duration_s=duration)
    selector = Selector(ladder, promotion_hysteresis=h)
    live = []
    for k, row in enumerate(_per_tick(r.timeline)):
        obs = {r.name: True for r in ladder.rungs if r.is_compute}
        obs.update(zip(r.timeline.names, row, strict=True))
        live.append(selector.observe(obs, k * TICK).rung)
    assert r.policies[0].replay.served_per_tick() == live


@settings(max_examples=150, deadline=None)
@given(scenarios(max_compute=2), delays, delays)
def test_more_hysteresis_never_adds_climbs_on_two_rungs(
    scenario: tuple[Ladder, dict[str, Trace], float], promote: float, demote: float,
) -> None:
    ladder, traces, duration = scenario
    two = Ladder.from_dict({**ladder.model_dump(), "rungs": [
        r.model_dump() for r in ladder.rungs[:2]]})
    traces = {k: v for k, v in traces.items() if k in two.names}
    r = simulate(two, traces, hysteresis=[1, 2, 3, 5, 10], tick_s=TICK, duration_s=duration,
                 promotion_delay_s=promote, demotion_delay_s=demote)
    climbs = [p.climbs for p in r.policies]
    assert climbs == sorted(climbs, reverse=True)
