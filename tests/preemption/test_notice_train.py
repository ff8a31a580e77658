"""A Ray Train run on a draining rung checkpoints when Ray Train's preemption info says so
and moves to the next rung at that checkpoint, before the kill, losing no step.
``bench/preemption_notice_train.py`` runs the same drain and compares it with Ray Train's
own flow (plain ``ray.train.report``: the restart waits for the deadline)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from preemption_notice_train import NODES, TRAIN_ENV, drain_and_kill  # bench/ (conftest.py)

from ray_ladder.core.placement import PREEMPTION_NOTICE

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def cluster(local_cluster: Any) -> Any:
    return local_cluster(NODES, include_dashboard=True)  # the state API: list_actors


def test_a_run_that_honours_the_notice_moves_before_the_kill(
        cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in TRAIN_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S", "0.5")
    # max_failures=0: the early restart is a preemption (max_preemption_failures, -1 by
    # default), not a worker-group failure; counted as one, it would end the run.
    run = drain_and_kill(cluster, tmp_path, ladder_report=True, max_failures=0)
    summary = run.result.ladder
    # The move is the ladder's: the h100x2 group stops at the notice's checkpoint and the
    # run asks for a100x2, both before the kill. How long Ray then takes to start two
    # worker processes is the machine's (11 s once in CI beside other Ray work), so the
    # first a100x2 step is reported, not asserted before the kill.
    assert summary.events[1]["time"] < run.killed_at, "moved only at the kill"
    assert run.lost == 0, "steps lost"  # resumed from the last step run on h100x2
    at = next(e for e in run.entries if e["rung"] == "h100x2" and e["step"] == run.last_top)
    assert run.notice_at < at["time"] < run.killed_at  # checkpointed on the notice
    assert summary.path == ["h100x2", "a100x2"]
    assert summary.spans[0].ended_by == "preempted"
    reason = summary.events[1]["reason"]
    assert reason.startswith(f"h100x2 {PREEMPTION_NOTICE}: moved at a committed checkpoint")
    assert run.result.error is None
