"""A preemption the ladder recovers from is not an error in the user's log.

Tune logs every failed trial task at ERROR with Ray's whole traceback ("Trial task failed
for trial ..."), before any scheduler hears of the failure. When the trial is a ladder
trial whose actor died with its node (a preemption notice's drain, or a node the cluster
no longer lists alive), the ladder re-places it and restores its checkpoint: that record
becomes one INFO line saying so, and the traceback goes to DEBUG. Any other failure (a
bug in the trainable, an actor that died on a live node) is left exactly as Tune logs it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

#: The logger Tune's controller reports trial task failures on.
TUNE_CONTROLLER_LOGGER = "ray.tune.execution.tune_controller"


def last_placement(trial: Any) -> tuple[str | None, str | None, str | None]:
    """``(rung, node id, actor id)`` of the trial's last result: a ladder trainable
    reports all three in its ``ladder`` block (Tune's own handle to the actor is not
    kept on the trial).

    Example:
        >>> class T:
        ...     last_result = {"ladder": {"rung": "h100", "node_id": "n1", "actor_id": "a1"}}
        >>> last_placement(T())
        ('h100', 'n1', 'a1')
    """
    last = getattr(trial, "last_result", None) or {}
    nested = last.get("ladder")
    block: dict[str, Any] = nested if isinstance(nested, dict) else {}
    return tuple(block.get(key) or last.get(f"ladder/{key}")  # type: ignore[return-value]
                 for key in ("rung", "node_id", "actor_id"))


def node_gone(node_id: str, nodes: Callable[[], list[Any]]) -> bool:
    """Whether ``node_id`` is no longer listed alive by the node source ``nodes``."""
    return not any(n.node_id == node_id and n.alive for n in nodes())


class NodeLossLog(logging.Filter):
    """Turns Tune's ERROR for a ladder trial that lost its node into one INFO line.

    Args:
        nodes: The node source (Ray's GCS view by default), read only for a failure
            whose exception names a followed trial's actor.

    Example:
        >>> log = NodeLossLog(lambda: [])
        >>> record = logging.LogRecord("t", logging.ERROR, "", 0, "Trial task failed",
        ...                            None, None)
        >>> log.filter(record), record.levelname  # no exception: left as Tune logs it
        (True, 'ERROR')
    """

    def __init__(self, nodes: Callable[[], list[Any]] | None = None) -> None:
        super().__init__()
        self._nodes = nodes
        self._trials: dict[str, Any] = {}
        self._installed = False

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_trials": {}, "_installed": False}

    def watch(self, trial: Any) -> None:
        """Follow ``trial`` (installs the filter on Tune's logger the first time)."""
        self._trials[trial.trial_id] = trial
        if not self._installed:
            logging.getLogger(TUNE_CONTROLLER_LOGGER).addFilter(self)
            self._installed = True

    def close(self) -> None:
        """Stop filtering (the run is over)."""
        logging.getLogger(TUNE_CONTROLLER_LOGGER).removeFilter(self)
        self._installed = False
        self._trials.clear()

    def filter(self, record: logging.LogRecord) -> bool:
        """Always keep the record; rewrite it when it is a followed trial's node loss."""
        error = record.exc_info[1] if record.exc_info else None
        actor_id = getattr(error, "actor_id", None)
        if record.levelno < logging.ERROR or not actor_id:
            return True
        trial = next((t for t in list(self._trials.values())
                      if last_placement(t)[2] == actor_id), None)
        if trial is None:
            return True
        rung, node_id, _ = last_placement(trial)
        if node_id is None:
            return True
        try:
            lost = bool(getattr(error, "preempted", False)) or node_gone(node_id, self._read)
        except Exception:  # cannot tell: leave Tune's record alone
            return True
        if lost:
            logging.getLogger(__name__).debug("trial %s: Tune's traceback", trial.trial_id,
                                              exc_info=record.exc_info)
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg = (f"trial {trial.trial_id} lost its node on rung {rung}: the ladder "
                          "places it again and restores its checkpoint")
            record.args, record.exc_info, record.exc_text = None, None, None
        return True

    def _read(self) -> list[Any]:
        if self._nodes is not None:
            return self._nodes()
        from ray_ladder.cluster.node_table import ray_node_states

        return ray_node_states()
