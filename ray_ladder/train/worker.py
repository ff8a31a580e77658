"""The worker side of a ladder run: the rung it runs on, and a report that can climb."""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ray_ladder.cluster import ray_private_train
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.context import RungContext
from ray_ladder.core.placement import label_matches
from ray_ladder.core.spec import Ladder
from ray_ladder.train.channel import Channel, ClimbRequest
from ray_ladder.train.gang import train_ladder, worker_demand

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainRungContext(RungContext):
    """The rung a Train worker runs on, and its place in the gang.

    Attributes:
        world_size: Workers in this worker group (the rung's ``train.workers``).
        world_rank: This worker's rank.
        resources_per_worker: What this worker holds (the shape's per-worker resources).
        node_id: The Ray node it runs on.

    Example:
        >>> rung = current_rung()  # doctest: +SKIP
        >>> rung.name, rung.world_size, rung.params.get("grad_accum_steps", 1)  # doctest: +SKIP
        ('a100x4', 2, 2)
    """

    world_size: int = 1
    world_rank: int = 0
    resources_per_worker: dict[str, float] = field(default_factory=dict)
    node_id: str = ""


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker of a ladder run needs to know (travels with the training function).

    Attributes:
        ladder: The user's ladder.
        constraints: The run's constraints.
        run_id: The ladder run's id (its :class:`Channel`).
        park_timeout_s: How long workers wait at a checkpoint for a move before going on.
        notice_wait_s: How long rank 0, reporting a checkpoint after its worker got a
            preemption notice, waits for the controller's request to move (Ray Train
            tells the workers before its controller's next poll sees it).
    """

    ladder: Ladder
    constraints: Constraints | None
    run_id: str
    park_timeout_s: float = 120.0
    notice_wait_s: float = 10.0


# One training function runs per Train worker process; these describe it.
_spec: WorkerSpec | None = None
_current: TrainRungContext | None = None


def _same(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    keys = {k for k, v in a.items() if v} | {k for k, v in b.items() if v}
    return all(abs(a.get(k, 0.0) - b.get(k, 0.0)) < 1e-6 for k in keys)


def rung_of(spec: WorkerSpec, assigned: Mapping[str, float], world_size: int,
            labels: Mapping[str, str]) -> str | None:
    """The eligible rung whose shape is this worker's: same resources per worker, same
    number of workers, and a label selector the worker's node satisfies.

    Example:
        >>> rung_of(spec, {"ladder/a100": 2.0}, 4, {})  # doctest: +SKIP
        'a100x8'
    """
    for rung in train_ladder(spec.ladder).eligible(spec.constraints):
        if (rung.train is not None and rung.train.workers == world_size
                and _same(worker_demand(rung), assigned)
                and label_matches(rung.label_selector, labels)):
            return rung.name
    return None


def _detect(spec: WorkerSpec) -> TrainRungContext | None:
    """Read where this worker really is: its assigned resources, world size, node labels."""
    import ray
    import ray.train

    runtime = ray.get_runtime_context()
    assigned = {k: float(v) for k, v in runtime.get_assigned_resources().items()}
    labels = {k: str(v[0] if isinstance(v, (list, tuple)) and v else v)
              for k, v in runtime.get_node_labels().items()}
    train_ctx = ray.train.get_context()
    world_size, rank = train_ctx.get_world_size(), train_ctx.get_world_rank()
    name = rung_of(spec, assigned, world_size, labels)
    if name is None:
        logger.warning("ladder %s: worker resources %s x %d match no eligible rung",
                       spec.ladder.name, assigned, world_size)
        return None
    base = RungContext.of(spec.ladder, name)
    return TrainRungContext(**vars(base), world_size=world_size, world_rank=rank,
                            resources_per_worker=assigned, node_id=runtime.get_node_id())


def _enter(spec: WorkerSpec) -> None:
    # Module level on purpose: the wrappers below travel by value (cloudpickle gives them a
    # copy of their globals), this function by reference, so it sets this module's state.
    global _spec, _current
    _spec = spec
    _current = _detect(spec)


def wrap(train_fn: Callable[..., Any], spec: WorkerSpec) -> Callable[..., Any]:
    """The training function Ray Train runs: ``train_fn`` after finding the worker's rung.

    Keeps ``train_fn``'s arity (Ray Train passes ``config`` only to a function that takes
    one argument).
    """
    required = [p for p in inspect.signature(train_fn).parameters.values()
                if p.default is p.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

    if required:
        @functools.wraps(train_fn)
        def ladder_train_loop(config: dict[str, Any]) -> Any:
            _enter(spec)
            return train_fn(config)

        return ladder_train_loop

    @functools.wraps(train_fn)
    def ladder_train_loop_no_config() -> Any:
        _enter(spec)
        return train_fn()

    return ladder_train_loop_no_config


def current_rung() -> TrainRungContext:
    """The rung this worker runs on: name, params, quality, cost, tags, world size, rank.

    Call it inside a training function run by :class:`LadderTrainer`. It is read from the
    worker's real placement and changes only between worker groups: after a fall or a climb
    the function starts again (from the latest checkpoint) and sees the new rung.

    Raises:
        RuntimeError: outside a ladder run, or when the placement matches no rung.

    Example:
        >>> def train_fn(config):  # doctest: +SKIP
        ...     rung = ray_ladder.train.current_rung()
        ...     accum = rung.params.get("grad_accum_steps", 1)
    """
    if _current is None:
        raise RuntimeError(
            "current_rung() is only available inside a training function run by "
            "ray_ladder.train.LadderTrainer (or this worker's placement matched no rung)")
    return _current


def report(metrics: dict[str, Any], checkpoint: Any = None, **kwargs: Any) -> None:
    """``ray.train.report`` that lets the ladder move the run up at this checkpoint.

    Same arguments as ``ray.train.report``; every worker calls it at the same points, as
    Ray Train requires. When rank 0 reports a checkpoint and the ladder has asked to move
    (a better shape has been obtainable for the hysteresis, or a node of the group got a
    preemption notice: ``ray.train.get_preemption_info()`` is set), every worker stops
    here once Ray Train has committed that checkpoint, and the ladder restarts the group
    from it on the better shape, or off the drained node before its deadline: no step is
    lost. Outside a ladder run it is ``ray.train.report``.

    Example:
        >>> ray_ladder.train.report({"loss": loss}, checkpoint=Checkpoint.from_directory(d))
        ... # doctest: +SKIP
    """
    import ray.train

    ray.train.report(metrics, checkpoint=checkpoint, **kwargs)
    spec = _spec
    if spec is None:
        return
    from ray.train import CheckpointConsistencyMode
    from ray.train.collective import broadcast_from_rank_zero

    channel = Channel(spec.run_id)
    rank = ray.train.get_context().get_world_rank()
    asked: int | None = None
    if rank == 0 and checkpoint is not None:
        request = channel.climb()
        if ((request is None or request.cancelled)
                and ray_private_train.train_local_preemption_info() is not None):
            request = _wait_for_notice(channel, spec.notice_wait_s)
        if request is not None and not request.cancelled:
            asked = request.id
    asked = broadcast_from_rank_zero(asked)  # every worker stops here, or none does
    if asked is None:
        return
    if rank == 0:
        ray.train.get_all_reported_checkpoints(
            consistency_mode=CheckpointConsistencyMode.COMMITTED)
        channel.park(asked)
    _wait_for_move(channel, asked, spec.park_timeout_s, rank == 0)


def _wait_for_notice(channel: Channel, timeout_s: float) -> ClimbRequest | None:
    """Rank 0 got a preemption notice before the controller's next poll did: wait (at most
    ``timeout_s``) for the request the controller writes when it sees it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        request = channel.climb()
        if request is not None and not request.cancelled:
            return request
        time.sleep(0.05)
    logger.warning("ladder: a preemption notice came, but no move request in %.0fs; "
                   "training goes on", timeout_s)
    return None


def _wait_for_move(channel: Channel, asked: int, timeout_s: float, rank0: bool) -> None:
    """Wait at the checkpoint until the controller stops this group (the process ends), the
    request is cancelled or replaced, or ``timeout_s`` passes: then training goes on. A
    climb replaced by a preemption notice keeps the workers here (the checkpoint they
    stopped at is committed): rank 0 parks again, for the notice. A request that is gone
    (the controller clears the channel when it starts the next group) keeps them here too:
    this group is being stopped, and a step run now would be lost with it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.05)
        request = channel.climb()
        if request is not None and request.notice and not request.cancelled \
                and request.id != asked:
            asked = request.id
            if rank0:
                channel.park(asked)
            continue
        if request is not None and (request.id != asked or request.cancelled):
            return
    logger.warning("ladder: waited %.0fs at a checkpoint for a move that did not come; "
                   "training goes on", timeout_s)
