"""`ray-ladder show` prints each rung's training shape (a column only ladders with one get)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ray_ladder.cli import main

LADDER = """
name: gang
rungs:
  - {name: h100x8, resources: {ladder/h100: 2}, train: {workers: 4}}
  - {name: a100x4, resources: {ladder/a100: 2}, params: {grad_accum_steps: 2},
     train: {workers: 2, resources_per_worker: {ladder/a100: 2, CPU: 1}}}
  - {name: cpu, num_cpus: 1}
  - {name: shed, kind: shed, quality: 0}
"""


def _rows(tmp_path: Path, text: str) -> dict[str, list[str]]:
    path = tmp_path / "ladder.yaml"
    path.write_text(text)
    result = CliRunner().invoke(main, ["show", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = next(line for line in lines if "rung" in line and "kind" in line)
    rows = {"header": [c.strip() for c in header.strip("┃│").split("┃")]}
    for line in lines:
        if line.startswith("│"):
            cells = [c.strip() for c in line.strip("│").split("│")]
            rows[cells[1]] = cells
    return rows


def test_show_prints_the_gang_of_every_rung(tmp_path: Path) -> None:
    rows = _rows(tmp_path, LADDER)
    column = rows["header"].index("train")
    assert rows["h100x8"][column] == "4 x (ladder/h100=2)"
    assert rows["a100x4"][column] == "2 x (ladder/a100=2, CPU=1)"
    assert rows["cpu"][column] == "-" and rows["shed"][column] == "-"


def test_ladders_without_a_training_shape_get_no_train_column(tmp_path: Path) -> None:
    rows = _rows(tmp_path, "name: plain\nrungs:\n  - {name: cpu, num_cpus: 1}\n")
    assert "train" not in rows["header"]
