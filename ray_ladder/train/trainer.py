"""LadderTrainer: a Ray Train v2 DataParallelTrainer whose worker-group shape is a rung."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
from ray.train.v2.api.exceptions import ControllerError, TrainingFailedError

from ray_ladder.cluster import ray_private_train
from ray_ladder.cluster.fleet_teams import check_bound_team
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.exceptions import LadderExhaustedError
from ray_ladder.core.spec import Ladder, Rung, as_ladder
from ray_ladder.train.channel import Channel
from ray_ladder.train.gang import STRATEGIES, gang_size, worker_demand
from ray_ladder.train.history import LadderSummary
from ray_ladder.train.planner import GangPlanner
from ray_ladder.train.policy import GroupWatch, LadderScalingPolicy, PolicySpec
from ray_ladder.train.worker import WorkerSpec, wrap

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LadderResult:
    """Ray Train's ``Result`` of the run, plus the ladder's account of it.

    Every attribute of Ray's result (``metrics``, ``checkpoint``, ``error``, ``path``,
    ``best_checkpoints``, ``return_value``...) reads through.

    Attributes:
        result: Ray Train's ``Result``.
        ladder: The :class:`LadderSummary`: ``path`` (rung of each worker group),
            ``spans``, ``per_rung`` seconds and cost, ``cost``, ``moves``, ``events``.

    Example:
        >>> result = trainer.fit()  # doctest: +SKIP
        >>> result.ladder.path, result.metrics["loss"]  # doctest: +SKIP
        (['h100x8', 'a100x8', 'h100x8'], 0.31)
    """

    result: Any
    ladder: LadderSummary

    def __getattr__(self, name: str) -> Any:
        if name in ("result", "ladder") or name.startswith("__"):  # unpickling, copying
            raise AttributeError(name)
        return getattr(self.result, name)


def _rung_scaling_config(rung: Rung, strategy: str, *, labels: bool) -> Any:
    """Ray Train's ``ScalingConfig`` for one rung's shape (Ray validates it)."""
    from ray.train.v2.api.config import ScalingConfig

    resources = worker_demand(rung)
    return ScalingConfig(
        num_workers=gang_size(rung), resources_per_worker=resources,
        use_gpu=resources.get("GPU", 0) > 0, placement_strategy=strategy,
        label_selector=dict(rung.label_selector) if labels and rung.label_selector else None)


class LadderTrainer(DataParallelTrainer):  # type: ignore[misc]
    """Run a data-parallel training function on the best rung shape obtainable, and move it.

    A ``DataParallelTrainer`` (Ray Train v2: set ``RAY_TRAIN_V2_ENABLED=1``) whose worker
    group takes its shape (``num_workers``, ``resources_per_worker``, label selector) from
    the rungs' ``train:`` field instead of one ``ScalingConfig``:

    * it starts on the best eligible rung whose whole gang fits now;
    * when a worker's node is lost, Ray Train's ``FailureConfig`` restarts the group from
      its latest checkpoint, on the best shape obtainable then;
    * once a better shape has been obtainable for ``promotion_hysteresis`` observations,
      the workers stop at their next checkpoint (:func:`ray_ladder.train.report`) and the
      group restarts on it from that checkpoint;
    * constraints are hard: the run never gets a worker on a rung they exclude.

    Inside the training function :func:`ray_ladder.train.current_rung` tells the worker
    its rung (``params`` such as ``grad_accum_steps``, ``world_size``).

    Args:
        train_loop_per_worker: ``fn()`` or ``fn(config)``, as for ``DataParallelTrainer``.
        ladder: The ladder (or its YAML/JSON path); rungs without ``train:`` are not used.
        constraints: ``Constraints`` or a dict (``{"jurisdiction": "eu"}``).
        train_loop_config: Passed to ``fn(config)``.
        run_config: Ray Train's ``RunConfig``; set ``FailureConfig(max_failures>=1)``: a
            node lost without a preemption notice counts as a worker-group failure.
        placement_strategy: The placement-group strategy of every shape (``PACK``).
        max_wait_s: Longest wait for any eligible shape to fit before the run fails with
            ``LadderExhaustedError`` (``None``: wait for capacity as long as it takes).
        suspect_s: How long the node of workers that died is left out of placements.
        park_timeout_s: How long workers wait at a checkpoint for a move.
        team: The fleet team the run belongs to (the operator's binding; the training
            loop's config cannot change it): its gangs on shared rungs follow the team's
            grants (a rung named like a fleet shared rung takes one unit per worker), a
            reclaim notice moves it at its next checkpoint before the units go, and it
            reports its demand to the fleet arbiter (docs/teams.md). While an arbiter
            runs, a name its fleet does not have is a ``ValueError``.
        **kwargs: ``backend_config``, ``datasets``, ``dataset_config``,
            ``validation_config``: Ray's, unchanged.

    Example:
        >>> trainer = LadderTrainer(train_fn, ladder="train-ladder.yaml",
        ...                         run_config=ray.train.RunConfig(
        ...                             failure_config=ray.train.FailureConfig(max_failures=3)))
        ... # doctest: +SKIP
        >>> result = trainer.fit()  # doctest: +SKIP
        >>> result.ladder.path  # doctest: +SKIP
        ['h100x8', 'a100x8', 'h100x8']
    """

    def __init__(
        self,
        train_loop_per_worker: Callable[..., Any],
        *,
        ladder: Ladder | str | Path,
        constraints: Constraints | Mapping[str, Any] | None = None,
        train_loop_config: dict[str, Any] | None = None,
        run_config: Any = None,
        placement_strategy: str = "PACK",
        max_wait_s: float | None = 300.0,
        suspect_s: float = 30.0,
        park_timeout_s: float = 120.0,
        team: str | None = None,
        **kwargs: Any,
    ) -> None:
        if "scaling_config" in kwargs:
            raise ValueError("LadderTrainer takes its ScalingConfig from the rungs' 'train:' "
                             "shapes; pass placement_strategy= instead of scaling_config=")
        if placement_strategy not in STRATEGIES:
            raise ValueError(f"unknown placement_strategy {placement_strategy!r}; "
                             f"valid: {STRATEGIES}")
        self.ladder = as_ladder(ladder)
        self.team = check_bound_team(team)
        if isinstance(constraints, Mapping):
            constraints = Constraints(**dict(constraints))
        self.constraints = constraints
        planner = GangPlanner(self.ladder, constraints, strategy=placement_strategy)
        rungs = [planner.train_ladder.rung(name) for name in planner.eligible]
        for rung in rungs:  # each shape passes Ray's own checks, now rather than mid-run
            _rung_scaling_config(rung, placement_strategy, labels=True)
        top = rungs[0]
        self._strategy = placement_strategy
        self._max_wait_s = max_wait_s
        self._suspect_s = float(suspect_s)
        self._park_timeout_s = float(park_timeout_s)
        self._top_config = _rung_scaling_config(top, placement_strategy, labels=True)
        # Labels come from the policy per rung; the trainer's own config must carry none.
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config,
                         scaling_config=_rung_scaling_config(top, placement_strategy,
                                                             labels=False),
                         run_config=run_config, **kwargs)
        failure = self.run_config.failure_config
        if failure is None or not failure.max_failures:
            logger.warning("FailureConfig(max_failures=0): a node lost without a preemption "
                           "notice ends the run instead of resuming on another rung; set "
                           "max_failures >= 1")

    def fit(self) -> LadderResult:  # type: ignore[override]
        """Run to the end on the ladder; return Ray's result and the ladder's summary.

        Raises:
            LadderExhaustedError: no eligible shape fit for ``max_wait_s``.
            ray.train.TrainingFailedError: as ``DataParallelTrainer.fit`` (the ladder's
                path so far is logged).
        """
        run_id = uuid.uuid4().hex
        worker_spec = WorkerSpec(self.ladder, self.constraints, run_id, self._park_timeout_s)
        policy = LadderScalingPolicy(self._top_config, PolicySpec(
            self.ladder, self.constraints, run_id, run_name=str(self.run_config.name or ""),
            strategy=self._strategy, max_wait_s=self._max_wait_s, suspect_s=self._suspect_s,
            preemption_grace_s=float(getattr(self.run_config.failure_config,
                                             "preemption_grace_s", 0.0) or 0.0),
            team=self.team))
        channel = Channel(run_id)
        user_fn = self.train_loop_per_worker
        self.train_loop_per_worker = wrap(user_fn, worker_spec)
        try:
            result = ray_private_train.train_fit_with_scaling_policy(
                self, policy, super().fit, callbacks=(GroupWatch(run_id),))
        except TrainingFailedError as err:
            summary = _read_summary(channel, policy)
            cause = getattr(err, "controller_failure", None)
            if isinstance(err, ControllerError) and isinstance(cause, LadderExhaustedError):
                raise cause from err
            logger.error("ladder %s: the run failed; its path:\n%s", self.ladder.name,
                         summary.text() or "(no worker group started)")
            raise
        finally:
            self.train_loop_per_worker = user_fn
        return LadderResult(result, _read_summary(channel, policy))


def _read_summary(channel: Channel, policy: LadderScalingPolicy) -> LadderSummary:
    """The controller's history of the run (then its keys are removed)."""
    try:
        data = channel.summary()
        channel.delete()
    except Exception as err:  # Ray already shut down: no history to read
        logger.warning("ladder: could not read the run's history: %s", err)
        data = None
    return LadderSummary.from_dict(data) if data else policy.summary
