"""No policy beats the oracle on any hand-made trace of the tests, or the report says so.

The oracle serves the best obtainable rung at every tick with free switching: no policy
serves more hours or more quality-weighted availability, and none the same for less per
served hour. Where a model can (GKE's ScaleUpAnyway node is taken to be always there), the
report carries a loud note naming it and why.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ray_ladder import Ladder
from ray_ladder.cli import main
from ray_ladder.simulate import Note, SimulationReport, Trace, simulate
from ray_ladder.simulate.bounds import oracle_notes
from tests.simulate import test_baselines as tb
from tests.simulate import test_served as ts
from tests.simulate import test_simulate_replay as tr

EPS = 1e-9
H, A, C = tb.H, tb.A, tb.C
bits = tb.bits

# Every hand-made trace set of tests/simulate (100 s ticks), with the rungs it is for.
HAND_MADE: list[tuple[str, dict[str, Trace | str]]] = [
    ("native", tb.NATIVE_TRACES),
    ("native, cpu pool", {H: tb.NATIVE_TRACES[H], A: "never"}),
    ("gke", tb.GKE_TRACES),
    ("gke abandons", {H: bits(1, 0, 1, 0, 0, 0, 0, 0, 0, 0), C: "always"}),
    ("gke unsatisfiable", {H: bits(1, 1, 0, 0, 1, 1, 1, 1, 1, 1),
                           C: bits(1, 1, 0, 0, 0, 0, 0, 0, 0, 0)}),
    ("karpenter", tb.KARPENTER_TRACES),
    ("karpenter refused", {H: bits(1, 0, 0, 0, 0, 0, 0, 0, 0, 0),
                           A: bits(1, 0, 0, 1, 1, 1, 1, 1, 1, 1)}),
    ("litellm", {H: bits(1, 1, 0, 0, 1, 1, 0, 1, 1, 1), A: "always", C: "always"}),
    ("litellm standby", {H: bits(1, 1, 1, 1, 1, 0, 0, 0, 0, 0)}),
    ("replay files", dict(tr.TRACES)),
    ("served", dict(ts.TRACES)),
    ("everything lost", {H: "never", A: "never", C: "never"}),
]
COMPARE = ["all", "ladder:h=2,fall=0,start=0,climb=0", "ladder:h=3,start=50,warm=all",
           "ray-native:launch_timeout=150,start=50", "gke-computeclass:start=50,climb=150",
           "gke-computeclass:when_unsatisfiable=ScaleUpAnyway,provision_fail=0",
           "karpenter:ice_ttl=300,retry=20,start=50", "karpenter:consolidation=on,start=50",
           "litellm:cooldown=30,start=50"]


def reports() -> list[tuple[str, SimulationReport]]:
    out = []
    for name, traces in HAND_MADE:
        for rungs in ((H, A, C), (H, A)):
            if any(r not in rungs for r in traces):
                continue
            lad = tb.ladder(*rungs)
            generated = all(isinstance(t, str) and ".json" not in t for t in traces.values())
            out.append((f"{name} {'+'.join(rungs)}",
                        simulate(lad, traces, tick_s=tb.TICK,
                                 duration_s=10 * tb.TICK if generated else None,
                                 hysteresis=[1, 2, 3], promotion_delay_s=150,
                                 demotion_delay_s=50, compare=COMPARE)))
    return out


REPORTS = reports()


def beats(p, oracle) -> list[str]:  # type: ignore[no-untyped-def]
    """Which bounds of the oracle ``p`` breaks."""
    out = []
    if p.served_hours > oracle.served_hours + EPS:
        out.append("served hours")
    if p.quality_weighted_availability > oracle.quality_weighted_availability + EPS:
        out.append("quality")
    if (p.cost_per_served_hour is not None and oracle.cost_per_served_hour is not None
            and abs(p.served_hours - oracle.served_hours) <= EPS
            and abs(p.quality_weighted_availability
                    - oracle.quality_weighted_availability) <= EPS
            and p.cost_per_served_hour < oracle.cost_per_served_hour - EPS):
        out.append("cost per served hour")
    return out


@pytest.mark.parametrize(("case", "report"), REPORTS, ids=[c for c, _ in REPORTS])
def test_no_policy_beats_the_oracle_in_silence(case: str, report: SimulationReport) -> None:
    for p in [*report.policies, *report.comparison]:
        broken = beats(p, report.oracle)
        if "ScaleUpAnyway" in p.policy:
            # The one model that serves against its trace: it may, but never in silence.
            assert bool(broken) == any(n.policy == p.label for n in report.notes), case
            continue
        assert broken == [], (case, p.label, broken)
    assert all(n.kind == "above_oracle" and "ScaleUpAnyway" in n.policy
               for n in report.notes), report.notes


def test_scale_up_anyway_beats_the_oracle_and_the_report_says_why() -> None:
    # Every trace says never: the oracle sheds all along (0 h served), while GKE's
    # default-series node hosts the cpu rung against its trace (the example).
    r = dict(REPORTS)["everything lost h100+a100+cpu"]
    assert r.oracle.served_hours == 0 and r.oracle.shed_fraction == 1.0
    p = r.compared("gke-computeclass (when_unsatisfiable=ScaleUpAnyway)")
    assert beats(p, r.oracle) == ["served hours", "quality"]
    assert [n.text for n in r.notes if n.text.startswith(p.label + " serves")] == [
        f"{p.label} serves 0.2667 h, more than the oracle's 0 h: its ScaleUpAnyway node "
        "of GKE's default series is taken to be always there, so it serves 'cpu' while "
        "that rung's trace says there is no capacity (a modelling choice, not a better "
        "policy)"]
    assert {n.kind for n in r.notes} == {"above_oracle"}
    assert r.to_dict()["notes"] == [
        {"kind": "above_oracle", "policy": n.policy, "text": n.text} for n in r.notes]


def test_the_note_is_printed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "l.yaml"
    # A CPU workload (GKE's default-series node can host it; a GPU pod it cannot).
    f.write_text("name: t\nrungs:\n  - {name: h100, num_cpus: 8, cost_per_hour: 36}\n"
                 "  - {name: cpu, num_cpus: 1, quality: 0.5, cost_per_hour: 3.6}\n"
                 "  - {name: shed, kind: shed}\n")
    result = CliRunner().invoke(main, ["simulate", str(f), "--trace", "h100=never",
                                       "--trace", "cpu=never", "--duration", "1h",
                                       "--compare",
                                       "gke-computeclass:when_unsatisfiable=ScaleUpAnyway"])
    assert result.exit_code == 0, result.output
    assert "NOTE: above the oracle" in result.output and "always there" in result.output


def test_a_cheaper_rung_of_equal_quality_is_noted() -> None:
    # h100 and a100 both quality 1: a policy on a100 serves the same for less. The
    # oracle takes h100 (ladder order); the note says so rather than print it silently.
    lad = Ladder.from_dict({"name": "t", "rungs": [
        {"name": H, "num_cpus": 1, "quality": 1.0, "cost_per_hour": 36.0},
        {"name": A, "num_cpus": 1, "quality": 1.0, "cost_per_hour": 18.0},
        {"name": "shed", "kind": "shed"}]})
    r = simulate(lad, {H: bits(1, 0, 1, 1, 1, 1, 1, 1, 1, 1)}, tick_s=tb.TICK,
                 compare=["ray-native:start=0,launch_timeout=0"])
    p = r.comparison[0]
    assert beats(p, r.oracle) == ["cost per served hour"]
    assert len(r.notes) == 1 and "equal quality that costs less" in r.notes[0].text
    assert (r.notes[0].kind, r.notes[0].policy) == ("above_oracle", p.label)
    assert oracle_notes(r.oracle, [(r.oracle, None)]) == []


def test_each_note_has_its_kind_and_the_cli_decides_on_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A training top rung and every trace "never": LiteLLM cannot run the gang (no row,
    # a "cannot_run" note); GKE's ScaleUpAnyway node serves cpu against its trace, above
    # the oracle (0 h served) in hours and in quality: two "above_oracle" notes.
    lad = Ladder.from_dict({"name": "t", "rungs": [
        {"name": H, "num_cpus": 1, "cost_per_hour": 36.0, "train": {"workers": 2}},
        {"name": C, "num_cpus": 1, "quality": 0.5, "cost_per_hour": 3.6},
        {"name": "shed", "kind": "shed"}]})
    gke = "gke-computeclass (when_unsatisfiable=ScaleUpAnyway)"
    r = simulate(lad, {H: "never", C: "never"}, tick_s=tb.TICK, duration_s=10 * tb.TICK,
                 compare=["litellm", "gke-computeclass:when_unsatisfiable=ScaleUpAnyway",
                          "karpenter"])
    assert [p.policy for p in r.comparison] == [gke, "karpenter"]
    assert [(n.kind, n.policy) for n in r.notes] == [
        ("cannot_run", "litellm"), ("above_oracle", gke), ("above_oracle", gke)]
    assert all(isinstance(n, Note) for n in r.notes)
    assert r.to_dict()["notes"] == [
        {"kind": n.kind, "policy": n.policy, "text": n.text} for n in r.notes]
    assert r.notes[0].text.startswith("no row for litellm: h100 train")
    f = tmp_path / "l.yaml"
    f.write_text("name: t\nrungs:\n"
                 "  - {name: h100, num_cpus: 1, cost_per_hour: 36, train: {workers: 2}}\n"
                 "  - {name: cpu, num_cpus: 1, quality: 0.5, cost_per_hour: 3.6}\n"
                 "  - {name: shed, kind: shed}\n")
    out = CliRunner().invoke(main, ["simulate", str(f), "--trace", "h100=never",
                                    "--trace", "cpu=never", "--duration", "1000",
                                    "--tick", "100", "--compare", "litellm"]).output
    assert "NOTE: no row for litellm" in " ".join(out.split())
    assert "above the oracle" not in out
