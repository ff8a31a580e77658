"""Ladder spec: every validation rule, loading from YAML/JSON/dict, defaults, queries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from ray_ladder import (
    CacheSettings,
    ConfigError,
    Constraints,
    InvalidConstraintsError,
    Ladder,
    LadderError,
    Policy,
    Rung,
    load_ladder,
)
from ray_ladder.core.spec import as_ladder

BAD = Path(__file__).parents[1] / "data" / "bad"
EXAMPLES = Path(__file__).parents[2] / "examples" / "ladders"
SHIPPED = Path(__file__).parents[2] / "ray_ladder" / "ladders"  # the demo's, package data

# file -> (field path, text naming the bad value or None when the field is missing,
#          text the fix must contain). One file per validation rule.
BAD_FILES: dict[str, tuple[str, str | None, str]] = {
    "schema_version.yaml": ("schema_version", "got 2", "allowed values"),
    "unknown_ladder_key.yaml": ("polcy", "got {'promotion_hysteresis': 2}", "policy"),
    "unknown_rung_key.yaml": ("rungs[0] (h100).qualty", "got 0.9", "quality"),
    "unknown_policy_key.yaml": ("policy.hysteresis", "got 3", "promotion_hysteresis"),
    "unknown_cache_key.yaml": ("rungs[1] (cache).cache.ttl", "got 60", "ttl_s"),
    "ladder_name_missing.yaml": ("name", None, "add this field"),
    "ladder_name_slug.yaml": ("name", "got 'GPU Serving'", "lowercase letters"),
    "rungs_missing.yaml": ("rungs", None, "add this field"),
    "rungs_empty.yaml": ("rungs", "got []", "at least one"),
    "rungs_not_list.yaml": ("rungs", "got {'h100'", "list"),
    "rung_name_slug.yaml": ("rungs[0] (ladder/H100).name", "got 'ladder/H100'", "lowercase"),
    "rung_name_too_long.yaml": (
        "rungs[0] (a234567890123456789012345678901234567890123456789012345678901234).name",
        "got 'a2345678901234567890123456789012345678901234567890123456789012",
        "1-63",
    ),
    "rung_name_duplicate.yaml": ("rungs[1].name", "duplicate rung name a100", "unique name"),
    "rung_kind_unknown.yaml": ("rungs[0] (h100).kind", "got 'gpu'", "allowed values"),
    "two_cache_rungs.yaml": ("rungs[2].kind", "cache2 is another", "remove the extra cache"),
    "two_shed_rungs.yaml": ("rungs[2].kind", "shed2 is another", "remove the extra shed"),
    "cache_above_compute.yaml": ("rungs[2].kind", "cpu (compute) comes below a cache", "order"),
    "shed_above_cache.yaml": ("rungs[2].kind", "cache (cache) comes below a shed", "bottom"),
    "no_compute_rung.yaml": ("rungs", "['cache', 'shed']", "num_cpus"),
    "compute_without_placement.yaml": ("rungs[0] (h100)", "rung h100 has no placement",
                                       "resources"),
    "shed_with_placement.yaml": ("rungs[1] (shed).kind", "a shed rung", "remove resources"),
    "cache_settings_on_compute.yaml": ("rungs[0] (cpu).cache", "not a compute rung",
                                       "kind: cache"),
    "standby_on_shed.yaml": ("rungs[1] (shed).standby_replicas", "not a shed rung",
                             "remove standby_replicas"),
    "resource_amount_zero.yaml": ("rungs[0] (h100).resources.ladder/h100", "got 0",
                                  "positive amount"),
    "resource_amount_not_number.yaml": ("rungs[0] (h100).resources.ladder/h100", "got 'one'",
                                        "number"),
    "num_gpus_negative.yaml": ("rungs[0] (h100).num_gpus", "got -1", "greater than or equal"),
    "num_cpus_negative.yaml": ("rungs[0] (cpu).num_cpus", "got -2", "greater than or equal"),
    "accelerator_type_not_string.yaml": ("rungs[0] (h100).accelerator_type", "got 100",
                                         "string"),
    "label_selector_not_string.yaml": ("rungs[0] (h100).label_selector.ladder.gpu", "got True",
                                       "quote it"),
    "quality_above_one.yaml": ("rungs[0] (h100).quality", "got 1.5", "less than or equal to 1"),
    "quality_negative.yaml": ("rungs[0] (cpu).quality", "got -0.1", "greater than or equal"),
    "quality_increases.yaml": ("rungs[2].quality", "rungs[2].quality (0.8) > rungs[1].quality",
                               "lower cpu's quality"),
    "cost_negative.yaml": ("rungs[0] (cpu).cost_per_hour", "got -0.5", "greater than or equal"),
    "tag_not_string.yaml": ("rungs[0] (h100).tags.spot", "got False", "quote it"),
    "params_not_mapping.yaml": ("rungs[0] (cpu).params", "got 'llama-3-8b'", "mapping"),
    "policy_hysteresis_zero.yaml": ("policy.promotion_hysteresis", "got 0",
                                    "greater than or equal to 1"),
    "policy_hysteresis_not_int.yaml": ("policy.promotion_hysteresis", "got 2.5", "whole number"),
    "policy_max_degraded_zero.yaml": ("policy.max_degraded_seconds", "got 0", "greater than 0"),
    "policy_probe_interval_zero.yaml": ("policy.probe_interval_s", "got 0", "greater than 0"),
    "policy_pending_timeout_negative.yaml": ("policy.pending_timeout_s", "got -1",
                                             "greater than 0"),
    "policy_retry_after_zero.yaml": ("policy.retry_after_s", "got 0", "greater than 0"),
    "cache_max_entries_zero.yaml": ("rungs[1] (cache).cache.max_entries", "got 0",
                                    "greater than or equal to 1"),
    "cache_ttl_zero.yaml": ("rungs[1] (cache).cache.ttl_s", "got 0", "greater than 0"),
    "not_a_mapping.yaml": ("", "got 'list'", "name:"),
    "invalid_yaml.yaml": ("line 5, column 1", "expected ',' or '}'", "YAML syntax"),
}


def test_every_bad_file_has_a_rule_test() -> None:
    on_disk = {p.name for p in BAD.glob("*.yaml")}
    assert on_disk == set(BAD_FILES)


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_file_error_names_file_path_value_and_fix(name: str) -> None:
    path, value_text, fix_text = BAD_FILES[name]
    file = BAD / name
    with pytest.raises(ConfigError) as info:
        load_ladder(file)
    err = info.value
    msg = str(err)
    assert err.source == str(file)
    assert msg.startswith(f"invalid ladder in {file}:")
    # Each bad file breaks exactly one rule, so exactly one issue names it.
    assert len(err.issues) == 1, msg
    issue = err.issues[0]
    assert issue.path == path
    assert f"  - {path or '<root>'}: " in msg
    if value_text is not None:
        assert value_text in msg
    assert fix_text in issue.fix
    assert f"Fix: {issue.fix}" in msg


def test_config_error_is_a_value_error_and_a_ladder_error() -> None:
    with pytest.raises(ValueError):
        load_ladder(BAD / "rungs_empty.yaml")
    with pytest.raises(LadderError):
        load_ladder(BAD / "rungs_empty.yaml")


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        Ladder.from_dict(
            {
                "name": "x",
                "policy": {"promotion_hysteresis": 0},
                "rungs": [{"name": "cpu", "num_cpus": -1, "quality": 2}],
            }
        )
    paths = {i.path for i in info.value.issues}
    assert paths == {
        "policy.promotion_hysteresis",
        "rungs[0] (cpu).num_cpus",
        "rungs[0] (cpu).quality",
    }
    assert info.value.source == "<dict>"


# --- strictness ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("quality", "0.9"), ("num_cpus", "1"), ("cost_per_hour", "1.5"), ("quality", True)],
)
def test_strict_types_are_not_coerced(field: str, value: object) -> None:
    rung = {"name": "cpu", "num_cpus": 1, field: value}
    with pytest.raises(ConfigError) as info:
        Ladder.from_dict({"name": "x", "rungs": [rung]})
    assert info.value.issues[0].path == f"rungs[0] (cpu).{field}"


def test_whole_numbers_are_accepted_for_float_fields() -> None:
    ladder = Ladder.from_yaml("name: x\nrungs: [{name: cpu, num_cpus: 1, quality: 1, "
                              "cost_per_hour: 2}]")
    assert ladder.rungs[0].quality == 1.0
    assert ladder.rungs[0].cost_per_hour == 2.0


def test_models_are_frozen() -> None:
    ladder = Ladder.from_dict({"name": "x", "rungs": [{"name": "cpu", "num_cpus": 1}]})
    with pytest.raises(ValidationError):
        ladder.rungs[0].quality = 0.1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        ladder.policy.promotion_hysteresis = 5  # type: ignore[misc]


# --- names -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "h100", "a100-mig-3g.40gb", "eu_cloud-h100", "x" * 63])
def test_slug_names_accepted(name: str) -> None:
    ladder = Ladder.from_dict({"name": name, "rungs": [{"name": name, "num_cpus": 1}]})
    assert ladder.names == [name]


@pytest.mark.parametrize("name", ["", "-a", "a-", ".a", "A100", "a b", "a/b", "x" * 64, "é"])
def test_non_slug_rung_names_rejected(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        Ladder.from_dict({"name": "x", "rungs": [{"name": name, "num_cpus": 1}]})
    assert info.value.issues[0].path.endswith(".name")
    assert info.value.issues[0].value == name


# --- valid shapes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "tail",
    [[], ["cache"], ["shed"], ["cache", "shed"]],
)
def test_cache_and_shed_allowed_at_the_bottom(tail: list[str]) -> None:
    rungs = [{"name": "h100", "resources": {"ladder/h100": 1}}, {"name": "cpu", "num_cpus": 1}]
    rungs += [{"name": k, "kind": k, "quality": 0} for k in tail]
    ladder = Ladder.from_dict({"name": "x", "rungs": rungs})
    assert [r.kind for r in ladder.rungs] == ["compute", "compute", *tail]


def test_a_shed_rung_without_a_quality_is_quality_0_below_lower_rungs() -> None:
    # The natural way to write it: no quality. A default of 1 would break the
    # "quality must not increase going down" rule under any rung below quality 1.
    ladder = Ladder.from_yaml("""
