"""LadderCallback: writes each trial's rung history, time and cost into its Tune results."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ray.tune import Callback

from ray_ladder.tune.quiet import NodeLossLog
from ray_ladder.tune.result_files import store_driver_copies
from ray_ladder.tune.trainable import RESULT_KEY

if TYPE_CHECKING:
    from ray.tune.experiment import Trial


class RungHistorySource(Protocol):
    """What the callback reads of its scheduler (``LadderScheduler`` provides it)."""

    def summary(self, trial_id: str) -> dict[str, Any] | None: ...
    def stop(self) -> None: ...


class LadderCallback(Callback):
    """Adds the ladder block to the checkpoint results and the last result of a trial.

    Every result of a ladder trial carries ``result["ladder"]["rung"]`` (from the trial
    itself); the callback adds, on results with a checkpoint and on the final one,
    ``history`` (every rung it ran on with start/end times, why it left, seconds
    and cost), ``per_rung`` (seconds and cost per rung), ``cost``, ``seconds``,
    ``seconds_below_top`` and ``moves``. Read it back with
    :func:`ray_ladder.tune.rung_history`.

    Get it from :attr:`LadderScheduler.callback` (it reads that scheduler's state).
    While the run lasts, Tune's ERROR with a traceback for a trial that lost its node (a
    preemption the ladder recovers from) becomes one INFO line
    (:class:`~ray_ladder.tune.quiet.NodeLossLog`); other failures are logged as Tune does.
    When a trial starts again (a move, a recovery), its result files are stored first,
    so Tune's loggers, which restore them from storage, lose no result
    (:mod:`~ray_ladder.tune.result_files`): it must come before them in
    ``RunConfig(callbacks=...)``, where :func:`~ray_ladder.tune.ladder_configs` puts it.

    Args:
        scheduler: The :class:`LadderScheduler` of the same run.

    Example:
        >>> run_config = tune.RunConfig(callbacks=[scheduler.callback])  # doctest: +SKIP
    """

    def __init__(self, scheduler: RungHistorySource) -> None:
        self.scheduler = scheduler
        self.node_losses = NodeLossLog()

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial,
                       **info: Any) -> None:
        """Follow the trial's actor (a failure that is its node's loss is said as such);
        store its result files before Tune's loggers restore them from storage."""
        self.node_losses.watch(trial)
        store_driver_copies(trial)

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial,
                        result: dict, **info: Any) -> None:
        """Annotate results that carry a checkpoint, in place (Tune lets callbacks do so).

        Only those (and the last result, see :meth:`on_trial_complete`): the block is a
        few dozen columns for Tune's loggers, and checkpoints are where a run is resumed.
        """
        if not result.get("should_checkpoint"):
            return
        block = self.scheduler.summary(trial.trial_id)
        if block:
            result[RESULT_KEY] = {**(result.get(RESULT_KEY) or {}), **block}

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial,
                          **info: Any) -> None:
        """Close the history in the trial's last result (what ``ResultGrid`` shows)."""
        self._finalize(trial)

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial,
                       **info: Any) -> None:
        """Same for a trial that failed for good."""
        self._finalize(trial)

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        """The run is over: with_ladder trainables no longer see an active scheduler."""
        self.node_losses.close()
        self.scheduler.stop()

    def _finalize(self, trial: Trial) -> None:
        block = self.scheduler.summary(trial.trial_id)
        last = trial.last_result
        if block and isinstance(last, dict) and last:
            last[RESULT_KEY] = {**(last.get(RESULT_KEY) or {}), **block}
