"""`ray-ladder simulate`: table, JSON report, PNG, errors; the real traces when present."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_ladder.cli import main
from ray_ladder.simulate import simulate

DATA = Path(__file__).parent.parent / "data" / "traces"
LADDER = """
name: t
policy: {promotion_hysteresis: 2, max_degraded_seconds: 150}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, quality: 1.0, cost_per_hour: 36}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.8, cost_per_hour: 18}
  - {name: cpu, num_cpus: 1, quality: 0.5, cost_per_hour: 3.6}
  - {name: shed, kind: shed, quality: 0}
"""


@pytest.fixture()
def ladder_file(tmp_path: Path) -> Path:
    p = tmp_path / "ladder.yaml"
    p.write_text(LADDER)
    return p


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["simulate", *args])
    return result.exit_code, result.output


def test_sweep_writes_table_json_and_png(ladder_file: Path, tmp_path: Path) -> None:
    out_json, out_png = tmp_path / "out" / "r.json", tmp_path / "out" / "r.png"
    code, out = invoke(str(ladder_file), "--trace", f"h100={DATA / 'h100.json'}",
                       "--trace", f"a100={DATA / 'a100.csv'}", "--hysteresis", "1,2,3",
                       "--json", str(out_json), "--plot", str(out_png))
    assert code == 0, out
    assert "h=1" in out and "h=3" in out and "oracle" in out and "h100.json" in out
    report = json.loads(out_json.read_text())
    assert [p["hysteresis"] for p in report["policies"]] == [1, 2, 3]
    assert report["policies"][0]["rung_fraction"]["h100"] == 0.7
    assert report["ticks"] == 10 and report["tick_s"] == 100
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_default_hysteresis_is_the_ladders(ladder_file: Path, tmp_path: Path) -> None:
    out_json = tmp_path / "r.json"
    code, out = invoke(str(ladder_file), "--trace", f"h100={DATA / 'h100.json'}",
                       "--json", str(out_json))
    assert code == 0, out
    # promotion_hysteresis 2 x probe_interval_s 1 = 2 s: one tick of these 100 s traces.
    policies = json.loads(out_json.read_text())["policies"]
    assert [(p["hysteresis"], p["hysteresis_s"], p["hysteresis_asked_s"])
            for p in policies] == [(1, 100, 2)]
    assert "(asked 2s)" in out


def test_generated_only_run_with_units(ladder_file: Path, tmp_path: Path) -> None:
    out_json = tmp_path / "r.json"
    code, out = invoke(str(ladder_file), "--trace", "h100=markov:up=6h,down=1h,seed=1",
                       "--trace", "a100=outage:1h-2h", "--trace", "cpu=always",
                       "--duration", "2d", "--tick", "5m", "--promotion-delay", "341",
                       "--demotion-delay", "2m", "--warm", "none", "--json", str(out_json))
    assert code == 0, out
    report = json.loads(out_json.read_text())
    assert (report["ticks"], report["tick_s"], report["warm"]) == (576, 300, [])
    assert report["policies"][0]["promotion_delay_s"] == 341
    assert report["policies"][0]["demotion_delay_s"] == 120


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--trace", "h100=always"], "give duration_s (--duration)"),
        (["--trace", "tpu=always", "--duration", "1h"], "unknown rung 'tpu'"),
        (["--trace", "h100"], "expected RUNG=SPEC"),
        (["--trace", "h100=nope.json"], "no such file"),
        (["--trace", "h100=always", "--trace", "h100=never", "--duration", "1h"],
         "has a trace already"),
        (["--trace", "h100=always", "--duration", "1h", "--hysteresis", "1,x"],
         "expected integers"),
        (["--trace", "h100=always", "--duration", "soon"], "not a duration"),
        (["--trace", "h100=always", "--duration", "1h", "--compare", "slurm"],
         "unknown policy 'slurm'"),
        (["--trace", "h100=always", "--duration", "1h", "--compare", "litellm:ttl=1"],
         "keys: cooldown, start"),
    ],
)
def test_errors_exit_2_with_the_reason(ladder_file: Path, args: list[str], match: str) -> None:
    code, out = invoke(str(ladder_file), *args)
    assert code == 2
    assert match in out


def test_compare_prints_one_row_per_policy_and_writes_them(ladder_file: Path,
                                                          tmp_path: Path) -> None:
    out_json, out_png = tmp_path / "c.json", tmp_path / "c.png"
    code, out = invoke(str(ladder_file), "--trace", f"h100={DATA / 'h100.json'}",
                       "--trace", f"a100={DATA / 'a100.csv'}", "--compare", "all",
                       "--compare", "karpenter:consolidation=on,ice_ttl=1m",
                       "--flap-window", "5m", "--json", str(out_json), "--plot", str(out_png))
    assert code == 0, out
    assert "side by side" in out and "ray-native" in out and "oracle" in out
    assert "h=2" not in out  # comparing alone skips the hysteresis sweep
    report = json.loads(out_json.read_text())
    assert [p["policy"] for p in report["comparison"]] == [
        "ladder", "ray-native", "gke-computeclass",
        "gke-computeclass (when_unsatisfiable=ScaleUpAnyway)", "karpenter", "litellm",
        "karpenter (ice_ttl=60, consolidation=on)"]
    assert report["flap_window_s"] == 300 and report["policies"] == []
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_invalid_ladder_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nrungs: []\n")
    code, out = invoke(str(bad), "--trace", "x=always", "--duration", "1h")
    assert code == 2 and "invalid ladder" in out


def test_simulator_imports_neither_ray_nor_matplotlib() -> None:
    code = ("import sys, ray_ladder.simulate, ray_ladder.simulate.baselines, "
            "ray_ladder.cli.simulate_cmd; "
            "print(sorted(m for m in ('ray', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_real_traces_with_the_gpu_serving_ladder(gpu_ladder, traces_dir: Path) -> None:
    t = traces_dir / "aws-10-26-2022_us-west-2a"
    r = simulate(gpu_ladder, {"h100": f"{t}_v100_8.json", "a100": f"{t}_k80_8.json",
                              "l4": f"{t}_v100_1.json"}, hysteresis=[1, 3, 10])
    assert (r.ticks, r.tick_s) == (3895, 600)
    h1 = r.policy(1)
    assert h1.rung_fraction["h100"] == r.rungs[0]["obtainable_fraction"]
    assert h1.rung_fraction["h100"] == pytest.approx(0.480, abs=0.0005)
    climbs = [r.policy(h).climbs for h in (1, 3, 10)]
    assert climbs == sorted(climbs, reverse=True) and climbs[-1] < climbs[0]


def test_real_traces_side_by_side(gpu_ladder, traces_dir: Path) -> None:
    t = traces_dir / "aws-10-26-2022_us-west-2a"
    r = simulate(gpu_ladder, {"h100": f"{t}_v100_8.json", "a100": f"{t}_k80_8.json",
                              "l4": f"{t}_v100_1.json"},
                 compare=["all", "ladder:h=1,fall=0,start=0,climb=0"])
    free = r.comparison[-1]
    assert free.quality_weighted_availability == r.oracle.quality_weighted_availability
    assert all(p.quality_weighted_availability <= free.quality_weighted_availability
               for p in r.comparison)
    # A GPU pod or replica never lands on the CPU pool: its request is fixed (Ray's
    # fallback changes labels; a pod asking for a GPU cannot schedule without one). Ray
    # native waits for h100, which autoscaler v2 keeps relaunching; Karpenter stays on
    # the GPU offering it lands on (no climb by weight). LiteLLM may use its CPU deployment.
    k, ray = r.compared("karpenter"), r.compared("ray-native")
    assert all(r.compared(n).rung_fraction["cpu"] == 0
               for n in ("ray-native", "gke-computeclass", "karpenter"))
    assert 0.1 < k.top_fraction < 0.3 and k.climbs > 0
    assert ray.top_fraction > 0.47
    # GKE climbs back, one 341 s migration at a time; LiteLLM follows capacity at once.
    assert 0.40 < r.compared("gke-computeclass").top_fraction < r.compared("litellm").top_fraction
    assert r.compared("litellm").flaps >= free.flaps


def test_the_comparison_table_in_the_docs(gpu_ladder, traces_dir: Path) -> None:
    """docs/simulate-peers.md's first comparison table, to four places (update both together)."""
    t = traces_dir / "aws-10-26-2022_us-west-2a"
    r = simulate(gpu_ladder, {"h100": f"{t}_v100_8.json", "a100": f"{t}_k80_8.json",
                              "l4": f"{t}_v100_1.json"},
                 compare=["ladder:h=2", "ladder:h=1", "ray-native", "gke-computeclass",
                          "gke-computeclass:when_unsatisfiable=ScaleUpAnyway", "karpenter",
                          "karpenter:consolidation=on", "litellm"])
    got = {p.policy: (round(p.quality_weighted_availability, 4), p.flaps)
           for p in [*r.comparison, r.oracle]}
    assert got == {
        "ladder (hysteresis=2)": (0.8705, 97), "ladder (hysteresis=1)": (0.8906, 219),
        "ray-native": (0.4789, 1), "gke-computeclass": (0.7921, 135),
        "gke-computeclass (when_unsatisfiable=ScaleUpAnyway)": (0.7921, 135),
        "karpenter": (0.7651, 33), "karpenter (consolidation=on)": (0.7145, 75),
        "litellm": (0.8867, 226), "ladder": (0.8917, 219),  # the oracle
    }


@pytest.mark.parametrize(("seconds", "text"), [(45, "45s"), (600, "10m"), (750, "12m30s"),
                                               (6000, "1h40m"), (183600, "2d03h")])
def test_durations_in_the_table_read_like_durations(seconds: float, text: str) -> None:
    from ray_ladder.cli.simulate_cmd import fmt_s

    assert fmt_s(seconds) == text