name: x
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: cpu, num_cpus: 1, quality: 0.3}
  - {name: shed, kind: shed}
""")
    assert [r.quality for r in ladder.rungs] == [1.0, 0.3, 0.0]
    assert Ladder.from_json(ladder.model_dump_json()).rungs[-1].quality == 0.0
    # A quality given is kept (0.3 here: still not above the rung before it).
    rungs = [*ladder.model_dump(exclude_defaults=True)["rungs"][:2],
             {"name": "shed", "kind": "shed", "quality": 0.3}]
    assert Ladder.from_dict({"name": "x", "rungs": rungs}).rungs[-1].quality == 0.3


def test_equal_quality_going_down_is_allowed() -> None:
    ladder = Ladder.from_dict({"name": "x", "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}, "quality": 0.9},
        {"name": "a100", "resources": {"ladder/a100": 1}, "quality": 0.9},
    ]})
    assert [r.quality for r in ladder.rungs] == [0.9, 0.9]


@pytest.mark.parametrize(
    "placement",
    [
        {"resources": {"ladder/h100": 1}},
        {"num_gpus": 1},
        {"num_gpus": 0},
        {"num_cpus": 2},
        {"accelerator_type": "H100"},
        {"label_selector": {"ladder.rung": "h100"}},
    ],
)
def test_any_one_placement_field_makes_a_compute_rung(placement: dict[str, object]) -> None:
    rung = Rung(name="r", **placement)  # type: ignore[arg-type]
    assert rung.is_compute
    assert rung.placement() == placement


def test_placement_holds_only_the_fields_set() -> None:
    rung = Rung(name="a100", resources={"ladder/a100": 1}, num_gpus=1, num_cpus=4,
                accelerator_type="A100", label_selector={"ladder.site": "onprem"})
    assert rung.placement() == {
        "resources": {"ladder/a100": 1.0},
        "num_gpus": 1.0,
        "num_cpus": 4.0,
        "accelerator_type": "A100",
        "label_selector": {"ladder.site": "onprem"},
    }
    assert Rung(name="shed", kind="shed").placement() == {}


def test_defaults() -> None:
    ladder = Ladder.from_yaml("name: x\nrungs: [{name: cpu, num_cpus: 1}]")
    assert ladder.schema_version == 1
    assert ladder.description == ""
    assert ladder.policy == Policy(promotion_hysteresis=1, max_degraded_seconds=None,
                                   probe_interval_s=1.0, pending_timeout_s=10.0,
                                   retry_after_s=5.0)
    rung = ladder.rungs[0]
    assert (rung.kind, rung.quality, rung.cost_per_hour) == ("compute", 1.0, 0.0)
    assert rung.tags == {} and rung.params == {} and rung.resources == {}
    assert rung.standby_replicas is None and rung.cache is None
    assert CacheSettings() == CacheSettings(max_entries=1024, ttl_s=300.0)


def test_tags_and_params_are_free_maps() -> None:
    ladder = Ladder.from_yaml(
        """
