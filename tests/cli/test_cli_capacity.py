"""`ray-ladder show` and `validate` on rungs that say how their capacity is bought (issue 19)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ray_ladder.cli import main

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "ladders" / "capacity.yaml"
BAD = ROOT / "tests" / "data" / "capacity" / "bad"


def _rows(out: str) -> dict[str, list[str]]:
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in out.splitlines()
             if line.startswith("│")]
    return {row[1]: row for row in cells if row[1]}


def test_show_has_a_capacity_column_for_every_rung() -> None:
    result = CliRunner().invoke(main, ["show", str(EXAMPLE)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    rows = _rows(result.stdout)
    capacity = {name: row[-1] for name, row in rows.items()}
    assert capacity == {
        "h100-reserved": "reservation aws=cr-0123456789abcdef0, gcp=h100-reserved, "
                         "azure=.../h100-reserved",
        "h100-block": "capacity-block aws=cr-0fedcba9876543210, gcp=h100-calendar "
                      "2026-03-02T11:30:00Z..2026-03-09T11:30:00Z (leaves 40m early)",
        "h100-flex": "flex-start (max wait 2h, max run 7d)",
        "h100-spot": "spot", "a100": "on-demand", "cpu": "on-demand", "shed": "-"}


def test_show_of_a_ladder_without_capacity_has_no_capacity_column() -> None:
    result = CliRunner().invoke(main, ["show", str(ROOT / "examples/ladders/mig.yaml")],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "capacity" not in result.stdout


def test_validate_names_the_capacity_field_and_the_fix() -> None:
    result = CliRunner().invoke(main, ["validate", str(BAD / "reservation_missing.yaml")])
    assert result.exit_code == 2
    assert "rungs[0] (h100).capacity.reservation: a reservation rung names the reservation " \
           "it launches into" in result.stderr
    assert "Fix: add reservation: NAME" in result.stderr


def test_autoscale_status_says_queued_since_and_the_block_window() -> None:
    from ray_ladder.cli.autoscale_cmd import status_table, status_text

    assert status_text({"status": "queued", "queued_since": 880.0}, 1000.0) == \
        "queued since 120 s ago"
    assert status_text({"status": "idle", "window": [2000.0, 3000.0]}, 1000.0) == \
        "idle (window opens in 1000 s)"
    assert status_text({"status": "up", "window": [0.0, 3000.0]}, 1000.0) == \
        "up (window closes in 2000 s)"
    assert status_text({"status": "stocked_out"}, 1000.0) == "stocked_out"
    rung = {"status": "queued", "queued_since": 990.0, "role": "none", "nodes": 0,
            "target_bundles": 1, "failures": 3, "last_stockout": 999.0,
            "last_stockout_reason": "InsufficientInstanceCapacity: none", "next_retry": None}
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(status_table("q", {"time": 1000.0, "rungs": {"h100-flex": rung}}, 1000.0))
    assert "queued since 10 s ago" in console.export_text()
