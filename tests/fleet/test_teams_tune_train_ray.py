"""A Tune run and a Train run bound to team b on one LocalCluster behind the fleet arbiter:
b borrows team a's idle h100, a's demand arrives, and b's work moves to a100 at its next
checkpoint, before the reclaim notice's deadline, losing no step past that checkpoint."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
import ray
from ray import cloudpickle as ray_cloudpickle

from ray_ladder import Ladder
from ray_ladder.cluster import grants, ray_private
from ray_ladder.core.fleet import Fleet
from ray_ladder.demo.teams.checkpoint import (
    EVERY,
    read_steps,
    runs,
    steps_lost,
)
from ray_ladder.fleet import start_arbiter
from ray_ladder.testing import wait_until
from ray_ladder.testing.demand import steady_demand
from tests.fleet._team_train import team_trainer, team_tuner

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

LADDER = Ladder.from_yaml("""
name: shared-train
policy: {probe_interval_s: 0.25}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, train: {workers: 1}}
  - {name: a100, resources: {ladder/a100: 1}, train: {workers: 1}}
""")
GRACE_S = 6.0
FLEET = Fleet.from_yaml(f"""
fleet: tune-train-it
control_period_s: 0.2
rungs: {{h100: {{resources: {{ladder/h100: 1}}}}}}
teams:
  - {{name: a, quota: {{h100: 2}}, cohort: onprem}}
  - {{name: b, cohort: onprem, reclaim_grace_s: {GRACE_S}}}
""")
SLOW = 60

for _pickler in (cloudpickle, ray_cloudpickle):
    _pickler.register_pickle_by_value(sys.modules[__name__])


def entry(team: str) -> dict:
    raw = ray_private.kv_get(grants.GRANTS_PREFIX + team, namespace=grants.KV_NAMESPACE)
    return json.loads(raw) if raw else {}


def h100(team: str) -> dict:
    return entry(team).get("rungs", {}).get("h100", {})


def assert_no_step_lost(entries: list[dict]) -> None:
    """Each run resumes from the step the one before it ended at (a move at a checkpoint),
    and counts on from it without a gap."""
    cut = runs(entries)
    for before, after in zip(cut, cut[1:], strict=False):
        assert after[0]["resumed_from"] == before[-1]["step"], (before[-1], after[0])
    for run in cut:
        assert [e["step"] for e in run] == list(range(run[0]["resumed_from"] + 1,
                                                     run[0]["resumed_from"] + 1 + len(run)))


@pytest.fixture(scope="module")
def cluster(local_cluster: Any) -> Any:
    local_cluster(ladder=LADDER, initial={"h100": 2, "a100": 1})
    handle = start_arbiter(FLEET)
    wait_until(lambda: entry("a") and entry("b"), SLOW, 0.1, "grants published")
    yield handle
    ray.kill(handle, no_restart=True)


def _reclaim_from_b(log: Path, stack: contextlib.ExitStack) -> tuple[float, float]:
    """b's work runs on h100; a's demand arrives (and stands, reported again as a running
    part does, until ``stack`` closes): the notice's time and deadline."""
    wait_until(lambda: sum(e["rung"] == "h100" for e in read_steps(log)) >= 5, 120, 0.1,
               "b's work runs on a's idle h100")
    assert h100("b").get("held", 0) >= 1
    stack.enter_context(steady_demand("a", "app-a", {"h100": 2}))
    noticed_at = time.time()
    wait_until(lambda: h100("b").get("noticed", 0) >= 1, SLOW, 0.05, "a notice to b")
    deadline = h100("b")["deadline"]
    assert deadline is not None and deadline <= noticed_at + GRACE_S + 1
    return noticed_at, deadline


def _after_move(log: Path, noticed_at: float, deadline: float) -> list[dict]:
    first = wait_until(lambda: next((e for e in read_steps(log) if e["rung"] == "a100"
                                     and e["time"] > noticed_at), None),
                       SLOW, 0.05, "b's work resumed on a100")
    last_on_unit = max(e["time"] for e in read_steps(log) if e["rung"] == "h100")
    assert last_on_unit < deadline, (last_on_unit - deadline)  # off the unit before it goes
    wait_until(lambda: h100("a").get("held") == 2 and h100("b").get("held", 0) == 0,
               SLOW, 0.1, "a holds its quota")
    # past a checkpoint there: the results that carry the ladder's history are those
    wait_until(lambda: sum(e["rung"] == "a100" and e["time"] > first["time"]
                           for e in read_steps(log)) >= EVERY + 2, SLOW, 0.1, "b trains on a100")
    entries = read_steps(log)
    last_top = max(e["step"] for e in entries if e["rung"] == "h100")
    print(f"notice -> last h100 step {last_on_unit - noticed_at:.2f} s, first a100 step "
          f"{first['time'] - noticed_at:.2f} s (deadline {deadline - noticed_at:.2f} s); "
          f"last h100 step "
          f"{last_top}, resumed from {first['resumed_from']}")
    assert first["resumed_from"] == last_top  # 0 steps past the last checkpoint lost
    assert not [e for e in entries if e["rung"] == "h100" and e["time"] > first["time"]]
    assert_no_step_lost(entries)
    assert steps_lost(entries) == 0  # the bench's borrower_steps_lost_past_checkpoint
    return entries


def _reclaimed_while_running(fit: Any, log: Path, flag: Path) -> Any:
    """``fit()`` in a thread while b's work is reclaimed (a's demand arrives, and stands
    until b's run ended), checked by :func:`_after_move`; its result."""
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(result=fit()), daemon=True)
    thread.start()
    with contextlib.ExitStack() as demand:  # a's demand ends after b's run
        try:
            noticed_at, deadline = _reclaim_from_b(log, demand)
            _after_move(log, noticed_at, deadline)
        finally:
            flag.touch()
            thread.join(120)
    assert not thread.is_alive()
    return out["result"]


def test_a_tune_trial_of_b_moves_off_a_reclaimed_unit_at_its_checkpoint(
        cluster: Any, tmp_path: Path) -> None:
    from ray_ladder.tune import rung_history

    tuner, log, flag = team_tuner(LADDER, "b", tmp_path)
    result = _reclaimed_while_running(tuner.fit, log, flag)[0]
    assert result.error is None
    spans = rung_history(result)
    assert [s.rung for s in spans][-2:] == ["h100", "a100"], (spans, [
        (r[0]["rung"], r[0]["step"], r[-1]["step"]) for r in runs(read_steps(log))])


def test_a_train_run_of_b_moves_off_a_reclaimed_unit_at_its_checkpoint(
        cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")  # the controller's poll
    trainer, log, flag = team_trainer(LADDER, "b", tmp_path)
    result = _reclaimed_while_running(trainer.fit, log, flag)
    assert result.error is None
    assert result.ladder.path[-2:] == ["h100", "a100"]
    event = result.ladder.events[-1]
    assert event["cause"] == "preemption_notice" and "reclaim notice" in event["reason"]
