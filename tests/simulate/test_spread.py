"""The spread of the headline figures: a seeded block bootstrap over days (or tenths of a
short replay), deterministic, around the point estimate, in the table and the JSON.
"""

from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner

from ray_ladder import Ladder
from ray_ladder.cli import main
from ray_ladder.simulate import markov_trace, simulate
from ray_ladder.simulate.align import Timeline
from ray_ladder.simulate.reference import block_edges, build_reference
from ray_ladder.simulate.spread import percentile_interval
from tests.simulate.test_baselines import TICK, A, C, H, bits, ladder

DAY = 86400.0
KEYS = ("served_fraction", "cost_per_served_hour", "regret")


def month() -> dict[str, object]:
    return {H: markov_trace(6 * 3600, 3 * 3600, 30 * DAY, seed=1, gap_s=600),
            A: markov_trace(3 * 3600, 2 * 3600, 30 * DAY, seed=2, gap_s=600),
            C: markov_trace(20 * 3600, 3600, 30 * DAY, seed=3, gap_s=600)}


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    return simulate(ladder(H, A, C), month(), hysteresis=[1, 3], duration_s=30 * DAY,
                    compare=["ladder:h=3", "gke-computeclass", "karpenter", "litellm"])


def test_the_interval_holds_the_point_estimate(report) -> None:  # type: ignore[no-untyped-def]
    assert report.spread_method["blocks"] == 30 and report.spread_method["block_s"] == DAY
    for p in [report.oracle, *report.policies, *report.comparison]:
        point = {"served_fraction": p.served_fraction, "regret": p.regret,
                 "cost_per_served_hour": p.cost_per_served_hour}
        for key in KEYS:
            lo, hi = p.spread[key]
            assert lo <= point[key] <= hi, (p.label, key, lo, point[key], hi)
        assert p.spread["served_fraction"][0] < p.spread["served_fraction"][1] or (
            p.served_fraction in (0.0, 1.0))


def test_the_same_seed_gives_the_same_interval(report) -> None:  # type: ignore[no-untyped-def]
    again = simulate(ladder(H, A, C), month(), hysteresis=[1, 3], duration_s=30 * DAY,
                     compare=["ladder:h=3", "gke-computeclass", "karpenter", "litellm"])
    assert [p.spread for p in again.comparison] == [p.spread for p in report.comparison]
    tl = report.timeline
    names = report.oracle.replay.names
    quality = [r["quality"] for r in report.rungs]
    assert build_reference(tl, names, quality, seed=0).draws == build_reference(
        tl, names, quality, seed=0).draws
    assert build_reference(tl, names, quality, seed=1).draws != build_reference(
        tl, names, quality, seed=0).draws


def test_the_interval_is_the_percentile_of_resampled_blocks() -> None:
    # h100 only (and shed): served in the first 5 of 10 blocks (one tick each). Each
    # resample's served share is the share of its 10 draws that fall in the first 5.
    lad = Ladder.from_dict({"name": "t", "policy": {"promotion_hysteresis": 1}, "rungs": [
        {"name": H, "num_cpus": 1, "cost_per_hour": 36.0, "standby_replicas": 0},
        {"name": "shed", "kind": "shed"}]})
    p = simulate(lad, {H: bits(1, 1, 1, 1, 1, 0, 0, 0, 0, 0)}, tick_s=TICK).oracle
    rng = random.Random(0)
    shares = [sum(b < 5 for b in rng.choices(range(10), k=10)) / 10 for _ in range(1000)]
    assert p.served_fraction == 0.5
    assert p.spread["served_fraction"] == percentile_interval(shares)
    lo, hi = p.spread["served_fraction"]
    assert 0.2 <= lo < 0.5 < hi <= 0.8
    # Every served hour costs 36: no spread at all; the oracle has no regret to spread.
    assert p.spread["cost_per_served_hour"] == (36.0, 36.0)
    assert p.spread["regret"] == (0.0, 0.0)


def test_nothing_served_has_no_cost_interval() -> None:
    p = simulate(ladder(H), {H: "never"}, tick_s=TICK, duration_s=1000).oracle
    assert p.cost_per_served_hour is None and p.spread["cost_per_served_hour"] is None
    assert p.spread["served_fraction"] == (0.0, 0.0)


def test_blocks_are_days_or_tenths() -> None:
    assert block_edges(10, TICK) == (list(range(11)), TICK)
    assert block_edges(3, TICK) == ([0, 1, 2, 3], TICK)
    edges, block_s = block_edges(int(10.3 * 144), 600.0)  # 10.3 days: the .3 joins day 10
    assert (len(edges) - 1, edges[-1], block_s) == (10, 1483, DAY)
    edges, _ = block_edges(int(10.6 * 144), 600.0)  # 10.6 days: the .6 is an 11th block
    assert (len(edges) - 1, edges[-2:]) == (11, [1440, 1526])
    tl = Timeline(600.0, 1526, (), [0], [()])
    assert build_reference(tl, ["cpu"], [1.0], resamples=5).obtainable == [
        [144.0] * 10 + [86.0]]


def test_the_table_and_the_json_show_the_interval(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lad = tmp_path / "t.yaml"
    lad.write_text("name: t\npolicy: {promotion_hysteresis: 1}\nrungs:\n"
                   "  - {name: h100, num_cpus: 1, quality: 1.0, cost_per_hour: 36}\n"
                   "  - {name: cpu, num_cpus: 1, quality: 0.5, cost_per_hour: 3.6}\n")
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, [
        "simulate", str(lad), "--trace", "h100=markov:up=6h,down=3h,seed=1,gap=10m",
        "--duration", "12d", "--compare", "ladder:h=3,karpenter", "--json", str(out)],
        env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["spread_method"]["blocks"] == 12 and data["spread_method"]["seed"] == 0
    row = data["comparison"][0]
    lo, hi = row["spread"]["cost_per_served_hour"]
    assert lo <= row["cost_per_served_hour"] <= hi
    assert f"{row['cost_per_served_hour']:.2f} [{lo:.2f}–{hi:.2f}]" in result.output
    assert "days resampled" in result.output
