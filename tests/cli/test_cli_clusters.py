"""`ray-ladder show` of a ladder whose rungs live on several clusters and read data
(issue 25): where each rung runs, what an hour of work costs there with the data moved,
the clusters and the data."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ray_ladder.cli import main
from ray_ladder.core.spec import load_ladder

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "ladders" / "clusters.yaml"


def _rows(out: str, key: int = 1) -> dict[str, list[str]]:
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in out.splitlines()
             if line.startswith("│")]
    return {row[key]: row for row in cells if len(row) > key and row[key]}


def test_show_names_each_rungs_cluster_its_work_cost_the_clusters_and_the_data() -> None:
    ladder = load_ladder(EXAMPLE)
    result = CliRunner().invoke(main, ["show", str(EXAMPLE)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    rows = _rows(result.stdout)
    header = next(line for line in result.stdout.splitlines() if "work cost/h" in line)
    cols = [c.strip() for c in header.strip("┃").split("┃")]
    work, where = cols.index("work cost/h"), cols.index("cluster")
    for rung in ladder.rungs:
        row = rows[rung.name]
        assert row[where] == (rung.cluster or "(this one)")
        assert float(row[work]) == round(ladder.work_cost_per_hour(rung.name), 6)
    # the cloud rung is dearer with the data moved than its cost_per_hour says
    cloud = next(r for r in ladder.rungs if r.cluster == "cloud")
    assert float(rows[cloud.name][work]) > cloud.cost_per_hour
    for name, spec in ladder.clusters.items():
        row = _rows(result.stdout, key=0)[name]
        assert row[1] == spec.address and row[2] == spec.serve
    assert ladder.data is not None
    assert f"data {ladder.data.name}: region={ladder.data.region}" in result.stdout


def test_show_of_a_ladder_on_one_cluster_has_no_cluster_or_work_cost_column() -> None:
    result = CliRunner().invoke(main, ["show", str(ROOT / "examples/ladders/mig.yaml")],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "cluster" not in result.stdout and "work cost" not in result.stdout
