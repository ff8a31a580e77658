"""Hostile ladder files: random YAML documents and mutations of the examples. Every one is
either a valid ladder or a ConfigError naming a field; never a traceback."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ray_ladder import ConfigError, Ladder
from ray_ladder.cli import main as cli_main

ROOT = Path(__file__).parents[2]
EXAMPLES = sorted([*(ROOT / "examples" / "ladders").glob("*.yaml"),
                   *(ROOT / "ray_ladder" / "ladders").glob("*.yaml")])
BASES = [yaml.safe_load(p.read_text()) for p in EXAMPLES]

scalars = (st.none() | st.booleans() | st.integers(-10**9, 10**9)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
documents = st.recursive(scalars, lambda kids: st.lists(kids, max_size=4)
                         | st.dictionaries(st.text(max_size=12), kids, max_size=4),
                         max_leaves=20)
FIELDS = ["name", "kind", "resources", "num_gpus", "num_cpus", "quality", "cost_per_hour",
          "tags", "params", "label_selector", "standby_replicas", "cache", "capacity",
          "accelerator_type", "schema_version", "policy", "rungs", "promotion_hysteresis",
          "probe_interval_s", "max_degraded_seconds", "nonsense"]


def load(text: str) -> Ladder | None:
    """Load a document the way users do; a ConfigError is the one allowed failure."""
    try:
        return Ladder.from_yaml(text)
    except ConfigError as err:
        assert str(err) and err.issues, "a ConfigError names at least one issue"
        for issue in err.issues:
            assert issue.message
        return None


@settings(max_examples=200, deadline=None)
@given(documents)
def test_random_documents_are_ladders_or_config_errors(doc: Any) -> None:
    load(yaml.safe_dump(doc))


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        target: Any = doc
        if draw(st.booleans()) and isinstance(doc.get("rungs"), list) and doc["rungs"]:
            target = draw(st.sampled_from(doc["rungs"]))
        if not isinstance(target, dict):
            continue
        key = draw(st.sampled_from(FIELDS + list(target)))
        action = draw(st.sampled_from(["delete", "set", "wrap"]))
        if action == "delete":
            target.pop(key, None)
        elif action == "set":
            target[key] = draw(documents)
        else:
            target[key] = [target.get(key)]
    return doc


@settings(max_examples=300, deadline=None)
@given(mutated())
def test_mutations_of_the_examples_are_ladders_or_config_errors(doc: dict[str, Any]) -> None:
    load(yaml.safe_dump(doc))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=mutated() | documents)
def test_validate_answers_every_file_with_0_or_2_and_no_traceback(tmp_path: Path,
                                                                  doc: Any) -> None:
    path = tmp_path / "ladder.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(cli_main, ["validate", str(path)])
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_bytes_that_are_not_yaml_are_config_errors() -> None:
    for text in ["{", "rungs: [", "\x00\x01", ": :", "- - -", "a: !!python/object {}"]:
        load(text)
