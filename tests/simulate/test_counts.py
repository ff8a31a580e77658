"""Count traces: a rung that needs k nodes is obtainable only while the trace counts >= k."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_ladder import Ladder
from ray_ladder.cli import main
from ray_ladder.simulate import Trace, load_trace, parse_trace_spec, simulate

# Per 100 s tick:  0   1   2  3  4   5  6   7   8   9
COUNTS = Path(__file__).parent / "data" / "count-16.json"  # 16 16 5 8 0 16 3 16 16 16


def gang_ladder(nodes: int | None = None) -> Ladder:
    params = {} if nodes is None else {"params": {"nodes": nodes}}
    return Ladder.from_dict({"name": "train", "policy": {"promotion_hysteresis": 1}, "rungs": [
        {"name": "gang", "num_gpus": 1, "quality": 1.0, "cost_per_hour": 8.0, **params},
        {"name": "single", "num_gpus": 1, "quality": 0.4, "cost_per_hour": 1.0},
    ]})


def test_a_count_trace_keeps_its_counts() -> None:
    t = load_trace(COUNTS)
    assert t.counts == (16, 5, 8, 0, 16, 3, 16)
    assert t.starts == (0, 200, 300, 400, 500, 600, 700)
    assert t.obtainable_fraction() == 0.9  # any count > 0


@pytest.mark.parametrize(
    ("k", "per_tick"),
    [
        (1, [1, 1, 1, 1, 0, 1, 1, 1, 1, 1]),
        (4, [1, 1, 1, 1, 0, 1, 0, 1, 1, 1]),
        (8, [1, 1, 0, 1, 0, 1, 0, 1, 1, 1]),
        (16, [1, 1, 0, 0, 0, 1, 0, 1, 1, 1]),
        (17, [0] * 10),
    ],
)
def test_at_least_k(k: int, per_tick: list[int]) -> None:
    t = load_trace(COUNTS).at_least(k)
    assert [int(t.at(i * 100)) for i in range(10)] == per_tick
    assert parse_trace_spec(f"{COUNTS}@{k}") == t


def test_the_rung_says_how_many_nodes_it_needs() -> None:
    r = simulate(gang_ladder(nodes=8), {"gang": str(COUNTS)})
    assert r.rungs[0]["need"] == 8 and r.rungs[0]["obtainable_fraction"] == 0.7
    p = r.policies[0]
    assert p.replay.served_per_tick() == ["gang", "gang", "single", "gang", "single", "gang",
                                          "single", "gang", "gang", "gang"]


def test_the_trace_spec_wins_over_the_rung_and_need_over_params() -> None:
    assert simulate(gang_ladder(nodes=8), {"gang": f"{COUNTS}@16"}).rungs[0][
        "obtainable_fraction"] == 0.6
    assert simulate(gang_ladder(nodes=8), {"gang": str(COUNTS)}, need={"gang": 4}).rungs[0][
        "obtainable_fraction"] == 0.8
    assert simulate(gang_ladder(), {"gang": str(COUNTS)}).rungs[0]["need"] == 1


def test_baselines_see_the_same_k() -> None:
    r = simulate(gang_ladder(nodes=8), {"gang": str(COUNTS)}, compare="litellm,ladder:fall=0")
    # Both follow the gang rung whenever 8 nodes can be had (70% of the time), less what
    # each of their 3 climbs waits: 10 s for the gang to answer (and the ladder's router
    # 0.3 s more to move).
    assert [p.policy for p in r.comparison] == ["litellm", "ladder (fall=0)"]
    assert r.compared("litellm").top_fraction == pytest.approx(0.67)
    assert r.compared("ladder (fall=0)").top_fraction == pytest.approx(0.7 - 3 * 10.3 / 1000)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("markov:up=1h,down=1h@2", "on/off"),
        ("always@3", "on/off"),
        (f"{COUNTS}@0", "K >= 1"),
    ],
)
def test_bad_needs(spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_trace_spec(spec, duration_s=1000)


def test_bad_params_nodes() -> None:
    with pytest.raises(ValueError, match="params.nodes must be an integer >= 1"):
        simulate(gang_ladder(nodes=0), {"gang": str(COUNTS)})


def test_counts_from_steps() -> None:
    t = Trace.from_counts([(0, 2), (10, 2), (20, 0)], duration_s=30)
    assert (t.starts, t.counts, t.values) == ((0.0, 20.0), (2, 0), (True, False))
    with pytest.raises(ValueError, match="counts must be"):
        Trace((0.0,), (True,), counts=(0,))


def test_cli_need_option(tmp_path: Path) -> None:
    lad = tmp_path / "l.yaml"
    lad.write_text("name: train\nrungs:\n  - {name: gang, num_gpus: 1}\n"
                   "  - {name: single, num_gpus: 1, quality: 0.4}\n")
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["simulate", str(lad), "--trace", f"gang={COUNTS}",
                                       "--need", "gang=16", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "needs" in result.output
    import json

    assert json.loads(out.read_text())["rungs"][0]["obtainable_fraction"] == 0.6
    bad = CliRunner().invoke(main, ["simulate", str(lad), "--trace", f"gang={COUNTS}",
                                    "--need", "gang"])
    assert bad.exit_code == 2 and "RUNG=K" in bad.output