name: x
rungs:
  - name: h100
    resources: {ladder/h100: 1}
    tags: {site: onprem, jurisdiction: eu, spot: "true", team: search}
    params: {model: llama-3-70b, dtype: bf16, max_batch: 32, extra: {nested: [1, 2]}}
"""
    )
    rung = ladder.rungs[0]
    assert rung.tags == {"site": "onprem", "jurisdiction": "eu", "spot": "true",
                         "team": "search"}
    assert rung.params["extra"] == {"nested": [1, 2]}
    assert rung.params["max_batch"] == 32


# --- loading ---------------------------------------------------------------------------

DOC = {
    "schema_version": 1,
    "name": "gpu",
    "policy": {"promotion_hysteresis": 3, "max_degraded_seconds": 60},
    "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}, "cost_per_hour": 12.3},
        {"name": "cpu", "num_cpus": 1, "quality": 0.5},
        {"name": "shed", "kind": "shed", "quality": 0},
    ],
}


def test_yaml_json_and_dict_give_the_same_ladder(tmp_path: Path) -> None:
    from_dict = Ladder.from_dict(DOC)
    assert Ladder.from_json(json.dumps(DOC)) == from_dict
    assert Ladder.from_yaml(json.dumps(DOC)) == from_dict  # JSON is YAML
    (tmp_path / "gpu.json").write_text(json.dumps(DOC))
    (tmp_path / "gpu.yaml").write_text(from_dict.to_yaml())
    assert load_ladder(tmp_path / "gpu.json") == from_dict
    assert load_ladder(str(tmp_path / "gpu.yaml")) == from_dict
    assert from_dict.policy.promotion_hysteresis == 3
    assert from_dict.names == ["h100", "cpu", "shed"]


@pytest.mark.parametrize("path", sorted([*EXAMPLES.glob("*.yaml"), *SHIPPED.glob("*.yaml")]),
                         ids=lambda p: p.name)
def test_to_yaml_round_trips(path: Path) -> None:
    ladder = load_ladder(path)
    assert Ladder.from_yaml(ladder.to_yaml()) == ladder


def test_bad_json_file_names_file_and_position(tmp_path: Path) -> None:
    file = tmp_path / "bad.json"
    file.write_text('{"name": "x", "rungs": [}')
    with pytest.raises(ConfigError) as info:
        load_ladder(file)
    assert str(file) in str(info.value)
    assert info.value.issues[0].path == "line 1, column 25"
    assert "JSON" in info.value.issues[0].fix


def test_json_file_field_error_names_the_field(tmp_path: Path) -> None:
    file = tmp_path / "bad.json"
    file.write_text(json.dumps({"name": "x", "rungs": [{"name": "cpu", "num_cpus": -1}]}))
    with pytest.raises(ConfigError) as info:
        load_ladder(file)
    assert info.value.source == str(file)
    assert info.value.issues[0].path == "rungs[0] (cpu).num_cpus"


def test_missing_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    file = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_ladder(file)
    assert str(file) in str(info.value)
    assert "cannot read file" in str(info.value)


def test_empty_yaml_is_not_a_ladder() -> None:
    with pytest.raises(ConfigError) as info:
        Ladder.from_yaml("", source="empty.yaml")
    assert "empty.yaml" in str(info.value)
    assert "must be a mapping" in str(info.value)


def test_from_yaml_names_the_source_given() -> None:
    with pytest.raises(ConfigError, match="invalid ladder in <string>"):
        Ladder.from_yaml("name: x\nrungs: []")
    with pytest.raises(ConfigError, match="invalid ladder in inline.yaml"):
        Ladder.from_yaml("name: x\nrungs: []", source="inline.yaml")


def test_as_ladder_accepts_a_ladder_or_a_path() -> None:
    ladder = Ladder.from_dict(DOC)
    assert as_ladder(ladder) is ladder
    path = EXAMPLES / "mig.yaml"
    assert as_ladder(path) == as_ladder(str(path)) == load_ladder(path)
    with pytest.raises(TypeError, match="Ladder or a path"):
        as_ladder(42)  # type: ignore[arg-type]


# --- queries ---------------------------------------------------------------------------


def test_rung_and_index_lookup() -> None:
    ladder = Ladder.from_dict(DOC)
    assert ladder.rung("cpu").quality == 0.5
    assert ladder.index("h100") == 0 and ladder.index("shed") == 2
    with pytest.raises(KeyError, match=r"rungs: \['h100', 'cpu', 'shed'\]"):
        ladder.rung("a100")


def test_eligible_without_constraints_is_every_rung() -> None:
    ladder = Ladder.from_dict(DOC)
    assert ladder.eligible() == ladder.rungs
    assert ladder.eligible(Constraints()) == ladder.rungs


def test_check_constraints_rejects_values_no_rung_knows() -> None:
    ladder = load_ladder(EXAMPLES / "hybrid-sovereign.yaml")
    ladder.check_constraints(Constraints(jurisdiction="eu", sites=("onprem",)))
    with pytest.raises(InvalidConstraintsError, match=r"unknown jurisdiction 'us'.*\['eu'\]"):
        ladder.check_constraints(Constraints(jurisdiction="us"))
    with pytest.raises(InvalidConstraintsError, match=r"unknown site\(s\) \['mars'\]"):
        ladder.check_constraints(Constraints(sites=("onprem", "mars")))
    with pytest.raises(ValueError):  # an HTTP 400, not a capacity problem
        ladder.check_constraints(Constraints(jurisdiction="us"))
