"""The door to Ray Train v2's internals: every use of one in ray_ladder goes here.

The Ray Train part of :mod:`ray_ladder.cluster.ray_private` (the same rules: each function
names the private thing it wraps, ``tests/cluster/test_ray_private.py`` pins every entry of
:data:`PRIVATE_USES` to the Ray series of ``ray_private.RAY_SERIES``, imports happen inside
the functions). The ladder is Ray Train's scaling policy and a controller callback; these
are the extension points and controller states it reads and, for a preemption notice, the
one it writes (:func:`train_end_preemption_wait`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: Everything this module reaches, as ``module: attribute`` (the pin test resolves each;
#: instance attributes are pinned by their own tests there).
PRIVATE_USES: tuple[tuple[str, str], ...] = (
    ("ray.train.v2._internal.execution.scaling_policy", "ScalingPolicy"),
    ("ray.train.v2._internal.execution.scaling_policy", "ResizeDecision"),
    ("ray.train.v2._internal.execution.scaling_policy", "NoopDecision"),
    ("ray.train.v2.api.data_parallel_trainer",
     "DataParallelTrainer._initialize_and_run_controller"),
    ("ray.train.v2._internal.execution.controller.state", "TrainControllerStateType"),
    ("ray.train.v2._internal.execution.controller.state", "PreemptingState"),
    ("ray.train.v2._internal.execution.controller.controller",
     "TrainController._is_preemption_deadline_exceeded"),
    ("ray.train.v2.api.preemption", "PreemptionInfo"),
    ("ray.train.v2._internal.execution.worker_group.state", "WorkerGroupState"),
    ("ray.train.v2._internal.exceptions", "WorkerHealthCheckFailedError"),
    ("ray.train.v2._internal.execution.callback", "WorkerGroupCallback"),
    ("ray.train.v2._internal.execution.context", "get_train_context"),
)


# --- the ladder as the controller's scaling policy ----------------------------------------

def train_bases() -> tuple[type, type]:
    """Ray Train v2's ``ScalingPolicy`` and ``WorkerGroupCallback`` base classes."""
    from ray.train.v2._internal.execution.callback import WorkerGroupCallback
    from ray.train.v2._internal.execution.scaling_policy import ScalingPolicy

    return ScalingPolicy, WorkerGroupCallback


def train_decision(num_workers: int = 0, resources_per_worker: dict | None = None) -> Any:
    """``ResizeDecision`` to (re)start the group in this shape; ``NoopDecision`` for 0."""
    from ray.train.v2._internal.execution.scaling_policy import NoopDecision, ResizeDecision

    if num_workers == 0:
        return NoopDecision()
    return ResizeDecision(num_workers=num_workers, resources_per_worker=resources_per_worker or {})


def train_fit_with_scaling_policy(trainer: Any, policy: Any, fit: Any, callbacks: tuple = ()
                                  ) -> Any:
    """``fit()`` of a v2 trainer whose controller gets ``policy`` (and ``callbacks``): swaps
    them into ``_initialize_and_run_controller``'s arguments for that one call."""
    original = trainer._initialize_and_run_controller

    def run(**kwargs: Any) -> Any:
        kwargs["scaling_policy"] = policy
        kwargs["callbacks"] = [*kwargs.get("callbacks", []), *callbacks]
        return original(**kwargs)

    trainer._initialize_and_run_controller = run
    try:
        return fit()
    finally:
        del trainer._initialize_and_run_controller


def train_state(state: Any) -> tuple[str, BaseException | None, str | None]:
    """(``TrainControllerStateType`` name, training error, name of the state it leads to)."""
    from ray.train.v2._internal.execution.controller.state import TrainControllerStateType

    def name(s: Any) -> str:
        kind = getattr(s, "_state_type", None)
        return str(kind.state_name) if isinstance(kind, TrainControllerStateType) else "?"

    following = getattr(state, "next_state", None)
    return (name(state), getattr(state, "training_failed_error", None),
            name(following) if following is not None else None)


def train_placements(group: Any) -> list[tuple[str, dict[str, float]]]:
    """(node id, resources) by rank of a ``WorkerGroup`` or a ``WorkerGroupState``."""
    state = group.get_worker_group_state() if hasattr(group, "get_worker_group_state") else group
    return [(str(w.metadata.node_id), dict(w.resources)) for w in state.workers]


def train_failure_cause(error: BaseException) -> BaseException:
    """The Ray error inside a ``WorkerHealthCheckFailedError``, else ``error``."""
    from ray.train.v2._internal.exceptions import WorkerHealthCheckFailedError

    if isinstance(error, WorkerHealthCheckFailedError):
        return error.health_check_failure  # type: ignore[no-any-return]
    return error


# --- preemption notices: the controller's PreemptingState, the worker's preemption info ---

def train_preemption_info(state: Any) -> Any | None:
    """The ``PreemptionInfo`` of a controller ``PreemptingState`` (its instance attribute
    ``preemption_info``: drained nodes, their ranks, the earliest deadline), else ``None``."""
    from ray.train.v2._internal.execution.controller.state import PreemptingState

    return state.preemption_info if isinstance(state, PreemptingState) else None


def train_end_preemption_wait(state: Any, grace_s: float) -> bool:
    """End Ray Train's wait in ``state`` (a ``PreemptingState``) at its next poll.

    Ray Train keeps a group on a drained node running until the drain's deadline plus
    ``FailureConfig.preemption_grace_s``, then raises ``PreemptionError`` and retries
    (``TrainController._handle_preempting_state``, ``_is_preemption_deadline_exceeded``).
    This moves the deadline of the state's ``PreemptionInfo`` to ``now - grace_s``, so
    that check passes at the controller's next poll and the restart (counted against
    ``max_preemption_failures``, as at the real deadline) happens now. The new info is
    merged with any later one by taking the earliest deadline, so it stays. Returns
    whether ``state`` was a ``PreemptingState``.
    """
    import time

    info = train_preemption_info(state)
    if info is None:
        return False
    deadline_ms = int((time.time() - grace_s) * 1000) - 1  # Ray compares with its wall clock
    state.preemption_info = dataclasses.replace(info, deadline_ms=deadline_ms)
    return True


def train_local_preemption_info() -> Any | None:
    """This Train worker's own copy of the preemption info (what
    ``ray.train.get_preemption_info()`` broadcasts from rank 0), read without a collective:
    ``get_train_context().preemption_context.preemption_info``. ``None`` outside a worker."""
    from ray.train.v2._internal.execution.context import get_train_context

    try:
        context = get_train_context()
    except RuntimeError:  # not a Ray Train worker
        return None
    return context.preemption_context.preemption_info
