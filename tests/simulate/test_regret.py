"""Regret against the oracle: quality x availability lost against the best rung
obtainable at each tick, never negative, on hand-made traces with exact values.
"""

from __future__ import annotations

import pytest

from ray_ladder.simulate import simulate
from ray_ladder.simulate.baselines import GkeComputeClass, Karpenter
from tests.simulate import test_served as ts
from tests.simulate.test_baselines import TICK, A, C, H, bits, ladder
from tests.simulate.test_oracle_bound import reports

LADDER = ladder(H, A, C)  # quality 1.0, 0.8, 0.5; cpu has no trace: always obtainable
# Best available per 100 s tick:  H  H  A  C  H  H  H  H  H  H
TRACES = {H: bits(1, 1, 0, 0, 1, 1, 1, 1, 1, 1), A: bits(1, 1, 1, 0, 0, 1, 1, 1, 1, 1)}


def test_hysteresis_regret_is_the_quality_left_while_waiting() -> None:
    p = simulate(LADDER, TRACES, hysteresis=[3], tick_s=TICK).policies[0]
    # h100 is back at 4; hysteresis 3 climbs at 6: ticks 4 and 5 on cpu (0.5) instead of
    # h100 (1.0) lose 2 x 0.5 quality-ticks of 10.
    assert p.replay.served_per_tick() == [H, H, A, C, C, C, H, H, H, H]
    assert p.regret == pytest.approx(0.1)
    assert p.regret_hours == pytest.approx(2 * 0.5 * TICK / 3600)


def test_cold_falls_lose_the_whole_quality_of_the_best_rung() -> None:
    p = simulate(LADDER, TRACES, hysteresis=[3], tick_s=TICK, demotion_delay_s=50).policies[0]
    # Nothing for 50 s after the fall onto a100 (0.8 lost) and onto cpu (0.5 lost), then
    # the 2 ticks of the climb's wait (0.5 each): (0.4 + 0.25 + 1.0) / 10.
    assert p.replay.served == [(0, 0), (2, -1), (2.5, 1), (3, -1), (3.5, 2), (6, 0)]
    assert p.regret == pytest.approx(0.165)


def test_the_oracle_has_none_and_karpenter_loses_only_what_could_be_had() -> None:
    r = simulate(ts.LADDER, ts.TRACES, hysteresis=[2], tick_s=TICK,
                 compare=[Karpenter(start_s=0)])
    # Best available: h100, a100, shed (nothing else at 2), h100.
    assert r.oracle.regret == 0.0
    ladder_h2, karpenter = r.policies[0], r.comparison[0]
    # Both miss h100 at 3 (1.0 of 4 ticks); Karpenter's empty tick 2 loses nothing: the
    # best available there is the shed rung, of quality 0.
    assert ladder_h2.replay.served_per_tick() == [H, A, "shed", "shed"]
    assert karpenter.replay.served_per_tick() == [H, A, None, None]
    assert ladder_h2.regret == karpenter.regret == pytest.approx(0.25)


def test_regret_is_never_negative_even_above_the_oracle() -> None:
    lad = ladder(H, A, C)
    r = simulate(lad, {H: "never", A: "never", C: "never"}, tick_s=TICK, duration_s=1000,
                 compare=[GkeComputeClass(when_unsatisfiable="ScaleUpAnyway")])
    p = r.comparison[0]
    # Its default-series node serves cpu against the trace: 0.48 of quality x
    # availability where the oracle (shed only) has 0; the note says so, and the regret
    # is 0, not -0.48.
    assert p.quality_weighted_availability == pytest.approx(0.48)
    assert r.oracle.quality_weighted_availability == 0.0
    assert p.regret == 0.0
    assert [n.kind for n in r.notes] == ["above_oracle", "above_oracle"]


def test_regret_is_the_oracles_quality_minus_the_policys_on_every_hand_made_trace() -> None:
    checked = 0
    for name, r in reports():
        assert r.oracle.regret == 0.0, name
        above = {n.policy for n in r.notes if n.kind == "above_oracle"}
        for p in [*r.policies, *r.comparison]:
            assert p.regret >= 0.0, (name, p.label)
            if p.label not in above:
                gap = r.oracle.quality_weighted_availability - p.quality_weighted_availability
                assert p.regret == pytest.approx(gap, abs=1e-12), (name, p.label)
                checked += 1
    assert checked > 100
