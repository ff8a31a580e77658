"""A Tune trial on a draining rung checkpoints when asked and moves before the kill."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import preemption_notice  # bench/ (this folder's conftest.py puts it on the path)
import pytest
from preemption_notice import train  # steps of 0.1 s, a checkpoint every EVERY (25) or on notice
from ray import cloudpickle as ray_cloudpickle
from ray import tune

from ray_ladder import Ladder
from ray_ladder.cluster import ray_private
from ray_ladder.core.placement import PREEMPTION_NOTICE
from ray_ladder.testing import wait_until
from ray_ladder.tune import Tuner, rung_history, with_ladder

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]

DEADLINE_S = 8.0
LADDER = Ladder.from_yaml("""
name: notice-tune
policy: {promotion_hysteresis: 2, probe_interval_s: 0.25}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}}
""")
NODES = {"h100": {"num_cpus": 1, "resources": {"ladder/h100": 1}},
         "a100": {"num_cpus": 1, "resources": {"ladder/a100": 1}}}


cloudpickle.register_pickle_by_value(sys.modules[__name__])
# The bench's training function (Tune workers cannot import bench/ modules by name).
for _pickler in (cloudpickle, ray_cloudpickle):
    _pickler.register_pickle_by_value(preemption_notice)


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def test_a_trial_that_honours_should_checkpoint_loses_no_step(local_cluster, tmp_path):
    cluster = local_cluster(NODES)
    log, flag = tmp_path / "steps.jsonl", tmp_path / "stop"
    stop = str(flag)
    tuner = Tuner(with_ladder(train, LADDER), param_space={"log": str(log), "honour": True},
                  run_config=tune.RunConfig(
                      storage_path=str(tmp_path / "results"), verbose=0,
                      stop=lambda trial_id, result: os.path.exists(stop),
                      failure_config=tune.FailureConfig(max_failures=3)))
    out: dict = {}
    fit = threading.Thread(target=lambda: out.update(grid=tuner.fit()), daemon=True)
    fit.start()
    try:
        wait_until(lambda: sum(e["rung"] == "h100" for e in _read(log)) >= 5, 90, 0.05,
                   "steps on h100")
        node = cluster.nodes("h100")[0]
        t0, notice_at = time.monotonic(), time.time()
        accepted, why = ray_private.drain_node(cluster.address, node.node_id, DEADLINE_S)
        assert accepted, why
        wait_until(lambda: time.monotonic() >= t0 + DEADLINE_S, DEADLINE_S + 1, 0.02)
        cluster.remove_node(node)  # SIGKILL at the deadline
        killed_at = time.time()
        # How soon Tune starts the trial's new actor is the machine's (over 8 s beside
        # another Ray workload): the move itself is asserted below, before the kill.
        first = wait_until(lambda: next((e for e in _read(log) if e["rung"] == "a100"), None),
                           60, 0.05, "the trial resumed on a100")
        wait_until(lambda: sum(e["rung"] == "a100" and e["time"] > killed_at
                               for e in _read(log)) >= 3, 60, 0.05, "steps on a100 after it")
    finally:
        flag.touch()
        fit.join(120)
    assert not fit.is_alive()
    entries = _read(log)
    last_top = max(e["step"] for e in entries if e["rung"] == "h100")
    print(f"notice -> first a100 step {first['time'] - notice_at:.2f} s; last h100 step "
          f"{last_top}, resumed from {first['resumed_from']}")
    assert first["resumed_from"] == last_top, "steps lost at the kill"
    at = next(e for e in entries if e["rung"] == "h100" and e["step"] == last_top)
    # checkpointed on the notice (not at an older interval), before the kill
    assert notice_at < at["time"] < killed_at
    result = out["grid"][0]
    assert result.error is None
    spans = rung_history(result)
    assert [s.rung for s in spans] == ["h100", "a100"]
    # the ladder moved it off h100 at that checkpoint, before the kill (not "node lost")
    assert spans[0].ended_by == PREEMPTION_NOTICE
    assert spans[0].end is not None and spans[0].end < killed_at
