"""Tune's ERROR for a ladder trial that lost its node becomes one INFO line; nothing else
changes (no Ray cluster: Tune's record, the trial and the node table are built here)."""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from ray.exceptions import RayActorError

from ray_ladder.core.placement import NodeState
from ray_ladder.tune.quiet import TUNE_CONTROLLER_LOGGER, NodeLossLog

ACTOR = "ab" * 16


def trial(actor_hex: str | None = ACTOR, node_id: str | None = "n1") -> Any:
    """A Tune trial as the filter reads it: its last result's ladder block."""
    return SimpleNamespace(trial_id="t_1", last_result={"ladder": {
        "rung": "h100", "node_id": node_id, "actor_id": actor_hex}})


def node(alive: bool) -> NodeState:
    return NodeState("n1", alive, {"ladder/h100": 1}, {"ladder/h100": 1}, {})


def tune_record(error: BaseException) -> logging.LogRecord:
    """The record Tune's controller logs for a failed trial task (with the exception)."""
    try:
        raise error
    except BaseException:
        exc_info = sys.exc_info()
    return logging.LogRecord(TUNE_CONTROLLER_LOGGER, logging.ERROR, __file__, 1,
                             "Trial task failed for trial %s", ("t_1",), exc_info)


def test_a_trial_whose_node_is_gone_gets_one_info_line_without_the_traceback() -> None:
    log = NodeLossLog(lambda: [node(alive=False)])
    log.watch(trial())
    record = tune_record(RayActorError(actor_id=ACTOR))
    assert log.filter(record)
    assert record.levelno == logging.INFO and record.exc_info is None
    assert record.getMessage() == ("trial t_1 lost its node on rung h100: the ladder places "
                                   "it again and restores its checkpoint")
    log.close()


def test_a_drain_for_preemption_says_so_without_reading_the_node_table() -> None:
    def unreadable() -> list[NodeState]:
        raise AssertionError("the preempted flag is enough")

    log = NodeLossLog(unreadable)
    log.watch(trial())
    record = tune_record(RayActorError(actor_id=ACTOR, preempted=True))
    log.filter(record)
    assert record.levelno == logging.INFO
    log.close()


@pytest.mark.parametrize(("error", "the_trial", "nodes"), [
    (RayActorError(actor_id=ACTOR), trial(), [node(alive=True)]),  # died on a live node
    (RayActorError(actor_id="cd" * 16), trial(), [node(alive=False)]),  # another actor
    (ValueError("a bug in the trainable"), trial(), [node(alive=False)]),  # no actor
    (RayActorError(actor_id=ACTOR), trial(node_id=None), []),  # no result yet: no node
    (RayActorError(actor_id=ACTOR), trial(actor_hex=None), [node(alive=False)]),
])
def test_every_other_failure_is_left_as_tune_logs_it(error: BaseException, the_trial: Any,
                                                     nodes: list[NodeState]) -> None:
    log = NodeLossLog(lambda: nodes)
    log.watch(the_trial)
    record = tune_record(error)
    assert log.filter(record)
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.getMessage() == "Trial task failed for trial t_1"
    log.close()


def test_a_node_table_that_cannot_be_read_leaves_the_record() -> None:
    def broken() -> list[NodeState]:
        raise ConnectionError("GCS gone")

    log = NodeLossLog(broken)
    log.watch(trial())
    record = tune_record(RayActorError(actor_id=ACTOR))
    assert log.filter(record) and record.levelno == logging.ERROR
    log.close()


def test_it_filters_tunes_logger_only_while_the_run_lasts() -> None:
    tune_logger = logging.getLogger(TUNE_CONTROLLER_LOGGER)
    log = NodeLossLog(lambda: [])
    log.watch(trial())
    assert log in tune_logger.filters
    log.close()
    assert log not in tune_logger.filters
