"""The validator's issue-26 rules: Ray's resource names, duplicate keys, one pass, did you
mean, files that are not UTF-8, and the JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from ray_ladder.core.config_errors import did_you_mean
from ray_ladder.core.documents import json_schema
from ray_ladder.core.exceptions import ConfigError
from ray_ladder.core.fleet import Fleet
from ray_ladder.core.spec import Ladder, load_ladder

ROOT = Path(__file__).resolve().parents[2]


def _issues(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        Ladder.from_yaml(text)
    return [str(i) for i in info.value.issues]


@pytest.mark.parametrize(("resources", "path", "fix"), [
    ("{CPU: 1}", "rungs[0] (a).resources.CPU", "use num_cpus: N instead"),
    ("{GPU: 1}", "rungs[0] (a).resources.GPU", "use num_gpus: N instead"),
    ("{memory: 1}", "rungs[0] (a).resources.memory", "remove it"),
    ("{object_store_memory: 1}", "rungs[0] (a).resources.object_store_memory", "remove it"),
    ('{"": 1}', "rungs[0] (a).resources", "name it"),
    ('{" ": 1}', "rungs[0] (a).resources", "name it"),
    ('{"has space": 1}', "rungs[0] (a).resources.has space", "use '-', '_' or '/'"),
    ("{ladder/h100: 0.00001}", "rungs[0] (a).resources.ladder/h100", "0.0001 or more"),
])
def test_resources_ray_would_refuse_are_refused_here(resources: str, path: str,
                                                     fix: str) -> None:
    [issue] = _issues(f"name: x\nrungs:\n  - {{name: a, resources: {resources}}}\n")
    assert issue.startswith(path + ":") and fix in issue, issue


def test_a_custom_resource_and_its_amount_still_pass() -> None:
    ladder = Ladder.from_yaml("name: x\nrungs:\n  - {name: a, resources: {ladder/h100: 0.5, "
                              "accelerator_type:H100: 0.001}}\n")
    assert ladder.rungs[0].resources == {"ladder/h100": 0.5, "accelerator_type:H100": 0.001}


def test_a_duplicate_yaml_key_names_the_key_and_both_lines() -> None:
    [issue] = _issues("name: x\nrungs:\n  - name: a\n    num_cpus: 1\n    num_cpus: 2\n")
    assert issue.startswith("line 5, column 5: duplicate key 'num_cpus' (also on line 4)")
    assert "keep one of them" in issue
    # Top level and flow mappings too.
    assert _issues("name: x\nname: y\nrungs: [{name: a, num_cpus: 1}]\n")[0].startswith(
        "line 2, column 1: duplicate key 'name' (also on line 1)")
    assert "duplicate key 'quality'" in _issues(
        "name: x\nrungs: [{name: a, num_cpus: 1, quality: 1, quality: 0.5}]\n")[0]


def test_a_duplicate_json_key_is_an_error_too() -> None:
    with pytest.raises(ConfigError) as info:
        Ladder.from_json('{"name": "x",\n "rungs": [],\n "name": "y"}')
    assert str(info.value.issues[0]).startswith(
        "line 3: duplicate key 'name' (also on line 1)")


def test_field_errors_and_rule_errors_come_in_one_pass() -> None:
    # Before: the bad quality of rungs[1] hid both the duplicate name and the order rule.
    issues = _issues("name: x\nrungs:\n"
                     "  - {name: a, num_cpus: 1, quality: 0.5}\n"
                     "  - {name: a, num_cpus: 1, quality: high}\n"
                     "  - {name: s, kind: shed}\n"
                     "  - {name: b, num_cpus: 1, quality: 0.9}\n"
                     "policy: {promotion_hysteresis: 0}\n")
    text = "\n".join(issues)
    assert "rungs[1] (a).quality" in text and "policy.promotion_hysteresis" in text
    assert "rungs[1].name: duplicate rung name a (also rungs[0])" in text
    assert "rungs[3].kind: rung b (compute) comes below a shed rung" in text
    assert "rungs[3].quality: quality must not increase going down" in text
    # A rule that needs the bad value does not run (no guess from a default): rungs[1]'s
    # quality is unknown, so rungs[2] is not compared with it.
    assert not [i for i in issues if i.startswith("rungs[2].quality")]
    assert len(issues) == len(set(issues)) == 5


def test_every_broken_rule_is_listed_not_only_the_first() -> None:
    issues = _issues("name: x\nrungs:\n  - {name: a, num_cpus: 1, quality: 0.2}\n"
                     "  - {name: b, num_cpus: 1, quality: 0.5}\n  - {name: a, kind: shed}\n")
    assert [i.split(":")[0] for i in issues] == ["rungs[1].quality", "rungs[2].name"] or \
        sorted(i.split(":")[0] for i in issues) == ["rungs[1].quality", "rungs[2].name"]


def test_did_you_mean_for_ladder_and_fleet_keys() -> None:
    [issue] = _issues("name: x\nrungs: [{name: a, num_cpus: 1, qualty: 0.5}]\n")
    assert "did you mean 'quality'?" in issue and "valid keys here:" in issue
    [issue] = _issues("name: x\nrungs: [{name: a, num_cpus: 1}]\npolicy: {hysteresis: 2}\n")
    assert "did you mean 'promotion_hysteresis'?" in issue
    [issue] = _issues("name: x\nrungs: [{name: a, num_cpus: 1, colour: red}]\n")
    assert "did you mean" not in issue and "remove it or fix its spelling" in issue
    with pytest.raises(ConfigError) as info:
        Fleet.from_yaml("fleet: f\nrungs: {h100: {resources: {ladder/h100: 1}}}\n"
                        "teams: [{name: a, quotas: {h100: 1}}]\n")
    assert "did you mean 'quota'?" in str(info.value)
    assert did_you_mean("Num_GPU", ["num_gpus", "num_cpus"]) == "num_gpus"


def test_a_bad_targets_block_in_a_ladder_file_names_the_field_and_the_fix(
        tmp_path: Path) -> None:
    path = tmp_path / "targets.yaml"
    path.write_text("name: x\nrungs: [{name: a, num_cpus: 1}]\n"
                    "policy: {targets: {ttft_s: -1, inter_token_s: fast, tfft_s: 0.5}}\n")
    with pytest.raises(ConfigError) as info:
        load_ladder(path)
    text = str(info.value)
    assert "policy.targets.ttft_s: Input should be greater than 0 (got -1)" in text
    assert "policy.targets.inter_token_s: Input should be a valid number (got 'fast')" in text
    # Before: "Fix: remove it" (the valid keys of each level were a hand-written table
    # that had no `targets`, nor a cluster's keys); now read from the models.
    assert "policy.targets.tfft_s" in text and "did you mean 'ttft_s'?" in text
    [issue] = _issues("name: x\nrungs: [{name: a, num_cpus: 1}]\npolicy: {targts: {}}\n")
    assert "did you mean 'targets'?" in issue
    issues = _issues("name: x\nrungs: [{name: a, num_cpus: 1}]\n"
                     "clusters: {onprem: {adress: x}}\n")
    assert any("clusters.onprem.adress" in i and "did you mean 'address'?" in i
               for i in issues), issues


def test_a_file_that_is_not_utf8_is_a_config_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: café\nrungs: [{name: a, num_cpus: 1}]\n".encode("latin-1"))
    with pytest.raises(ConfigError) as info:
        load_ladder(path)
    assert str(info.value).startswith(f"invalid ladder in {path}:")
    assert "line 1, byte 9: not UTF-8 text" in str(info.value)
    assert "save the file as UTF-8" in str(info.value)


def test_a_huge_bad_value_is_shortened_in_the_message() -> None:
    [issue] = _issues("name: x\nrungs: [{name: a, num_cpus: 1}]\nspec: {"
                      + ", ".join(f"k{i}: {i}" for i in range(100)) + "}\n")
    assert "...)" in issue and len(issue) < 400


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT).as_posix() for p in
                                        (ROOT / "examples" / "ladders").glob("*.yaml")))
def test_the_json_schema_accepts_every_example_ladder(path: str) -> None:
    schema = json_schema(Ladder)
    jsonschema.Draft202012Validator.check_schema(schema)
    data = yaml.safe_load((ROOT / path).read_text())
    # An editor sees YAML timestamps as the strings they are written as.
    jsonschema.validate(json.loads(json.dumps(data, default=str)), schema)


def test_the_json_schema_refuses_unknown_keys() -> None:
    schema = json_schema(Ladder)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x", "rungs": [{"name": "a", "qualty": 1}]}, schema)
    fleet = json_schema(Fleet)
    jsonschema.Draft202012Validator.check_schema(fleet)
    jsonschema.validate({"fleet": "f", "rungs": {"h100": {"resources": {"ladder/h100": 1}}},
                         "teams": [{"name": "a", "quota": {"h100": 1}}]}, fleet)
