"""Trace-replay simulator: what the ladder would have done over past or synthetic capacity.

Pure core (no Ray, no matplotlib until a plot is asked for). Public API::

    from ray_ladder.simulate import simulate, load_trace, markov_trace, outage_trace
    report = simulate("ladder.yaml", {"h100": "h100.json"}, hysteresis=[1, 3, 10])
    report = simulate("ladder.yaml", {"h100": "h100.json"}, compare="all")  # + baselines
    sets = simulate_sets("ladder.yaml", expand_sets({"h100": "{set}/h100.json"},
                                                   ["2024-01", "2024-02"]), compare="all")
"""

from __future__ import annotations

from ray_ladder.simulate.align import Timeline, align
from ray_ladder.simulate.api import DEFAULT_TICK_S, default_warm, needs, simulate
from ray_ladder.simulate.baselines import (
    POLICIES,
    Baseline,
    GkeComputeClass,
    Karpenter,
    LadderPolicy,
    LiteLLM,
    RayNative,
    parse_policies,
    parse_policy,
)
from ray_ladder.simulate.generators import (
    always_on,
    markov_trace,
    never_on,
    outage_trace,
    queued_trace,
)
from ray_ladder.simulate.replay import Replay, replay
from ray_ladder.simulate.report import Note, PolicyReport, SimulationReport
from ray_ladder.simulate.specs import parse_duration, parse_trace_spec
from ray_ladder.simulate.trace_files import load_trace
from ray_ladder.simulate.trace_sets import TraceSetReport, expand_sets, simulate_sets
from ray_ladder.simulate.traces import Trace

__all__ = [
    "DEFAULT_TICK_S",
    "POLICIES",
    "Baseline",
    "GkeComputeClass",
    "Karpenter",
    "LadderPolicy",
    "LiteLLM",
    "Note",
    "PolicyReport",
    "RayNative",
    "Replay",
    "SimulationReport",
    "Timeline",
    "Trace",
    "TraceSetReport",
    "align",
    "always_on",
    "default_warm",
    "expand_sets",
    "load_trace",
    "markov_trace",
    "needs",
    "never_on",
    "outage_trace",
    "parse_duration",
    "parse_policies",
    "parse_policy",
    "parse_trace_spec",
    "queued_trace",
    "replay",
    "simulate",
    "simulate_sets",
]
