"""@ladder_task without a cluster: decoration, the options table, merging, the native check."""

from __future__ import annotations

import math

import pytest

from ray_ladder import Constraints, InvalidConstraintsError, Ladder, ladder_task
from ray_ladder.task import LadderTask
from ray_ladder.task.native import native_problem
from ray_ladder.task.options import (
    TaskOptions,
    attempt_options,
    effective_ladder,
    merge_rung,
    valid_keys,
)
from ray_ladder.task.runner import rung_for_labels

LADDER = Ladder.from_dict({
    "name": "opts",
    "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}, "tags": {"jurisdiction": "eu"}},
        {"name": "a100", "resources": {"ladder/a100": 1}, "num_cpus": 2,
         "tags": {"jurisdiction": "eu"}},
        {"name": "cpu", "num_cpus": 1, "quality": 0.5, "tags": {"jurisdiction": "us"}},
        {"name": "shed", "kind": "shed", "quality": 0},
    ],
})
LABELS = Ladder.from_dict({
    "name": "labels",
    "rungs": [
        {"name": "h100", "num_gpus": 1, "label_selector": {"acc": "h100"}},
        {"name": "a100", "num_gpus": 1, "label_selector": {"acc": "in(a100,a100-80g)"}},
    ],
})


@ladder_task(LADDER, max_attempts=5)
def embed(texts, *, rung):
    return texts


def test_decorator_makes_a_ladder_task_that_cannot_be_called_directly():
    assert isinstance(embed, LadderTask)
    assert embed.__name__ == "embed" and embed.ladder is LADDER
    with pytest.raises(TypeError, match=r"embed\.remote\(\.\.\.\)"):
        embed(["x"])


def test_decorator_accepts_a_ladder_file(tmp_path):
    path = tmp_path / "l.yaml"
    path.write_text(LADDER.to_yaml())
    task = ladder_task(str(path))(embed.__wrapped__)
    assert task.ladder == LADDER


def test_decorator_misuse_is_explained():
    with pytest.raises(TypeError, match="needs a ladder"):
        ladder_task(lambda x, *, rung: x)
    with pytest.raises(TypeError, match="keyword argument 'rung'"):
        ladder_task(LADDER)(lambda x: x)
    with pytest.raises(TypeError, match="decorates functions"):
        ladder_task(LADDER)(type("Model", (), {}))


def test_options_returns_a_new_task_and_keeps_the_family():
    eu = embed.options(constraints=Constraints(jurisdiction="eu"), num_cpus=2)
    assert eu is not embed and eu._family == embed._family
    assert eu.options_in_force.max_attempts == 5  # decoration options carry over
    assert eu.options_in_force.ray == {"num_cpus": 2}
    assert embed.options_in_force.ray == {}
    assert eu._key != embed._key
    assert embed.options(num_cpus=2)._key == embed.options(num_cpus=2)._key


def test_unknown_option_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid options") as info:
        embed.options(num_cpu=2)
    for key in ("constraints", "fallback_on", "max_attempts", "num_cpus", "runtime_env"):
        assert key in str(info.value)
    assert valid_keys() == sorted(valid_keys())


@pytest.mark.parametrize(("key", "hint"), [
    ("max_retries", "max_attempts"), ("retry_exceptions", "fallback_on"),
    ("num_returns", "one value"), ("scheduling_strategy", "placement"),
])
def test_ray_options_the_ladder_controls_are_refused_with_a_hint(key, hint):
    with pytest.raises(ValueError, match=hint):
        embed.options(**{key: 1})


@pytest.mark.parametrize(("options", "error"), [
    ({"max_attempts": 0}, ValueError), ({"max_attempts": True}, ValueError),
    ({"pending_timeout_s": 0}, ValueError), ({"fallback_on": "MemoryError"}, TypeError),
    ({"constraints": 3}, TypeError), ({"path": "fast"}, ValueError),
    ({"num_cpus": -1}, ValueError),  # Ray's own validator
])
def test_bad_values_are_refused(options, error):
    with pytest.raises(error):
        embed.options(**options)


def test_constraints_no_rung_knows_are_refused_at_decoration():
    with pytest.raises(InvalidConstraintsError, match="mars"):
        embed.options(constraints={"jurisdiction": "mars"})


