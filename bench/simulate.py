"""Simulator throughput and memory: a year at one-minute ticks (525,600) over a 6-rung ladder.

Two cases, each a year of one-minute ticks through the whole comparison
(`compare="all"`: the ladder with its measured switching costs, Ray native, GKE
ComputeClass both ways, Karpenter, LiteLLM, plus the oracle):

* ``year`` (the top-level fields): four Markov traces (h100, a100, l4, cpu; cache and
  shed always obtainable) that change every few hours. Also times one policy replay
  (ticks_per_s), a whole `simulate()` call (alignment + oracle + one policy with
  switching cost + report), and each compared policy alone.
* ``high_churn``: the four compute rungs flip every few minutes (Markov, mean up 5 to 10
  minutes and down 3 to 4): ~3e5 segments, the worst case for the per-change work.

Each case runs in its own subprocess, so that its memory figure is its own: ``peak_mb``
is that process's peak resident set (``resource.getrusage(RUSAGE_SELF).ru_maxrss``, the
interpreter and imports included; ``import_mb`` is the same read before the case
starts). Times are wall-clock and CPU time of the case's process (the CPU figure is the
one to trust on a shared, loaded machine). ``compare_phase_cpu_s`` splits the whole
comparison, each step run again on its own: ``align``, ``oracle_replay``, ``reference``
(best rung, blocks, resamples), ``policies`` (the distinct runs of
``compare_policy_cpu_s``: ``compare_distinct_runs`` of them, GKE's two rows of this GPU
ladder being one) and ``figures`` (every row's report). The machine is described by what it
measures: os.cpu_count() and the load average before and after. Goals (issue 29): the
whole comparison of each case under ``goal_s`` (5) CPU seconds and ``goal_mb`` (300) MB;
``*_met`` say whether each was met. Prints one JSON object on stdout, nothing else.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

from ray_ladder import Ladder
from ray_ladder.simulate import Replay, Trace, align, markov_trace, replay, simulate
from ray_ladder.simulate.baselines import PolicyContext, parse_policies
from ray_ladder.simulate.figures import serving_rungs
from ray_ladder.simulate.reference import Reference, build_reference
from ray_ladder.simulate.report import summarise

YEAR_S = 365 * 86400
TICK_S = 60.0
GOAL_S = 5.0
GOAL_MB = 300.0

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


def _rss_mb() -> float:
    """This process's peak resident set so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def year_traces() -> dict[str, Trace]:
    """Capacity that changes every few hours."""
    return {
        "h100": markov_trace(6 * 3600, 2 * 3600, YEAR_S, seed=1, gap_s=TICK_S),
        "a100": markov_trace(3 * 3600, 3600, YEAR_S, seed=2, gap_s=TICK_S),
        "l4": markov_trace(12 * 3600, 1800, YEAR_S, seed=3, gap_s=TICK_S),
        "cpu": markov_trace(30 * 86400, 600, YEAR_S, seed=4, gap_s=TICK_S),
    }


def churn_traces() -> dict[str, Trace]:
    """Capacity that flips every few minutes, on every compute rung."""
    return {
        "h100": markov_trace(6 * 60, 4 * 60, YEAR_S, seed=11, gap_s=TICK_S),
        "a100": markov_trace(5 * 60, 3 * 60, YEAR_S, seed=12, gap_s=TICK_S),
        "l4": markov_trace(8 * 60, 3 * 60, YEAR_S, seed=13, gap_s=TICK_S),
        "cpu": markov_trace(10 * 60, 3 * 60, YEAR_S, seed=14, gap_s=TICK_S),
    }


def _comparison(traces: dict[str, Trace], ticks: int) -> dict[str, Any]:
    """The whole comparison, timed; then each compared policy alone (CPU s)."""
    compared, compare_s, compare_cpu_s = _timed(lambda: simulate(
        LADDER, traces, tick_s=TICK_S, compare="all"))
    peak = _rss_mb()  # before the per-policy runs below add their own replays
    timeline = align(traces, tick_s=TICK_S, ticks=ticks)
    ctx = PolicyContext.build(LADDER, timeline, warm=["l4"])
    per_policy = {}
    distinct: dict[Any, tuple[Replay, float]] = {}  # what the comparison runs once
    for policy in parse_policies("all"):
        rep, _, cpu_s = _timed(lambda p=policy: p.run(ctx))  # type: ignore[misc]
        per_policy[policy.label] = round(cpu_s, 3)
        distinct.setdefault(policy.replay_key(ctx), (rep, cpu_s))
    return {
        "segments": len(timeline.starts),
        "compare_year_s": round(compare_s, 3),
        "compare_year_cpu_s": round(compare_cpu_s, 3),
        "compare_phase_cpu_s": _phases(traces, ticks, [r for r, _ in distinct.values()],
                                       sum(s for _, s in distinct.values())),
        "compare_distinct_runs": len(distinct),
        "compare_policies": [p.policy for p in compared.comparison] + ["oracle"],
        "compare_policy_cpu_s": per_policy,
        "compare_quality_weighted_availability": {
            p.policy: round(p.quality_weighted_availability, 4)
            for p in [*compared.comparison, compared.oracle]},
        "peak_mb": round(peak, 1),
        "compare_met": compare_s < GOAL_S,
        "compare_met_cpu": compare_cpu_s < GOAL_S,
        "mem_met": peak < GOAL_MB,
    }


