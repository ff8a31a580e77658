"""Time below the best available rung: against what the traces (and the ladder's
constraints, and the @K counts) let anyone have at that tick, not against the top rung.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ray_ladder import Constraints, Ladder
from ray_ladder.cli import main
from ray_ladder.simulate import simulate
from tests.simulate.test_baselines import TICK, A, C, H, bits, ladder
from tests.simulate.test_oracle_bound import reports

COUNTS = Path(__file__).parent / "data" / "count-16.json"  # 16 16 5 8 0 16 3 16 16 16


def test_on_rung_two_while_the_top_is_gone_is_not_below_the_best() -> None:
    p = simulate(ladder(H, A), {H: "never"}, tick_s=TICK, duration_s=1000,
                 hysteresis=[1]).policies[0]
    assert p.replay.served_per_tick() == [A] * 10
    assert p.below_best_s_total == 0.0 and p.below_best_fraction == 0.0
    assert p.regret == 0.0
    # The old figure, against the top rung, still calls all of it degraded.
    assert p.degraded_s_total == 1000.0


def test_waiting_out_the_hysteresis_is_below_the_best() -> None:
    traces = {H: bits(1, 1, 0, 0, 1, 1, 1, 1, 1, 1), A: bits(1, 1, 1, 0, 0, 1, 1, 1, 1, 1)}
    r = simulate(ladder(H, A, C), traces, hysteresis=[1, 3], tick_s=TICK)
    h1, h3 = r.policies
    assert h1.below_best_s_total == 0.0
    # On cpu at 4 and 5 while h100 is back (a100 at 2 and cpu at 3 were the best).
    assert h3.below_best_s_total == 200.0 and h3.below_best_fraction == 0.2
    assert h3.degraded_s_total == 400.0


def test_the_constraints_decide_what_is_available() -> None:
    traces = {H: bits(1, 0, 0, 0, 1, 1, 1, 1, 1, 1), A: bits(1, 1, 0, 0, 0, 0, 1, 1, 1, 1)}
    full = simulate(ladder(H, A, C), traces, hysteresis=[2], tick_s=TICK).policies[0]
    gpu = simulate(ladder(H, A, C), traces, hysteresis=[2], tick_s=TICK,
                   constraints=Constraints(min_quality=0.8)).policies[0]
    # cpu is not eligible under min_quality 0.8: shed is the best at 2 and 3, and
    # shedding there is not below it; tick 4 (h100 back, the climb at 5) is.
    assert full.replay.served_per_tick() == [H, A, C, C, C, H, H, H, H, H]
    assert gpu.replay.served_per_tick() == [H, A, "shed", "shed", "shed", H, H, H, H, H]
    assert full.below_best_s_total == gpu.below_best_s_total == 100.0


def test_nothing_is_below_the_shed_rung() -> None:
    traces = {H: bits(1, 0, 0, 1), A: bits(1, 1, 0, 0)}
    r = simulate(ladder(H, A), traces, tick_s=TICK, compare=["karpenter:start=0"])
    p = r.comparison[0]
    assert p.replay.served_per_tick() == [H, A, None, None]
    assert p.below_best_s_total == 200.0  # tick 2 (shed could answer) and tick 3 (h100)


def test_the_oracle_is_never_below_the_best() -> None:
    for name, r in reports():
        assert r.oracle.below_best_s_total == 0.0, name


def gang_ladder(nodes: int | None = None) -> Ladder:
    params = {} if nodes is None else {"params": {"nodes": nodes}}
    return Ladder.from_dict({"name": "train", "policy": {"promotion_hysteresis": 1}, "rungs": [
        {"name": "gang", "num_gpus": 1, "quality": 1.0, "cost_per_hour": 8.0, **params},
        {"name": "single", "num_gpus": 1, "quality": 0.4, "cost_per_hour": 1.0},
    ]})


def test_the_k_counts_decide_what_is_available() -> None:
    r = simulate(gang_ladder(), {"gang": f"{COUNTS}@16"}, hysteresis=[2])
    p = r.policies[0]
    # @16: the gang can be had at 0 1 5 7 8 9; at 3 (8 nodes) "single" is the best.
    assert p.replay.served_per_tick() == ["gang", "gang", "single", "single", "single",
                                          "single", "single", "single", "gang", "gang"]
    assert p.below_best_s_total == 200.0  # 5 and 7: the gang was back, h=2 waited
    assert r.oracle.below_best_s_total == 0.0


def test_the_k_counts_reach_the_needs_column() -> None:
    # The spec's @K wins, whichever else says how many: it used to show 1 (or 8).
    assert simulate(gang_ladder(), {"gang": f"{COUNTS}@16"}).rungs[0]["need"] == 16
    assert simulate(gang_ladder(nodes=8), {"gang": f"{COUNTS}@16"}).rungs[0]["need"] == 16
    assert simulate(gang_ladder(nodes=8), {"gang": str(COUNTS)}).rungs[0]["need"] == 8
    assert simulate(gang_ladder(nodes=8), {"gang": str(COUNTS)},
                    need={"gang": 4}).rungs[0]["need"] == 4
    assert simulate(gang_ladder(), {"gang": str(COUNTS)}).rungs[0]["need"] == 1


def test_the_cli_needs_column_shows_the_trace_k(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("name: train\npolicy: {promotion_hysteresis: 1}\nrungs:\n"
                    "  - {name: gang, num_gpus: 1, quality: 1.0, cost_per_hour: 8}\n"
                    "  - {name: single, num_gpus: 1, quality: 0.4, cost_per_hour: 1}\n")
    result = CliRunner().invoke(main, ["simulate", str(path), "--trace",
                                       f"gang={COUNTS}@16"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = [c.strip() for c in next(ln for ln in lines if "needs" in ln).split("┃")]
    gang = [c.strip() for c in next(ln for ln in lines if "│ gang" in ln).split("│")]
    assert gang[header.index("needs")] == "16"