def test_option_values_are_normalised():
    opts = TaskOptions.build({"fallback_on": MemoryError, "pending_timeout_s": math.inf,
                              "constraints": {"jurisdiction": "eu"}})
    assert opts.fallback_on == (MemoryError,)
    assert math.isinf(opts.pending_timeout(LADDER))
    assert opts.constraints == Constraints(jurisdiction="eu")
    assert TaskOptions().pending_timeout(LADDER) == LADDER.policy.pending_timeout_s
    # One attempt per eligible compute rung plus Ray's three retries.
    assert TaskOptions().attempts_allowed(LADDER) == 3 + 3
    assert opts.attempts_allowed(LADDER) == 2 + 3


def test_rung_placement_merges_over_user_options():
    h100, a100 = LADDER.rungs[0], LADDER.rungs[1]
    user = {"num_cpus": 4, "resources": {"scratch": 1, "ladder/h100": 9}, "memory": 100}
    merged = merge_rung(h100, user)
    assert merged.resources == {"scratch": 1, "ladder/h100": 1}  # the rung's keys win
    assert merged.num_cpus == 4  # the rung names no CPUs: the user's count
    assert merge_rung(a100, user).num_cpus == 2  # the rung's count wins
    assert merge_rung(h100, {}).num_cpus == 1  # Ray's default for a task
    opts = attempt_options(merged, user, "embed")
    assert opts["name"] == "embed[h100]" and opts["max_retries"] == 0
    assert opts["memory"] == 100 and opts["resources"] == {"scratch": 1, "ladder/h100": 1}
    assert effective_ladder(LADDER, user).rungs[3].kind == "shed"


def test_native_path_only_when_rungs_differ_in_labels_alone():
    assert native_problem(LABELS, TaskOptions()) is None
    assert "different resources" in native_problem(LADDER, TaskOptions())
    assert "fallback_on" in native_problem(LABELS, TaskOptions(fallback_on=(MemoryError,)))
    assert ladder_task(LABELS)(embed.__wrapped__).path == "orchestrated"  # the default
    assert ladder_task(LABELS, path="native")(embed.__wrapped__).path == "native"
    with pytest.raises(ValueError, match="not possible"):
        ladder_task(LADDER, path="native")(embed.__wrapped__)
    with pytest.raises(ValueError, match="not possible"):
        ladder_task(LABELS, path="native")(embed.__wrapped__).options(fallback_on=MemoryError)


def test_native_rung_is_the_best_rung_matching_the_node_labels():
    selectors = [(r.name, r.label_selector) for r in LABELS.rungs]
    assert rung_for_labels({"acc": "a100-80g"}, selectors) == "a100"
    assert rung_for_labels({"acc": "h100"}, selectors) == "h100"
    assert rung_for_labels({"acc": "l4"}, selectors) is None


def test_options_may_only_narrow_the_decorators_constraints() -> None:
    from ray_ladder.core.exceptions import ConstraintNotAllowedError

    bound = TaskOptions.build({"constraints": {"jurisdiction": "eu", "max_cost_per_hour": 5}})
    narrowed = TaskOptions.build({"constraints": {"max_cost_per_hour": 2}}, base=bound)
    assert narrowed.constraints == Constraints(jurisdiction="eu", max_cost_per_hour=2.0)
    assert TaskOptions.build({"constraints": None}, base=bound).constraints == bound.constraints
    with pytest.raises(ConstraintNotAllowedError, match="bound to 'eu'"):
        TaskOptions.build({"constraints": {"jurisdiction": "us"}}, base=bound)
    with pytest.raises(ConstraintNotAllowedError, match="at most 5"):
        TaskOptions.build({"constraints": {"max_cost_per_hour": 50}}, base=bound)


def test_a_team_is_bound_by_the_decorator_and_options_cannot_change_it():
    from ray_ladder.core.exceptions import ConstraintNotAllowedError

    bound = TaskOptions.build({"team": "research"})
    assert bound.team == "research"
    assert TaskOptions.build({"team": "research"}, base=bound).team == "research"
    with pytest.raises(ConstraintNotAllowedError, match="bound by the decorator"):
        TaskOptions.build({"team": "product"}, base=bound)
    with pytest.raises(ValueError, match="team must be"):
        TaskOptions.build({"team": "Not A Slug"})
    # a team changes the registration; no team keeps the fingerprint of before
    assert bound.fingerprint() != TaskOptions.build({}).fingerprint()
    assert "team" in valid_keys()