def _phases(traces: dict[str, Trace], ticks: int, replays: list[Replay],
            policies_cpu_s: float) -> dict[str, float]:
    """CPU seconds of each step of the whole comparison, run one at a time: aligning the
    traces, the oracle's replay, the reference (best rung, blocks, resamples), the
    compared policies' runs (``compare_policy_cpu_s``, each distinct replay once: GKE's
    two rows of this GPU ladder are one) and turning each replay and the oracle's into
    figures."""
    timeline, _, align_s = _timed(lambda: align(traces, tick_s=TICK_S, ticks=ticks))
    oracle, _, oracle_s = _timed(lambda: replay(LADDER, timeline, hysteresis=1))
    names = oracle.names
    quality = [LADDER.rung(n).quality for n in names]
    cost = [LADDER.work_cost_per_hour(n) for n in names]
    serves = serving_rungs(LADDER, names)

    def reference() -> Reference:
        ref = build_reference(timeline, names, quality)
        _ = ref.steps, ref.span_sums  # what every policy's figures read
        return ref

    ref, _, ref_s = _timed(reference)
    obtainable = [timeline.obtainable_ticks(n) if n in timeline.names else timeline.ticks
                  for n in names]
    _, _, figures_s = _timed(lambda: [summarise(
        rep, quality=quality, cost_per_hour=cost, serves=serves, reference=ref,
        cost_oracle=1.0, obtainable_ticks=obtainable, flap_window_s=TICK_S)
        for rep in [oracle, *replays]])
    return {"align": round(align_s, 3), "oracle_replay": round(oracle_s, 3),
            "reference": round(ref_s, 3), "policies": round(policies_cpu_s, 3),
            "figures": round(figures_s, 3)}


def year_case() -> dict[str, Any]:
    """The year of slow changes: one replay, one simulate() call, the whole comparison."""
    import_mb = _rss_mb()
    traces = year_traces()
    ticks = int(YEAR_S / TICK_S)
    timeline, align_s, _ = _timed(lambda: align(traces, tick_s=TICK_S, ticks=ticks))
    rep, replay_s, replay_cpu_s = _timed(lambda: replay(LADDER, timeline, hysteresis=3))
    report, simulate_s, simulate_cpu_s = _timed(lambda: simulate(
        LADDER, traces, hysteresis=3, tick_s=TICK_S, promotion_delay_s=341,
        demotion_delay_s=120))
    del report.policies[1:]  # keep only what is read below
    policy = report.policies[0]
    out = {
        "ticks": ticks,
        "rungs": len(LADDER.rungs),
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
        "met": simulate_s < GOAL_S,
        "met_cpu": simulate_cpu_s < GOAL_S,
    }
    del report, rep
    return {**out, **_comparison(traces, ticks), "import_mb": round(import_mb, 1)}


def churn_case() -> dict[str, Any]:
    """The high-churn year: the whole comparison only."""
    import_mb = _rss_mb()
    out = _comparison(churn_traces(), int(YEAR_S / TICK_S))
    return {"traces": "markov, mean up 5-10 min, down 3-4 min, h100 a100 l4 cpu",
            **out, "import_mb": round(import_mb, 1)}


CASES = {"year": year_case, "high_churn": churn_case}


def _run_case(name: str) -> dict[str, Any]:
    """Run one case in a fresh interpreter and read its JSON."""
    done = subprocess.run([sys.executable, __file__, "--case", name], check=True,
                          stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> dict[str, Any]:
    from _machine import python_mops  # bench/ is on the path when run as a script

    load_before, mops_before = os.getloadavg(), python_mops()
    year = _run_case("year")
    churn = _run_case("high_churn")
    load_after = os.getloadavg()
    met = [year["compare_met_cpu"], year["mem_met"], churn["compare_met_cpu"],
           churn["mem_met"]]
    return {
        **year,
        "high_churn": churn,
        "goal_s": GOAL_S,
        "goal_mb": GOAL_MB,
        "all_met_cpu": all(met),
        "cpus": os.cpu_count(),
        "loadavg_1m_before": round(load_before[0], 2),
        "loadavg_1m_after": round(load_after[0], 2),
        # How fast one core runs Python here (CPU-second goals depend on it).
        "python_mops_before": mops_before,
        "python_mops_after": python_mops(),
    }


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        print(json.dumps(CASES[sys.argv[2]]()), flush=True)
    else:
        print(json.dumps(main()), flush=True)
