"""The replay's memoised selector (SelectorTable, settled ticks skipped) decides exactly
what the live Selector decides when it observes every tick: moves, falls, climbs, alerts."""

from __future__ import annotations

import pytest

from ray_ladder import Ladder, Selector
from ray_ladder.simulate import align, markov_trace, replay

TICK = 60.0
LADDER = Ladder.from_dict({
    "name": "t",
    "policy": {"promotion_hysteresis": 3, "max_degraded_seconds": 300},
    "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}, "quality": 1.0},
        {"name": "a100", "resources": {"ladder/a100": 1}, "quality": 0.9},
        {"name": "cpu", "num_cpus": 1, "quality": 0.4},
        {"name": "shed", "kind": "shed", "quality": 0.0},
    ],
})


@pytest.mark.parametrize("h", [1, 2, 3, 5])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_table_decides_what_the_live_selector_decides(h: int, seed: int) -> None:
    ticks = 3000
    traces = {
        "h100": markov_trace(600, 300, ticks * TICK, seed=seed),
        "a100": markov_trace(240, 180, ticks * TICK, seed=seed + 10),
        "cpu": markov_trace(3600, 120, ticks * TICK, seed=seed + 20),
    }
    tl = align(traces, tick_s=TICK, ticks=ticks)
    rep = replay(LADDER, tl, hysteresis=h)
    selector = Selector(LADDER, promotion_hysteresis=h)
    moves, falls, climbs, alerts = [], 0, 0, 0
    ends = tl.starts[1:] + [ticks]
    for k0, k1, row in zip(tl.starts, ends, tl.rows, strict=True):
        obs = dict(zip(tl.names, row, strict=True))
        for k in range(k0, k1):
            d = selector.observe(obs, k * TICK)
            alerts += d.alert
            if d.changed:
                moves.append((k, rep.names.index(d.rung) if d.rung else -1))
                falls += d.direction == "down"
                climbs += d.direction == "up"
    assert rep.target == moves
    assert (rep.falls, rep.climbs, rep.alerts) == (falls, climbs, alerts)
    assert alerts > 0  # the alert path is exercised
