"""Invariants of every compared policy on random ladders and traces (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ray_ladder import Ladder
from ray_ladder.simulate import SimulationReport, Trace, simulate
from ray_ladder.simulate.baselines import (
    Baseline,
    GkeComputeClass,
    Karpenter,
    LadderPolicy,
    LiteLLM,
    RayNative,
)

TICK = 60.0
DELAYS = st.sampled_from([0.0, 5.0, 30.0, 60.0, 150.0, 3600.0])


def _trace(bits: list[bool], gap_ticks: int) -> Trace:
    gap = gap_ticks * TICK
    return Trace.from_steps([(i * gap, b) for i, b in enumerate(bits)],
                            duration_s=len(bits) * gap, resolution_s=gap)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Ladder, dict[str, Trace], float]:
    """1-4 compute rungs (qualities best first), maybe cache and shed, traces for some."""
    n = draw(st.integers(1, 4))
    qualities = sorted(draw(st.lists(st.floats(0, 1), min_size=n + 2, max_size=n + 2)),
                       reverse=True)
    rungs: list[dict[str, object]] = [
        {"name": f"r{i}", "num_cpus": 1, "quality": qualities[i],
         "cost_per_hour": draw(st.floats(0, 50)), "standby_replicas": draw(st.integers(0, 1))}
        for i in range(n)
    ]
    if draw(st.booleans()):
        rungs.append({"name": "cache", "kind": "cache", "quality": qualities[n]})
    if draw(st.booleans()):
        rungs.append({"name": "shed", "kind": "shed", "quality": qualities[n + 1]})
    ladder = Ladder.from_dict({"name": "p", "policy": {"promotion_hysteresis": 1},
                               "rungs": rungs})
    ticks = draw(st.integers(1, 60))
    traces: dict[str, Trace] = {}
    for i in range(n):
        if i == 0 or draw(st.booleans()):
            gap = draw(st.integers(1, 3))
            length = -(-ticks // gap)
            bits = draw(st.lists(st.booleans(), min_size=length, max_size=length))
            traces[f"r{i}"] = _trace(bits, gap)
    return ladder, traces, ticks * TICK


@st.composite
def baselines(draw: st.DrawFn) -> Baseline:
    kind = draw(st.sampled_from(["ray", "gke", "karpenter", "litellm"]))
    if kind == "ray":
        return RayNative(launch_timeout_s=draw(DELAYS), start_s=draw(DELAYS))
    if kind == "gke":
        return GkeComputeClass(climb_s=draw(DELAYS), provision_fail_s=draw(DELAYS),
                               start_s=draw(DELAYS), active_migration=draw(st.booleans()),
                               when_unsatisfiable=draw(st.sampled_from(
                                   ["DoNotScaleUp", "ScaleUpAnyway"])))
    if kind == "karpenter":
        return Karpenter(ice_ttl_s=draw(DELAYS), retry_s=draw(DELAYS), start_s=draw(DELAYS),
                         consolidation=draw(st.booleans()),
                         consolidate_after_s=draw(DELAYS))
    return LiteLLM(cooldown_s=draw(DELAYS), start_s=draw(DELAYS))


def _ladders() -> st.SearchStrategy[LadderPolicy]:
    return st.builds(LadderPolicy, hysteresis=st.integers(1, 4), fall_s=DELAYS, start_s=DELAYS,
                     climb_s=DELAYS)


def _run(scenario: tuple[Ladder, dict[str, Trace], float],
         policies: list[Baseline]) -> SimulationReport:
    ladder, traces, duration = scenario
    return simulate(ladder, traces, tick_s=TICK, duration_s=duration, compare=policies)


def _ticks_ok(r: SimulationReport) -> list[dict[str, bool]]:
    ends = r.timeline.starts[1:] + [r.ticks]
    out = []
    for start, stop, row in zip(r.timeline.starts, ends, r.timeline.rows, strict=True):
        ok = dict(zip(r.timeline.names, row, strict=True))
        out += [ok] * (stop - start)
    return out


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.lists(baselines(), min_size=1, max_size=3), _ladders())
def test_fractions_sum_to_one_and_only_obtainable_rungs_serve(
    scenario: tuple[Ladder, dict[str, Trace], float], policies: list[Baseline],
    ladder_policy: LadderPolicy,
) -> None:
    r = _run(scenario, [*policies, ladder_policy])
    per_tick = _ticks_ok(r)
    for p in r.comparison:
        assert sum(p.rung_fraction.values()) + p.unserved_fraction == pytest.approx(1.0)
        assert all(f >= -1e-12 for f in p.rung_fraction.values())
        assert 0 <= p.flaps <= p.climbs
        assert p.cost_per_served_hour is None or p.cost_per_served_hour >= 0
        for k, rung in enumerate(p.replay.served_per_tick()):
            # ScaleUpAnyway's default node is the one thing served against its trace.
            anyway = "ScaleUpAnyway" in p.policy and rung == _last_compute(r)
            assert rung is None or per_tick[k].get(rung, True) or anyway, (p.policy, k)


def _last_compute(r: SimulationReport) -> str:
    return [x["name"] for x in r.rungs if x["kind"] == "compute"][-1]


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.lists(baselines(), min_size=1, max_size=3), _ladders())
def test_with_every_trace_always_obtainable_every_policy_stays_on_top(
    scenario: tuple[Ladder, dict[str, Trace], float], policies: list[Baseline],
    ladder_policy: LadderPolicy,
) -> None:
    ladder, traces, duration = scenario
    always = {name: _trace([True] * int(duration / TICK), 1) for name in traces}
    # Karpenter's price consolidation leaves the top rung for a cheaper one by design.
    policies = [p for p in policies if not getattr(p, "consolidation", False)]
    r = _run((ladder, always, duration), [*policies, ladder_policy])
    for p in r.comparison:
        assert p.top_fraction == 1.0, p.policy
        assert (p.falls, p.climbs, p.flaps, p.unserved_fraction) == (0, 0, 0, 0)


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.lists(baselines(), min_size=1, max_size=4))
def test_the_free_ladder_at_hysteresis_one_is_never_below_a_baseline(
    scenario: tuple[Ladder, dict[str, Trace], float], policies: list[Baseline],
) -> None:
    ladder, traces, _ = scenario
    last = [r.name for r in ladder.rungs if r.is_compute][-1]
    # ScaleUpAnyway serves GKE's default node even where its trace says no capacity: it
    # is outside the claim unless that rung has no trace (is always there).
    assume(all(getattr(p, "when_unsatisfiable", "") != "ScaleUpAnyway" or last not in traces
               for p in policies))
    free = LadderPolicy(hysteresis=1, fall_s=0, start_s=0, climb_s=0)
    r = _run(scenario, [free, *policies])
    ours = r.comparison[0].quality_weighted_availability
    assert ours == r.oracle.quality_weighted_availability
    for p in r.comparison[1:]:
        assert p.quality_weighted_availability <= ours + 1e-9, p.policy
