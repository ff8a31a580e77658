"""Simulator throughput: one year at one-minute ticks (525,600) over a 6-rung ladder.

Replays four Markov traces (h100, a100, l4, cpu; cache and shed always obtainable)
through the live Selector, then the whole comparison (`compare="all"`: the ladder with
its measured switching costs, Ray native, GKE ComputeClass both ways, Karpenter,
LiteLLM, plus the oracle). Prints one JSON object: ticks_per_s of one policy replay, the
time of a whole `simulate()` call (alignment + oracle + one policy with switching cost +
report), the time of the whole comparison and of each compared policy alone, both
wall-clock and CPU time of this process (the CPU figure is the one to trust on a shared,
loaded machine). The machine is described by what it measures: os.cpu_count() and the
load average before and after. Goals: the simulate() year and the whole comparison each
under 10 s.
"""

from __future__ import annotations

import json
import os
import time

from ray_ladder import Ladder
from ray_ladder.simulate import align, markov_trace, replay, simulate
from ray_ladder.simulate.baselines import PolicyContext, parse_policies

YEAR_S = 365 * 86400
TICK_S = 60.0
GOAL_S = 10.0

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


def _timed(fn):  # type: ignore[no-untyped-def]
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - start, time.process_time() - cpu


def main() -> dict[str, object]:
    load_before = os.getloadavg()
    traces = {
        "h100": markov_trace(6 * 3600, 2 * 3600, YEAR_S, seed=1, gap_s=TICK_S),
        "a100": markov_trace(3 * 3600, 3600, YEAR_S, seed=2, gap_s=TICK_S),
        "l4": markov_trace(12 * 3600, 1800, YEAR_S, seed=3, gap_s=TICK_S),
        "cpu": markov_trace(30 * 86400, 600, YEAR_S, seed=4, gap_s=TICK_S),
    }
    ticks = int(YEAR_S / TICK_S)
    timeline, align_s, _ = _timed(lambda: align(traces, tick_s=TICK_S, ticks=ticks))
    rep, replay_s, replay_cpu_s = _timed(lambda: replay(LADDER, timeline, hysteresis=3))
    report, simulate_s, simulate_cpu_s = _timed(lambda: simulate(
        LADDER, traces, hysteresis=3, tick_s=TICK_S, promotion_delay_s=341,
        demotion_delay_s=120))
    compared, compare_s, compare_cpu_s = _timed(lambda: simulate(
        LADDER, traces, tick_s=TICK_S, compare="all"))
    ctx = PolicyContext.build(LADDER, timeline, warm=["l4"])
    per_policy = {}
    for policy in parse_policies("all"):
        _, _, cpu_s = _timed(lambda p=policy: p.run(ctx))  # type: ignore[misc]
        per_policy[policy.label] = round(cpu_s, 3)
    policy = report.policies[0]
    load_after = os.getloadavg()
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
        "compare_year_s": round(compare_s, 3),
        "compare_year_cpu_s": round(compare_cpu_s, 3),
        "compare_policies": [p.policy for p in compared.comparison] + ["oracle"],
        "compare_policy_cpu_s": per_policy,
        "compare_quality_weighted_availability": {
            p.policy: round(p.quality_weighted_availability, 4)
            for p in [*compared.comparison, compared.oracle]},
        "goal_s": GOAL_S,
        "met": simulate_s < GOAL_S,
        "met_cpu": simulate_cpu_s < GOAL_S,
        "compare_met": compare_s < GOAL_S,
        "compare_met_cpu": compare_cpu_s < GOAL_S,
        "cpus": os.cpu_count(),
        "loadavg_1m_before": round(load_before[0], 2),
        "loadavg_1m_after": round(load_after[0], 2),
    }


if __name__ == "__main__":
    print(json.dumps(main()), flush=True)
