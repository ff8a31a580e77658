"""Trace loading, generation and command-line specs of the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_ladder.simulate import (
    Trace,
    always_on,
    load_trace,
    markov_trace,
    never_on,
    outage_trace,
    parse_duration,
    parse_trace_spec,
)
from ray_ladder.simulate.align import align
from ray_ladder.simulate.specs import parse_trace_arg, resolve_traces

DATA = Path(__file__).parent.parent / "data" / "traces"


def test_json_trace_keeps_every_gap_as_a_step() -> None:
    t = load_trace(DATA / "h100.json")
    assert t.resolution_s == 100 and t.duration_s == 1000
    assert [t.at(k * 100) for k in range(10)] == [bool(v) for v in [1, 1, 0, 0, 1, 0, 1, 1, 1, 1]]
    assert t.obtainable_fraction() == 0.7


def test_csv_trace_with_header_and_comments() -> None:
    t = load_trace(DATA / "a100.csv")
    assert t.resolution_s == 200 and t.duration_s == 1000
    assert t.starts == (0, 200, 400, 800) and t.values == (True, False, True, False)


def test_csv_with_absolute_times_starts_at_its_first_row() -> None:
    assert load_trace(DATA / "a100-epoch.csv").starts == load_trace(DATA / "a100.csv").starts


def test_json_counts_above_one_mean_obtainable(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"gap_seconds": 60, "data": [0, 3, 8]}))
    t = load_trace(p)
    assert [t.at(x) for x in (0, 60, 120)] == [False, True, True]
    assert t.counts == (0, 3, 8)  # kept for rungs that need several instances


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("a.json", "{", "not valid JSON"),
        ("a.json", '{"data": [1]}', "gap_seconds"),
        ("a.json", '{"metadata": {"gap_seconds": 60}, "data": []}', "non-empty"),
        ("a.json", '{"metadata": {"gap_seconds": 60}, "data": ["maybe"]}', r"data\[0\]"),
        ("a.csv", "t_s,available\n0,1\n", "at least 2 rows"),
        ("a.csv", "time,up\n0,1\n60,0\n", "header must name t_s and available"),
        ("a.csv", "0,1\n60,0\n30,1\n", "t_s must increase"),
        ("a.txt", "0,1", "unknown file type"),
    ],
)
def test_bad_trace_files_say_what_is_wrong(tmp_path: Path, name: str, text: str,
                                           match: str) -> None:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(ValueError, match=match) as err:
        load_trace(p)
    assert str(p) in str(err.value)


def test_missing_file_names_the_spec_forms() -> None:
    with pytest.raises(ValueError, match="no such file.*markov:"):
        parse_trace_spec("nope.json")


def test_always_and_never() -> None:
    assert always_on().at(1e9) and not never_on().at(1e9)
    assert parse_trace_spec("always") == always_on()
    assert parse_trace_spec("never") == never_on()


def test_outage_windows_merge_and_give_a_resolution() -> None:
    t = outage_trace([(900, 1000), (100, 400), (300, 500)])
    assert t.starts == (0, 100, 500, 900, 1000)
    assert t.values == (True, False, True, False, True)
    assert t.resolution_s == 100
    assert outage_trace([(0, 60)], duration_s=120).values == (False, True)
    with pytest.raises(ValueError, match="need 0 <= start < end"):
        outage_trace([(400, 100)])


def test_outage_spec_takes_units() -> None:
    t = parse_trace_spec("outage:1h-90m,2h-2.5h", duration_s=4 * 3600)
    assert t.starts == (0, 3600, 5400, 7200, 9000)
    assert t.obtainable_fraction() == pytest.approx(1 - 3600 / 14400)


def test_markov_is_deterministic_and_has_the_asked_means() -> None:
    a = markov_trace(3600, 600, 365 * 86400, seed=7)
    assert a == markov_trace(3600, 600, 365 * 86400, seed=7)
    assert a != markov_trace(3600, 600, 365 * 86400, seed=8)
    ends = list(a.starts[1:]) + [a.duration_s]
    ups = [e - s for s, e, v in zip(a.starts, ends, a.values, strict=True) if v][1:-1]
    downs = [e - s for s, e, v in zip(a.starts, ends, a.values, strict=True) if not v][1:-1]
    assert sum(ups) / len(ups) == pytest.approx(3600, rel=0.05)
    assert sum(downs) / len(downs) == pytest.approx(600, rel=0.05)
    assert a.obtainable_fraction() == pytest.approx(3600 / 4200, abs=0.01)
    assert all(s % 60 == 0 for s in a.starts)


def test_markov_spec_parsing() -> None:
    t = parse_trace_spec("markov:up=1h,down=10m,seed=1,gap=5m,start=down", duration_s=86400)
    assert t == markov_trace(3600, 600, 86400, seed=1, gap_s=300, start=False)
    assert not t.at(0)
    with pytest.raises(ValueError, match="needs a duration"):
        parse_trace_spec("markov:up=1h,down=10m")
    with pytest.raises(ValueError, match="missing down"):
        parse_trace_spec("markov:up=1h", duration_s=60)
    with pytest.raises(ValueError, match="valid keys: up, down, seed, gap, start"):
        parse_trace_spec("markov:up=1h,down=1m,mean=3", duration_s=60)


@pytest.mark.parametrize(("text", "seconds"),
                         [("600", 600), ("600s", 600), ("10m", 600), ("1.5h", 5400),
                          ("2d", 172800), ("1w", 604800), (42, 42)])
def test_parse_duration(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_parse_duration_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("ten minutes")


def test_parse_trace_arg() -> None:
    assert parse_trace_arg("h100=outage:1-2") == ("h100", "outage:1-2")
    with pytest.raises(ValueError, match="RUNG=SPEC"):
        parse_trace_arg("h100")


def test_generated_traces_take_the_horizon_of_the_file_traces() -> None:
    traces, horizon = resolve_traces(
        {"h100": "markov:up=300,down=100", "a100": str(DATA / "a100.csv")})
    assert horizon == 1000
    assert traces["h100"].duration_s == 1000
    assert list(traces) == ["h100", "a100"]


def test_tick_runs_sample_at_the_start_of_each_tick() -> None:
    t = Trace.from_steps([(0, True), (90, False), (110, True), (250, False)])
    # Ticks at 0, 100, 200, 300: the 90-110 dip is seen at 100; 250 is seen from 300.
    assert t.tick_runs(100, 4) == [(0, True), (1, False), (2, True), (3, False)]
    # Finer ticks repeat the value; coarser ones skip what falls between samples.
    assert t.tick_runs(200, 2) == [(0, True)]


def test_align_merges_traces_of_different_gaps() -> None:
    tl = align({"h100": load_trace(DATA / "h100.json"), "a100": load_trace(DATA / "a100.csv")},
               tick_s=100, ticks=10)
    per_tick = []
    for i, start in enumerate(tl.starts):
        stop = tl.starts[i + 1] if i + 1 < len(tl.starts) else tl.ticks
        per_tick += [tl.rows[i]] * (stop - start)
    h, a = True, True
    assert per_tick == [(h, a), (h, a), (not h, not a), (not h, not a), (h, a),
                        (not h, a), (h, a), (h, a), (h, not a), (h, not a)]
    assert tl.obtainable_ticks("h100") == 7 and tl.obtainable_ticks("a100") == 6


def test_real_trace_fractions_match_the_readme(traces_dir: Path) -> None:
    expected = {"us-west-2a_v100_8": 0.480, "us-west-2a_k80_8": 0.326,
                "us-west-2a_v100_1": 0.793, "us-west-2b_k80_1": 0.117}
    for stem, fraction in expected.items():
        t = load_trace(traces_dir / f"aws-10-26-2022_{stem}.json")
        assert t.resolution_s == 600 and t.duration_s == 3895 * 600
        assert t.obtainable_fraction() == pytest.approx(fraction, abs=0.0005)
