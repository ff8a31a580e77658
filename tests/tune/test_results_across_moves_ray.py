"""What a Tune user reads after a run (``Result.metrics_dataframe``, ``result.json``,
``progress.csv``) holds every step the trial reported, across every ladder move.

Tune's JSON logger copies the stored ``result.json`` (synced from the driver's copy every
10 s or more) over the driver's copy when a moved trial starts again: without the ladder
callback's store first, the results reported since the last sync were lost (issue 44).
Each move here follows a sync at once, so that without it at least the move's own
checkpoint result would be lost (it failed 3 of 3 runs so; 1 of 3 without that wait).
"""

from __future__ import annotations

import csv
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from ray import cloudpickle as ray_cloudpickle
from ray import tune

from ray_ladder import Ladder
from ray_ladder.cluster import ray_private
from ray_ladder.core.placement import PREEMPTION_NOTICE
from ray_ladder.testing import wait_until
from ray_ladder.tune import Tuner, rung_history, with_ladder

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

EVERY = 10  # a checkpoint every EVERY steps (0.1 s each), or when the node got a notice
LADDER = Ladder.from_yaml("""
name: results-across-moves
policy: {promotion_hysteresis: 2, probe_interval_s: 0.25}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}}
""")
NODES = {"h100": {"num_cpus": 1, "resources": {"ladder/h100": 1}},
         "a100": {"num_cpus": 1, "resources": {"ladder/a100": 1}}}

# The training function travels by value (tests/ is not importable on Ray's workers).
for _pickler in (cloudpickle, ray_cloudpickle):
    _pickler.register_pickle_by_value(sys.modules[__name__])


def train(config: dict[str, Any]) -> None:
    """Count steps of 0.1 s, log each where the test reads it, report each to Tune."""
    from ray_ladder.tune import current_rung, should_checkpoint

    step = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            step = json.loads(Path(d, "state.json").read_text())["step"]
    rung = current_rung().name
    while True:
        time.sleep(0.1)
        step += 1
        with open(config["log"], "a") as f:
            f.write(json.dumps({"step": step, "rung": rung, "time": time.time()}) + "\n")
        if step % EVERY == 0 or should_checkpoint():
            with tempfile.TemporaryDirectory() as d:
                Path(d, "state.json").write_text(json.dumps({"step": step}))
                tune.report({"step": step}, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            tune.report({"step": step})


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(NODES)


def _log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _steps_on(path: Path, rung: str, after: float = 0.0) -> int:
    return sum(e["rung"] == rung and e["time"] > after for e in _log(path))


def _synced(results: Path) -> int:
    """Lines of the trial's ``result.json`` at the storage path (Tune syncs the driver's
    copy there with the experiment state, every 10 s or more)."""
    return sum(len(p.read_text().splitlines()) for p in results.glob("*/*/result.json"))


def _after_a_sync(results: Path) -> None:
    """Return just after Tune synced the trial's results: a move that follows at once
    restarts the trial before the next sync (without the fix, its last results were lost)."""
    before = _synced(results)
    wait_until(lambda: _synced(results) > before, 120, 0.02, "Tune's next sync")


def test_what_users_read_holds_every_step_across_a_fall_and_a_climb(cluster, tmp_path):
    log, flag, results = tmp_path / "steps.jsonl", tmp_path / "stop", tmp_path / "results"
    stop = str(flag)
    tuner = Tuner(with_ladder(train, LADDER), param_space={"log": str(log)},
                  run_config=tune.RunConfig(
                      storage_path=str(results), verbose=0,
                      stop=lambda trial_id, result: os.path.exists(stop),
                      failure_config=tune.FailureConfig(max_failures=3)))
    out: dict = {}
    fit = threading.Thread(target=lambda: out.update(grid=tuner.fit()), daemon=True)
    fit.start()
    try:
        wait_until(lambda: _steps_on(log, "h100") >= 15, 120, 0.05, "steps on h100")
        node = cluster.nodes("h100")[0]
        _after_a_sync(results)
        notice_at = time.time()
        accepted, why = ray_private.drain_node(cluster.address, node.node_id, 120.0)
        assert accepted, why
        # Move 1: off the draining h100, at the checkpoint the notice asked for.
        wait_until(lambda: _steps_on(log, "a100", notice_at) >= 15, 120, 0.05,
                   "steps on a100 after the notice")
        cluster.remove_node(node)
        _after_a_sync(results)
        added_at = time.time()
        cluster.add_node("h100")
        # Move 2: back up to the new h100 at a checkpoint.
        wait_until(lambda: _steps_on(log, "h100", added_at) >= 15, 120, 0.05,
                   "steps on h100 after the climb")
    finally:
        flag.touch()
        fit.join(120)
    assert not fit.is_alive()
    result = out["grid"][0]
    assert result.error is None
    spans = rung_history(result)
    assert [s.rung for s in spans] == ["h100", "a100", "h100"]
    assert [s.ended_by for s in spans[:2]] == [PREEMPTION_NOTICE, "climbed to h100"]

    # Every step the trial ran, in order: both moves resumed at the step they left.
    reported = [e["step"] for e in _log(log)]
    assert reported == list(range(1, len(reported) + 1))
    # ... is what the user reads: the dataframe, result.json and progress.csv.
    assert list(result.metrics_dataframe["step"]) == reported
    stored = Path(result.path)
    assert [json.loads(line)["step"]
            for line in (stored / "result.json").read_text().splitlines()] == reported
    with open(stored / "progress.csv", newline="") as f:
        assert [int(row["step"]) for row in csv.DictReader(f)] == reported
