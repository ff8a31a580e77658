"""The training shape of a rung (``train:``): defaults, every rule and its message, round trip."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ray_ladder import ConfigError, Ladder
from ray_ladder.core.spec import TrainShape
from ray_ladder.core.train_shape import train_issue

GOOD = """
name: gang
rungs:
  - name: h100x8
    resources: {ladder/h100: 2}
    train: {workers: 4}
  - name: a100x8
    resources: {ladder/a100: 2}
    params: {grad_accum_steps: 1}
    train: {workers: 4, resources_per_worker: {ladder/a100: 2, CPU: 1}}
  - name: cpu
    num_cpus: 1
"""


def _bad(rung: str, second: str = "{name: cpu, num_cpus: 1}") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        Ladder.from_yaml(f"name: t\nrungs:\n  - {rung}\n  - {second}\n")
    return info.value


def test_a_rung_may_carry_a_training_shape_and_others_need_none() -> None:
    ladder = Ladder.from_yaml(GOOD)
    top, second, cpu = ladder.rungs
    assert top.train == TrainShape(workers=4)
    assert top.train.resources_per_worker is None  # the rung's own placement, per worker
    assert second.train is not None
    assert second.train.resources_per_worker == {"ladder/a100": 2.0, "CPU": 1.0}
    assert second.params == {"grad_accum_steps": 1}
    assert cpu.train is None


def test_the_shape_round_trips_through_yaml_and_is_frozen() -> None:
    ladder = Ladder.from_yaml(GOOD)
    assert Ladder.from_yaml(ladder.to_yaml()) == ladder
    assert "workers: 4" in ladder.to_yaml()
    with pytest.raises(ValidationError):
        ladder.rungs[0].train.workers = 8  # type: ignore[misc, union-attr]


@pytest.mark.parametrize(("rung", "path", "message", "fix"), [
    ("{name: x, num_cpus: 1, train: {workers: 0}}", "rungs[0] (x).train.workers",
     "greater than or equal to 1", "greater than or equal to 1"),
    ("{name: x, num_cpus: 1, train: {workers: 2.5}}", "rungs[0] (x).train.workers",
     "valid integer", "whole number"),
    ("{name: x, num_cpus: 1, train: {workers: '4'}}", "rungs[0] (x).train.workers",
     "valid integer", "whole number"),
    ("{name: x, num_cpus: 1, train: {}}", "rungs[0] (x).train.workers", "Field required",
     "add this field"),
    ("{name: x, num_cpus: 1, train: {workers: 2, worker: 2}}", "rungs[0] (x).train.worker",
     "Extra inputs", "remove it"),
    ("{name: x, num_cpus: 1, train: {workers: 2, resources_per_worker: {}}}",
     "rungs[0] (x).train.resources_per_worker", "at least 1 item", "at least one"),
    ("{name: x, num_cpus: 1, train: {workers: 2, resources_per_worker: {GPU: 0}}}",
     "rungs[0] (x).train.resources_per_worker.GPU", "greater than 0", "greater than 0"),
    ("{name: x, num_cpus: 1, train: {workers: 2, resources_per_worker: {GPU: '1'}}}",
     "rungs[0] (x).train.resources_per_worker.GPU", "valid number", ""),
    ("{name: x, num_cpus: 1, train: 4}", "rungs[0] (x).train", "", "mapping"),
])
def test_field_errors_name_the_path_the_value_and_the_fix(rung: str, path: str, message: str,
                                                          fix: str) -> None:
    issues = {i.path: i for i in _bad(rung).issues}
    assert path in issues, list(issues)
    assert message in issues[path].message
    assert fix in issues[path].fix


def test_a_worker_must_ask_for_some_resource() -> None:
    err = _bad("{name: x, label_selector: {zone: a}, train: {workers: 2}}")
    (issue,) = err.issues
    assert issue.path == "rungs[0] (x).train.resources_per_worker"
    assert "the training shape of x asks for no resources per worker" in issue.message
    assert "train.resources_per_worker" in issue.fix
    # ... which its own resources_per_worker can say instead of the rung.
    ok = Ladder.from_yaml("name: t\nrungs:\n  - {name: x, label_selector: {zone: a}, "
                          "train: {workers: 2, resources_per_worker: {CPU: 1}}}\n")
    assert ok.rungs[0].train == TrainShape(workers=2, resources_per_worker={"CPU": 1.0})


@pytest.mark.parametrize("kind", ["cache", "shed"])
def test_only_compute_rungs_take_a_training_shape(kind: str) -> None:
    err = _bad("{name: cpu, num_cpus: 1}", f"{{name: {kind}, kind: {kind}, quality: 0, "
               "train: {workers: 1}}")
    (issue,) = err.issues
    assert issue.path == f"rungs[1] ({kind}).train"
    assert f"not a {kind} rung" in issue.message
    assert "remove 'train'" in issue.fix


def test_train_issue_is_none_without_a_shape_and_for_a_good_one() -> None:
    ladder = Ladder.from_yaml(GOOD)
    assert [train_issue(r) for r in ladder.rungs] == [None, None, None]


def test_the_shape_model_validates_on_its_own() -> None:
    assert TrainShape(workers=1).resources_per_worker is None
    with pytest.raises(ValidationError):
        TrainShape(workers=1, resources_per_worker={"CPU": -1})
    with pytest.raises(ValidationError):
        TrainShape(workers=1, gpus=2)  # type: ignore[call-arg]
