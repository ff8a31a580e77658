"""`ray-ladder status` finds a Tune run on a ladder and follows its trial through a node
kill (the example's trainable on a real LocalCluster)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import ray.cloudpickle
from ray import tune

from ray_ladder import Ladder
from ray_ladder.testing import wait_until
from ray_ladder.tune import Tuner, with_ladder

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_on_ladder.py"
SLOW = 180


def _load_example():
    spec = importlib.util.spec_from_file_location("train_on_ladder_status", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)  # workers cannot import examples/
    return module


ex = _load_example()
LADDER = Ladder.from_yaml(ex.LADDER_YAML)


def tune_entry(address: str) -> dict[str, Any] | None:
    proc = subprocess.run([sys.executable, "-m", "ray_ladder.cli", "status", "--json",
                           "--address", address], capture_output=True, text=True, timeout=60)
    if proc.returncode not in (0, 1):
        raise AssertionError(proc.stderr)
    users = [u for u in json.loads(proc.stdout)["ladders"] if u["part"] == "tune"]
    return users[0] if users else None


def test_status_shows_the_tune_run_and_its_trial_falling(local_cluster, tmp_path):
    cluster = local_cluster(ex.NODE_TYPES, head=ex.HEAD)
    flag = tmp_path / "stop"
    config = {"steps": 5000, "checkpoint_every": 4, "seed": 1, "step_time_s": 0.1}
    tuner = Tuner(with_ladder(ex.train_digits, LADDER), param_space=config,
                  run_config=tune.RunConfig(
                      storage_path=str(tmp_path / "results"), verbose=0,
                      stop=lambda trial_id, result: flag.exists(),
                      failure_config=tune.FailureConfig(max_failures=3)))
    fit = ex.FitThread(tuner)
    fit.start()
    try:
        entry = wait_until(lambda: (e := tune_entry(cluster.address))
                           and any(t["rung"] == "h100" and t["status"] == "RUNNING"
                                   for t in e["trials"]) and e, SLOW, 0.5,
                           "status shows the trial running on h100")
        assert (entry["ladder"], entry["source"], entry["current"]) == \
            ("train-ladder", "train-ladder", "h100")
        assert entry["degraded_s"] == 0.0 and len(entry["trials"]) == 1
        assert next(r for r in entry["rungs"] if r["name"] == "h100")["replicas"] == 1

        cluster.remove_node(cluster.nodes("h100")[0])  # SIGKILL: a preemption
        fell = wait_until(lambda: (e := tune_entry(cluster.address))
                          and e["trials"][0]["rung"] == "a100" and e["degraded_s"] > 0 and e,
                          SLOW, 0.5, "status shows the trial placed on a100")
        h100 = next(r for r in fell["rungs"] if r["name"] == "h100")
        assert (h100["obtainable"], h100["nodes"]) == (False, 0)
        moves = [(e["from"], e["to"]) for e in fell["last_transitions"]]
        assert moves[-1] == ("h100", "a100")
        assert fell["last_transitions"][-1]["source"].startswith("trial ")
    finally:
        flag.touch()
        fit.join_results(300)
