"""`ray-ladder simulate --compare`: the delays are not dropped, the table fits 80 columns
and a pipe, and `--json -` is stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LADDER = str(ROOT / "examples" / "ladders" / "gpu-serving.yaml")
ARGS = [LADDER, "--trace", "h100=markov:up=6h,down=1h,seed=1", "--duration", "1d",
        "--tick", "5m", "--compare", "all"]


def run(*args: str, cwd: Path, columns: int = 80) -> subprocess.CompletedProcess:
    """The CLI as a user pipes it: stdout is a pipe, COLUMNS sets rich's width."""
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("FORCE_COLOR", None)
    return subprocess.run([sys.executable, "-m", "ray_ladder.cli", "simulate", *args],
                          capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


def test_compare_does_not_drop_the_delays_silently(tmp_path: Path) -> None:
    # Before: exit 0, and the 341 s promotion delay changed nothing in the comparison.
    proc = run(*ARGS, "--promotion-delay", "341", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert "--promotion-delay" in proc.stderr and "ladder:start=341" in proc.stderr
    # With a sweep as well, they apply to it (the report says so).
    proc = run(*ARGS, "--hysteresis", "2", "--promotion-delay", "341", "--json", "r.json",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert [p["promotion_delay_s"] for p in report["policies"]] == [341.0]


@pytest.mark.parametrize("columns", [200, 80, 60])
def test_the_comparison_keeps_every_column_in_a_pipe(tmp_path: Path, columns: int) -> None:
    # Before: piped (80 columns), "$/served h" was cut off.
    proc = run(*ARGS, "--json", "r.json", cwd=tmp_path, columns=columns)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns
    out = proc.stdout
    assert "served h" in out and "flaps" in out and "avail" in out
    report = json.loads((tmp_path / "r.json").read_text())
    for p in [*report["comparison"], report["oracle"]]:
        assert f"{p['cost_per_served_hour']:.2f}" in out
        assert f"{p['falls_per_day']:.2f}" in out
    # Wide, one table; narrower, the figures wrap onto more (the policy column again).
    tables = sum(line.split()[:1] == ["policy"] for line in lines)
    assert tables == 1 if columns >= 200 else tables >= 2


def test_json_dash_is_stdout_and_the_tables_go_to_stderr(tmp_path: Path) -> None:
    proc = run(*ARGS, "--json", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "-").exists()
    report = json.loads(proc.stdout)
    assert report["ladder"] == "gpu-serving" and report["comparison"]
    assert "policies side by side" in proc.stderr


def test_an_unwritable_json_path_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    proc = run(*ARGS, "--json", "file/r.json", cwd=tmp_path)
    assert proc.returncode == 2 and "cannot write the JSON report" in proc.stderr
    assert "Traceback" not in proc.stderr
