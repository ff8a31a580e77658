"""Simulator throughput: one year at one-minute ticks (525,600) over a 6-rung ladder.

Replays four Markov traces (h100, a100, l4, cpu; cache and shed always obtainable)
through the live Selector. Prints JSON: ticks_per_s of one policy replay, and the time of
a whole `simulate()` call (alignment + oracle + one policy with switching cost + report),
both wall-clock and CPU time of this process (the CPU figure is the one to trust on a
shared, loaded machine; the load average is printed alongside). Goal: the whole year in
under 10 s.
"""

from __future__ import annotations

import json
import os
import time

from ray_ladder import Ladder
from ray_ladder.simulate import align, markov_trace, replay, simulate

YEAR_S = 365 * 86400
TICK_S = 60.0

LADDER = Ladder.from_dict(
    {
        "name": "bench",
        "policy": {"promotion_hysteresis": 3, "max_degraded_seconds": 600},
        "rungs": [
            {"name": "h100", "resources": {"ladder/h100": 1}, "quality": 1.0,
             "cost_per_hour": 12.3},
            {"name": "a100", "resources": {"ladder/a100": 1}, "quality": 0.9,
             "cost_per_hour": 4.1},
            {"name": "l4", "resources": {"ladder/l4": 1}, "quality": 0.7,
             "cost_per_hour": 0.8, "standby_replicas": 1},
            {"name": "cpu", "num_cpus": 1, "quality": 0.4, "cost_per_hour": 0.1},
            {"name": "cache", "kind": "cache", "quality": 0.2},
            {"name": "shed", "kind": "shed", "quality": 0.0},
        ],
    }
)


def main() -> dict[str, object]:
    traces = {
        "h100": markov_trace(6 * 3600, 2 * 3600, YEAR_S, seed=1, gap_s=TICK_S),
        "a100": markov_trace(3 * 3600, 3600, YEAR_S, seed=2, gap_s=TICK_S),
        "l4": markov_trace(12 * 3600, 1800, YEAR_S, seed=3, gap_s=TICK_S),
        "cpu": markov_trace(30 * 86400, 600, YEAR_S, seed=4, gap_s=TICK_S),
    }
    ticks = int(YEAR_S / TICK_S)
    start = time.perf_counter()
    timeline = align(traces, tick_s=TICK_S, ticks=ticks)
    align_s = time.perf_counter() - start

    start, cpu = time.perf_counter(), time.process_time()
    rep = replay(LADDER, timeline, hysteresis=3)
    replay_s, replay_cpu_s = time.perf_counter() - start, time.process_time() - cpu

    start, cpu = time.perf_counter(), time.process_time()
    report = simulate(LADDER, traces, hysteresis=3, tick_s=TICK_S, promotion_delay_s=341,
                      demotion_delay_s=120)
    simulate_s, simulate_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    policy = report.policies[0]
    return {
        "ticks": ticks,
        "rungs": len(LADDER.rungs),
        "segments": len(timeline.starts),
        "align_s": round(align_s, 3),
        "replay_s": round(replay_s, 3),
        "replay_cpu_s": round(replay_cpu_s, 3),
        "ticks_per_s": round(ticks / replay_s),
        "ticks_per_cpu_s": round(ticks / replay_cpu_s),
        "simulate_year_s": round(simulate_s, 3),
        "simulate_year_cpu_s": round(simulate_cpu_s, 3),
        "simulate_replays": 2,
        "falls": rep.falls,
        "climbs": rep.climbs,
        "h100_fraction": round(policy.rung_fraction["h100"], 4),
        "goal_s": 10.0,
        "met": simulate_s < 10.0,
        "met_cpu": simulate_cpu_s < 10.0,
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
