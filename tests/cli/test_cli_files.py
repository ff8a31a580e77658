"""Ladder and fleet files through the CLI: files that are not UTF-8, unwritable outputs,
`validate DIR`, fleet files in validate/show, `show --json` and `schema`."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from ray_ladder.cli import main
from ray_ladder.core.fleet import Fleet

ROOT = Path(__file__).resolve().parents[2]
GOOD = ROOT / "examples" / "ladders" / "gpu-serving.yaml"
FLEET = """\
fleet: platform
rungs:
  h100: {resources: {ladder/h100: 1}, cost_per_hour: 10}
  cloud-h100: {resources: {ladder/cloud-h100: 1}, cloud: true, cost_per_hour: 30}
teams:
  - {name: research, quota: {h100: 2}, cohort: onprem, borrowing_limit: {h100: 1}}
  - {name: product, quota: {h100: 2}, cohort: onprem, weight: 2, lending_limit: {h100: 1},
     budget: {max_cost: 100, window_s: 3600, on_exhausted: queue}}
"""


@pytest.fixture
def latin1(tmp_path: Path) -> Path:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: gpu\ndescription: café\nrungs: [{name: a, num_cpus: 1}]\n"
                     .encode("latin-1"))
    return path


@pytest.mark.parametrize("args", [
    ["validate", "{f}"], ["show", "{f}"], ["render", "{f}", "--provider", "aws"],
    ["node-resources", "--ladder", "{f}"], ["simulate", "{f}", "--duration", "1h"],
], ids=["validate", "show", "render", "node-resources", "simulate"])
def test_a_file_that_is_not_utf8_is_exit_2_naming_it(latin1: Path, args: list[str]) -> None:
    # Before: a UnicodeDecodeError traceback (simulate: a message without the file).
    result = CliRunner().invoke(main, [a.format(f=latin1) for a in args])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert str(latin1) in result.stderr
    assert "not UTF-8 text" in result.stderr and "save the file as UTF-8" in result.stderr


def test_render_to_a_missing_directory_is_exit_2_with_the_fix(tmp_path: Path) -> None:
    out = tmp_path / "missing_dir" / "x.yaml"
    result = CliRunner().invoke(main, ["render", str(GOOD), "--provider", "kuberay",
                                       "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert f"cannot write {out}" in result.stderr and "mkdir -p" in result.stderr


def test_validate_a_directory_one_line_per_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD.read_text())
    (tmp_path / "b.yml").write_text("name: b\nrungs: []\n")
    (tmp_path / "c.json").write_text(json.dumps({"name": "c", "rungs": [
        {"name": "cpu", "num_cpus": 1}]}))
    (tmp_path / "fleet.yaml").write_text(FLEET)
    (tmp_path / "notes.txt").write_text("not a ladder")
    result = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'a.yaml'}: ok (gpu-serving, 6 rungs)",
        f"{tmp_path / 'b.yml'}: invalid (1 problem)",
        f"{tmp_path / 'c.json'}: ok (c, 1 rungs)",
        f"{tmp_path / 'fleet.yaml'}: ok (fleet platform, 2 teams, 2 shared rungs)",
    ]
    assert f"invalid ladder in {tmp_path / 'b.yml'}:" in result.stderr
    (tmp_path / "b.yml").unlink()
    assert CliRunner().invoke(main, ["validate", str(tmp_path)]).exit_code == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["validate", str(empty)])
    assert result.exit_code == 2 and "no *.yaml, *.yml, *.json file" in result.stderr


def test_validate_and_show_a_fleet_file(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0 and "ok (fleet platform, 2 teams" in result.stdout
    shown = CliRunner().invoke(main, ["show", str(path)], env={"COLUMNS": "160"})
    assert shown.exit_code == 0, shown.output
    for text in ("research", "product", "h100=2", "h100=1", "no limit", "all idle",
                 "onprem", "100 per 3600 s, then queue", "cloud-h100", "cloud"):
        assert text in shown.stdout, text
    bad = tmp_path / "bad.yaml"
    bad.write_text(FLEET.replace("quota: {h100: 2}, cohort: onprem, b", "quotas: {}, b"))
    result = CliRunner().invoke(main, ["validate", str(bad)])
    assert result.exit_code == 2
    assert f"invalid fleet file in {bad}:" in result.stderr
    assert "did you mean 'quota'?" in result.stderr
    dup = tmp_path / "dup.yaml"
    dup.write_text(FLEET + "fleet: again\n")
    result = CliRunner().invoke(main, ["validate", str(dup)])
    assert result.exit_code == 2 and "duplicate key 'fleet' (also on line 1)" in result.stderr


def test_show_json_is_the_validated_file_with_defaults(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["show", "--json", str(GOOD)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["name"] == "gpu-serving" and data["policy"]["probe_interval_s"] == 1.0
    assert all("standby_replicas" in r and "params" in r for r in data["rungs"])
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    fleet = json.loads(CliRunner().invoke(main, ["show", "--json", str(path)]).stdout)
    assert Fleet.from_dict(fleet).team("product").weight == 2


def test_schema_prints_the_json_schema_of_both_files(tmp_path: Path) -> None:
    ladder = json.loads(CliRunner().invoke(main, ["schema"]).stdout)
    jsonschema.Draft202012Validator.check_schema(ladder)
    jsonschema.validate(json.loads(json.dumps(yaml.safe_load(GOOD.read_text()))), ladder)
    fleet = json.loads(CliRunner().invoke(main, ["schema", "--fleet"]).stdout)
    assert fleet["title"] == "Fleet" and ladder["title"] == "Ladder"
    jsonschema.validate(yaml.safe_load(FLEET), fleet)
