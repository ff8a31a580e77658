"""One ladder over several trace sets: each headline figure per set (hand-made traces whose
rows are known exactly), its range, and the margins' verdicts; the CLI's --trace-set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_ladder import Ladder
from ray_ladder.cli import main
from ray_ladder.simulate import Trace, TraceSetReport, expand_sets, simulate, simulate_sets
from ray_ladder.simulate.trace_sets import across_sets

TICK = 100.0
LADDER = Ladder.from_dict({"name": "t", "policy": {"promotion_hysteresis": 1}, "rungs": [
    {"name": "top", "num_cpus": 1, "quality": 1.0, "cost_per_hour": 10.0,
     "standby_replicas": 0},
    {"name": "low", "num_cpus": 1, "quality": 0.5, "cost_per_hour": 2.0}]})
# The ladder with free, instant switching, and Ray native with instant starts: "low" has
# no trace, so it is a pool that is always up, where Ray native falls and stays.
LADDER_ROW = "ladder (hysteresis=1, fall=0, start=0, climb=0)"
COMPARE = ["ladder:h=1,fall=0,start=0,climb=0", "ray-native:start=0"]
NATIVE = "ray-native (start=0)"


def bits(*values: int) -> Trace:
    return Trace.from_steps([(i * TICK, bool(v)) for i, v in enumerate(values)],
                            duration_s=len(values) * TICK, resolution_s=TICK)


SETS = {
    # top lost at ticks 2-3: the ladder serves top 8 ticks and low 2; Ray native falls to
    # low at tick 2 and stays (top 2 ticks, low 8).
    "a": {"top": bits(1, 1, 0, 0, 1, 1, 1, 1, 1, 1)},
    # top lost at tick 1 only: the ladder top 9 / low 1; Ray native top 1 / low 9.
    "b": {"top": bits(1, 0, 1, 1, 1, 1, 1, 1, 1, 1)},
}
# Per set and row: q x avail, regret, below best, not served, flaps, $ per served h. The
# bill is (top ticks x 10 + low ticks x 2) x 100 s, over 1,000 s served.
EXPECTED = {
    (LADDER_ROW, "a"): (0.9, 0.0, 0.0, 0.0, 0, 8.4),
    (LADDER_ROW, "b"): (0.95, 0.0, 0.0, 0.0, 0, 9.2),
    (NATIVE, "a"): (0.6, 0.3, 0.6, 0.0, 0, 3.6),
    (NATIVE, "b"): (0.55, 0.4, 0.8, 0.0, 0, 2.8),
    ("oracle", "a"): (0.9, 0.0, 0.0, 0.0, 0, 8.4),
    ("oracle", "b"): (0.95, 0.0, 0.0, 0.0, 0, 9.2),
}
FIGURES = ["quality_weighted_availability", "regret", "below_best_fraction", "not_served",
           "flaps", "cost_per_served_hour"]


@pytest.fixture(scope="module")
def out() -> TraceSetReport:
    return simulate_sets(LADDER, SETS, tick_s=TICK, compare=COMPARE)


def test_each_figure_per_set_is_that_sets_own_report(out: TraceSetReport) -> None:
    assert out.names == ["a", "b"]
    for (row, name), want in EXPECTED.items():
        got = [out.figure(row, f).values[name] for f in FIGURES]
        assert got == pytest.approx(list(want), abs=1e-12), (row, name)
    alone = simulate(LADDER, SETS["b"], tick_s=TICK, compare=COMPARE)
    assert out.sets["b"].to_dict() == alone.to_dict()


def test_the_range_across_sets(out: TraceSetReport) -> None:
    q = out.figure(NATIVE, "quality_weighted_availability")
    assert (q.low, q.high) == pytest.approx((0.55, 0.6))
    assert q.spread == pytest.approx(0.05)
    cost = out.figure(LADDER_ROW, "cost_per_served_hour")
    assert (cost.low, cost.high) == pytest.approx((8.4, 9.2))


def test_margins_say_whether_they_hold_in_every_set(out: TraceSetReport) -> None:
    verdicts = {m.figure: m.verdict for m in out.margins}
    assert [(m.ladder, m.peer) for m in out.margins] == [(LADDER_ROW, NATIVE)] * 6
    assert verdicts == {"quality_weighted_availability": "ladder", "regret": "ladder",
                        "below_best_fraction": "ladder", "not_served": "tie",
                        "flaps": "tie", "cost_per_served_hour": "peer"}
    q = out.margin(LADDER_ROW, NATIVE, "quality_weighted_availability")
    assert q.lead == {"a": 0.3, "b": 0.4} and (q.low, q.high) == (0.3, 0.4)
    cost = out.margin(LADDER_ROW, NATIVE, "cost_per_served_hour")
    assert cost.lead == {"a": -4.8, "b": -6.4}  # lower is better: the ladder pays more


def test_a_margin_within_the_difference_between_sets_depends_on_the_set() -> None:
    # A third set where top is never there: both serve low all along, so the ladder's
    # lead in quality is 0.3, 0.4 and 0: it depends on the set.
    sets = {**SETS, "c": {"top": bits(*[0] * 10)}}
    out = simulate_sets(LADDER, sets, tick_s=TICK, compare=COMPARE)
    q = out.margin(LADDER_ROW, NATIVE, "quality_weighted_availability")
    assert q.lead == {"a": 0.3, "b": 0.4, "c": 0.0} and q.verdict == "depends"
    assert out.figure("oracle", "quality_weighted_availability").values["c"] == 0.5


def test_without_compare_the_sweep_rows_and_no_margins() -> None:
    out = simulate_sets(LADDER, SETS, tick_s=TICK, hysteresis=[1, 2])
    assert sorted({f.row for f in out.figures}) == ["ladder h=1", "ladder h=2", "oracle"]
    assert out.margins == []
    assert out.figure("ladder h=1", "quality_weighted_availability").values == \
        pytest.approx({"a": 0.9, "b": 0.95})


def test_sets_must_share_their_rows() -> None:
    a = simulate(LADDER, SETS["a"], tick_s=TICK, compare=COMPARE)
    b = simulate(LADDER, SETS["b"], tick_s=TICK, compare=COMPARE[:1])
    with pytest.raises(ValueError, match="same ladder and policies"):
        across_sets({"a": a, "b": b})
    with pytest.raises(ValueError, match="trace set 'b'"):
        simulate_sets(LADDER, {"a": SETS["a"], "b": {"shed": "always"}}, tick_s=TICK)
    with pytest.raises(ValueError, match="at least one"):
        simulate_sets(LADDER, {})


def test_expand_sets_fills_each_spec_and_zone() -> None:
    sets = expand_sets({"top": {"z1": "t/{set}-1.json", "z2": "t/{set}-2.json"},
                        "low": "always"}, {"jan": "2024-01"})
    assert sets == {"jan": {"top": {"z1": "t/2024-01-1.json", "z2": "t/2024-01-2.json"},
                            "low": "always"}}
    with pytest.raises(ValueError, match="no trace names"):
        expand_sets({"top": "always"}, ["a"])


def _write(path: Path, values: list[int]) -> None:
    path.write_text(json.dumps({"metadata": {"gap_seconds": TICK}, "data": values}))


def test_cli_trace_set_fills_the_template(tmp_path: Path) -> None:
    lad = tmp_path / "t.yaml"
    lad.write_text(json.dumps(LADDER.model_dump(mode="json", exclude_none=True)))
    _write(tmp_path / "a-top.json", [1, 1, 0, 0, 1, 1, 1, 1, 1, 1])
    _write(tmp_path / "b-top.json", [1, 0, 1, 1, 1, 1, 1, 1, 1, 1])
    args = ["simulate", str(lad), "--trace", f"top={tmp_path}/{{set}}-top.json",
            "--trace-set", "a", "--trace-set", "second=b", *sum(
                (["--compare", c] for c in COMPARE), [])]
    done = CliRunner().invoke(main, [*args, "--json", "-"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["trace_sets"] == ["a", "second"]
    q = next(f for f in report["across"] if f["row"] == NATIVE
             and f["figure"] == "quality_weighted_availability")
    assert q["values"] == pytest.approx({"a": 0.6, "second": 0.55})
    text = " ".join(CliRunner().invoke(main, args, env={"COLUMNS": "200"}).output.split())
    assert "q x avail per trace set" in text and "0.6000" in text and "0.5500–0.6000" in text
    assert "the ladder ahead in every set: q x avail (+0.3000 / +0.4000)" in text
    assert f"{NATIVE} ahead in every set: $ per served h (-4.80 / -6.40)" in text


@pytest.mark.parametrize(("extra", "message"), [
    ([], "give --trace-set NAME"),
    (["--trace-set", "a", "--trace-set", "a"], "given twice"),
    (["--trace-set", "a", "--plot", "x.png"], "--plot draws one trace set"),
])
def test_cli_trace_set_errors(tmp_path: Path, extra: list[str], message: str) -> None:
    lad = tmp_path / "t.yaml"
    lad.write_text(json.dumps(LADDER.model_dump(mode="json", exclude_none=True)))
    done = CliRunner().invoke(main, ["simulate", str(lad), "--trace",
                                     "top=markov:up=1h,down=1h,seed={set}", "--duration",
                                     "1d", *extra])
    assert done.exit_code == 2 and message in done.output
