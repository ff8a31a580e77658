"""`ray-ladder validate` and `ray-ladder show`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_ladder import load_ladder
from ray_ladder.cli import main

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted([*(ROOT / "examples" / "ladders").glob("*.yaml"),
                   *(ROOT / "ray_ladder" / "ladders").glob("*.yaml")])  # the shipped ones too
BAD = Path(__file__).parents[1] / "data" / "bad"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_validate_examples_exits_0(runner: CliRunner) -> None:
    result = runner.invoke(main, ["validate", *map(str, EXAMPLES)])
    assert result.exit_code == 0, result.output
    for path in EXAMPLES:
        ladder = load_ladder(path)
        assert f"{path}: ok ({ladder.name}, {len(ladder.rungs)} rungs)" in result.stdout
    assert result.stderr == ""


def test_validate_bad_file_exits_2_with_the_message(runner: CliRunner) -> None:
    bad = BAD / "quality_increases.yaml"
    result = runner.invoke(main, ["validate", str(bad)])
    assert result.exit_code == 2
    assert f"invalid ladder in {bad}:" in result.stderr
    assert "rungs[2].quality: quality must not increase going down" in result.stderr
    assert "Fix: lower cpu's quality" in result.stderr
    assert result.stdout == ""


def test_validate_checks_every_file_and_reports_each_error(runner: CliRunner) -> None:
    bad = [BAD / "rungs_empty.yaml", BAD / "tag_not_string.yaml"]
    good = EXAMPLES[0]
    result = runner.invoke(main, ["validate", str(bad[0]), str(good), str(bad[1])])
    assert result.exit_code == 2
    assert f"{good}: ok" in result.stdout
    for path in bad:
        assert f"invalid ladder in {path}:" in result.stderr


@pytest.mark.parametrize("name", sorted(p.name for p in BAD.glob("*.yaml")))
def test_validate_rejects_every_bad_file(runner: CliRunner, name: str) -> None:
    result = runner.invoke(main, ["validate", str(BAD / name)])
    assert result.exit_code == 2
    assert "Fix: " in result.stderr


def test_validate_missing_file_exits_2(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = runner.invoke(main, ["validate", str(missing)])
    assert result.exit_code == 2
    assert f"invalid ladder in {missing}" in result.stderr
    assert "cannot read file" in result.stderr


def test_validate_needs_a_file(runner: CliRunner) -> None:
    result = runner.invoke(main, ["validate"])
    assert result.exit_code == 2  # click usage error
    assert "Missing argument" in result.stderr


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("columns", ["80", "200"])
def test_show_prints_every_rung(runner: CliRunner, path: Path, columns: str) -> None:
    ladder = load_ladder(path)
    result = runner.invoke(main, ["show", str(path)], env={"COLUMNS": columns})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert f"ladder {ladder.name}" in out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    for i, rung in enumerate(ladder.rungs):
        # Whole names, even in an 80-column terminal, with index and kind on the same row.
        [row] = [r for r in rows if f" {rung.name} " in r]
        cells = [c.strip() for c in row.strip("│").split("│")]
        assert cells[:3] == [str(i), rung.name, rung.kind]
    assert f"promotion_hysteresis={ladder.policy.promotion_hysteresis}" in out


def test_show_marks_cache_and_shed_without_placement(runner: CliRunner) -> None:
    result = runner.invoke(main, ["show", str(ROOT / "examples/ladders/gpu-serving.yaml")],
                           env={"COLUMNS": "200"})
    rows = {line.split("│")[2].strip(): line for line in result.stdout.splitlines()
            if line.startswith("│")}
    assert "ladder/h100=1" in rows["h100"]
    assert "num_cpus=1" in rows["cpu"]
    assert rows["shed"].split("│")[4].strip() == "-"


def test_show_bad_file_exits_2(runner: CliRunner) -> None:
    result = runner.invoke(main, ["show", str(BAD / "two_shed_rungs.yaml")])
    assert result.exit_code == 2
    assert "at most one shed rung" in result.stderr


def test_help_lists_the_spec_commands(runner: CliRunner) -> None:
    result = runner.invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "validate" in result.stdout and "show" in result.stdout


SCRIPT = Path(sys.executable).parent / "ray-ladder"


@pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed")
def test_console_script_exit_codes() -> None:
    exe = str(SCRIPT)
    ok = subprocess.run([exe, "validate", str(EXAMPLES[0])], capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run([exe, "validate", str(BAD / "schema_version.yaml")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "schema_version: must be one of 1 (got 2)" in bad.stderr
