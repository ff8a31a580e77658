"""Every Ray internal the ladder uses exists in the installed Ray, of the pinned series."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest
import ray
import tomllib

from ray_ladder.cluster import ray_private, ray_private_train
from ray_ladder.cluster.errors import RUNG_GONE, gone_class, is_rung_gone

ROOT = Path(__file__).resolve().parents[2]


def _ray_requirement() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [req] = [d for d in deps if re.match(r"ray\b(?!-)", d)]  # "ray>=2.60,<2.61"
    return req


def test_the_installed_ray_is_the_series_the_door_was_read_from() -> None:
    req = _ray_requirement()
    low = re.search(r">=([\d.]+)", req).group(1)
    high = re.search(r"<([\d.]+)", req).group(1)
    assert low == ray_private.RAY_SERIES, (req, ray_private.RAY_SERIES)
    version = tuple(int(x) for x in ray.__version__.split(".")[:2])
    assert tuple(int(x) for x in low.split(".")) <= version < tuple(
        int(x) for x in high.split(".")), (ray.__version__, req)


@pytest.mark.parametrize(("module", "attribute"),
                         ray_private.PRIVATE_USES + ray_private_train.PRIVATE_USES)
def test_every_private_use_resolves(module: str, attribute: str) -> None:
    value = importlib.import_module(module)
    for part in attribute.split("."):
        value = getattr(value, part)  # AttributeError: Ray moved it; change the door
    assert value is not None


@pytest.mark.parametrize(("door", "start"), [(ray_private, "# --- GCS"),
                                             (ray_private_train, "# --- the ladder")])
def test_the_door_lists_what_its_functions_reach(door: object, start: str) -> None:
    source = Path(door.__file__).read_text()
    body = source[source.index(start):]
    for module, attribute in door.PRIVATE_USES:
        assert attribute.split(".")[-1] in body, f"{module}.{attribute} is listed but unused"


def test_ray_trains_wait_for_a_drain_ends_at_a_moved_deadline() -> None:
    """What train_end_preemption_wait relies on: a PreemptingState keeps its PreemptionInfo
    in the instance attribute ``preemption_info``, whose ``deadline_ms`` the controller's
    deadline check reads (plus the grace); a later poll's info merges with the earliest
    deadline; the PreemptionError it then raises counts against max_preemption_failures."""
    import dataclasses
    import time

    from ray.train.v2._internal.execution.controller.controller import TrainController
    from ray.train.v2._internal.execution.controller.state import PreemptingState
    from ray.train.v2._internal.execution.failure_handling import (
        DefaultFailurePolicy,
        FailureDecision,
    )
    from ray.train.v2._internal.execution.preemption import merge_preemption_info
    from ray.train.v2.api.config import FailureConfig
    from ray.train.v2.api.exceptions import PreemptionError
    from ray.train.v2.api.preemption import PreemptionInfo

    assert "deadline_ms" in {f.name for f in dataclasses.fields(PreemptionInfo)}
    far = int((time.time() + 60) * 1000)
    info = PreemptionInfo(deadline_ms=far, preempted_node_to_ranks={"n1": [0, 1]})
    state = PreemptingState(preemption_info=info, detected_at_s=time.time())
    exceeded = TrainController._is_preemption_deadline_exceeded
    assert not exceeded(state.preemption_info, state.detected_at_s, 5.0)
    assert ray_private_train.train_preemption_info(state) is info
    assert ray_private_train.train_end_preemption_wait(state, 5.0)
    assert exceeded(state.preemption_info, state.detected_at_s, 5.0)
    assert state.preemption_info.preempted_node_to_ranks == {"n1": [0, 1]}
    assert exceeded(merge_preemption_info(state.preemption_info, info), 0.0, 5.0)
    # The controller reads the deadline from the state it is in (not a copy made earlier).
    source = inspect.getsource(TrainController._handle_preempting_state)
    assert "controller_state.preemption_info" in source
    assert "_is_preemption_deadline_exceeded" in source
    policy = DefaultFailurePolicy(FailureConfig(max_failures=0, max_preemption_failures=1))
    error = PreemptionError(preemption_info=state.preemption_info, drain_timed_out=True)
    assert policy.make_decision(training_failed_error=error) == FailureDecision.RETRY
    assert policy.make_decision(training_failed_error=error) == FailureDecision.RAISE
    assert not ray_private_train.train_end_preemption_wait(object(), 0.0)


def test_a_train_worker_keeps_its_preemption_info_in_its_context() -> None:
    """What train_local_preemption_info reads (no collective): the worker's TrainContext
    has a ``preemption_context`` whose ``preemption_info`` mark_preempt sets."""
    import dataclasses

    from ray.train.v2._internal.execution.context import TrainContext
    from ray.train.v2._internal.execution.preemption import PreemptionContext
    from ray.train.v2._internal.execution.worker_group.worker import RayTrainWorker

    assert "preemption_context" in {f.name for f in dataclasses.fields(TrainContext)}
    assert PreemptionContext().preemption_info is None
    assert "preemption_context.preemption_info = info" in inspect.getsource(
        RayTrainWorker.mark_preempt)
    assert ray_private_train.train_local_preemption_info() is None  # not in a worker


@pytest.mark.parametrize(("module", "name"),
                         [(m, n) for m, names in RUNG_GONE.items() for n in names])
def test_every_rung_gone_error_exists_where_the_list_says(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert cls.__module__ == module  # the check compares __module__: it must be the home


def test_rung_gone_errors_and_their_subclasses_count_user_errors_do_not() -> None:
    from ray.exceptions import ActorDiedError, NodeDiedError, RayTaskError
    from ray.serve.exceptions import BackPressureError

    assert gone_class(ActorDiedError()).__name__ == "RayActorError"
    assert is_rung_gone(NodeDiedError("n"))
    assert is_rung_gone(BackPressureError(num_queued_requests=1, max_queued_requests=1))
    assert not is_rung_gone(ValueError("bad input"))
    # A user's exception inside a task is a RayTaskError that is also the user's class.
    wrapped = RayTaskError("f", "tb", ValueError("bad")).as_instanceof_cause()
    assert not is_rung_gone(wrapped)


def test_the_serve_controller_copy_of_the_kv_names_matches_the_hook() -> None:
    # serve/scaling.py is pickled by value into the controller and reads the KV itself.
    from ray_ladder.cluster import roles
    from ray_ladder.serve import scaling

    assert (scaling.HOOK_KV_NAMESPACE, scaling.HOOK_ROLES_PREFIX) == \
        (roles.KV_NAMESPACE, roles.ROLES_PREFIX)
