"""Tuner: ``tune.Tuner`` with the ladder scheduler and callback wired in."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from ray import tune

from ray_ladder.tune.scheduler import LadderScheduler

logger = logging.getLogger(__name__)


def ladder_configs(
    tune_config: tune.TuneConfig | None = None,
    run_config: tune.RunConfig | None = None,
) -> tuple[tune.TuneConfig, tune.RunConfig]:
    """Return copies of the configs with the ladder wired in.

    The scheduler becomes a :class:`LadderScheduler` wrapping the one given (kept as is
    when it already is one); its callback goes into ``run_config.callbacks`` before the
    first Tune logger there (appended when there is none; Tune adds its default loggers
    after the run's callbacks): it stores a restarted trial's result files before the
    loggers restore them (:mod:`ray_ladder.tune.result_files`).

    Raises:
        ValueError: ``reuse_actors=True`` (a move needs a new actor on the new rung).

    Example:
        >>> tune_config, run_config = ladder_configs(tune.TuneConfig(num_samples=4))
        ... # doctest: +SKIP
    """
    tune_config = tune_config or tune.TuneConfig()
    run_config = run_config or tune.RunConfig()
    if tune_config.reuse_actors:
        raise ValueError("a ladder moves trials between actors: set reuse_actors=False "
                         "in tune.TuneConfig()")
    scheduler = tune_config.scheduler
    if isinstance(scheduler, str):
        from ray.tune.schedulers import create_scheduler

        scheduler = create_scheduler(scheduler)
    if not isinstance(scheduler, LadderScheduler):
        scheduler = LadderScheduler(scheduler)
    callbacks = list(run_config.callbacks or [])
    if scheduler.callback not in callbacks:
        callbacks.insert(before_loggers(callbacks), scheduler.callback)
    if run_config.failure_config is None or not run_config.failure_config.max_failures:
        logger.warning("FailureConfig(max_failures=0): a trial whose node is lost ends in "
                       "ERROR instead of resuming on another rung; set max_failures >= 1")
    return (dataclasses.replace(tune_config, scheduler=scheduler),
            dataclasses.replace(run_config, callbacks=callbacks))


def before_loggers(callbacks: list[Any]) -> int:
    """Where the ladder's callback goes in ``callbacks``: before the first Tune
    ``LoggerCallback``, else at the end.

    Example:
        >>> before_loggers([])
        0
    """
    from ray.tune.logger import LoggerCallback

    return next((i for i, c in enumerate(callbacks) if isinstance(c, LoggerCallback)),
                len(callbacks))


class Tuner(tune.Tuner):
    """A ``tune.Tuner`` whose trials fall and climb on their ladder.

    Same arguments as ``tune.Tuner``. It wraps ``tune_config.scheduler`` (FIFO when
    unset) in a :class:`LadderScheduler` and adds its callback to
    ``run_config.callbacks``; everything else is Tune's. Use ``with_ladder`` for the
    trainable and ``FailureConfig(max_failures>=1)`` so a preempted trial resumes.

    Example:
        >>> tuner = Tuner(with_ladder(train_fn, ladder), param_space={"lr": 0.1},
        ...               run_config=tune.RunConfig(
        ...                   failure_config=tune.FailureConfig(max_failures=3)))
        ... # doctest: +SKIP
        >>> results = tuner.fit()  # doctest: +SKIP
    """

    def __init__(
        self,
        trainable: Any = None,
        *,
        param_space: dict[str, Any] | None = None,
        tune_config: tune.TuneConfig | None = None,
        run_config: tune.RunConfig | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("_tuner_internal") is None:
            tune_config, run_config = ladder_configs(tune_config, run_config)
        super().__init__(trainable, param_space=param_space, tune_config=tune_config,
                         run_config=run_config, **kwargs)
