"""Tune on a ladder, on a real local cluster: a killed node, a resume lower, a climb back."""

from __future__ import annotations

import importlib.util
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import ray.cloudpickle
from ray import tune

from ray_ladder import Ladder
from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.testing import wait_until
from ray_ladder.tune import Tuner, rung_history, with_ladder
from ray_ladder.tune.quiet import TUNE_CONTROLLER_LOGGER

pytestmark = pytest.mark.ray

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_on_ladder.py"


def _load_example():
    # The example's model is what users read; its training function travels by value
    # (the examples folder is not importable on Ray's workers).
    spec = importlib.util.spec_from_file_location("train_on_ladder", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)
    return module


ex = _load_example()
LADDER = Ladder.from_yaml(ex.LADDER_YAML)


@pytest.fixture(scope="module")
def cluster(local_cluster):
    return local_cluster(ex.NODE_TYPES, head=ex.HEAD)


@pytest.fixture
def nodes_back(cluster):
    """Each test starts on an idle cluster; whatever it kills is back for the next one."""
    view = CapacityView(with_ladder(ex.train_digits, LADDER)._ladder_spec.trial_ladder,
                        require_available=True)
    wait_until(lambda: all(c.state == "free" for c in view.refresh().rungs.values()), 60, 0.1,
               "every rung free")
    yield cluster
    for node_type in ex.NODE_TYPES:
        if not cluster.nodes(node_type):
            cluster.add_node(node_type)
    _wait_rungs({"h100": 1, "a100": 1})


def _wait_rungs(totals: dict[str, int]) -> None:
    view = CapacityView(LADDER)
    wait_until(lambda: all(view.refresh().rungs[r].total == n for r, n in totals.items()),
               60, 0.1, f"rung totals {totals}")


class Records(logging.Handler):
    """Every record Tune's controller logs while a run lasts."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _tuner(trainable, tmp_path: Path, stop=None, **config) -> Tuner:
    return Tuner(
        trainable,
        param_space=config,
        run_config=tune.RunConfig(storage_path=str(tmp_path / "results"), verbose=0, stop=stop,
                                  failure_config=tune.FailureConfig(max_failures=3)),
    )


def _stop_when_exists(flag: str):
    # Tune calls this in the driver for every result; a file keeps it picklable.
    return lambda trial_id, result: Path(flag).exists()


def test_killed_node_resumes_lower_and_climbs_back_at_a_checkpoint(nodes_back, tmp_path):
    cluster = nodes_back
    every = 4
    log = ex.StepLog(tmp_path / "steps.jsonl")
    flag = tmp_path / "stop"
    # Enough steps to outlast any node start on a loaded machine; the test ends the run
    # (Tune stopper) once the trial has climbed back and checkpointed on h100.
    config = {"steps": 2000, "checkpoint_every": every, "seed": 3, "lr": 0.5,
              "step_time_s": 0.1, "step_log": str(log.path)}
    fit = ex.FitThread(_tuner(with_ladder(ex.train_digits, LADDER), tmp_path,
                              stop=_stop_when_exists(str(flag)), **config))
    said = Records()
    logging.getLogger(TUNE_CONTROLLER_LOGGER).addHandler(said)
    fit.start()
    try:
        log.wait(lambda es: any(e["rung"] == "h100" and e["step"] >= 10 for e in es), 180,
                 "10 steps on h100")
        killed_at = time.time()
        cluster.remove_node(cluster.nodes("h100")[0])  # SIGKILL: a preemption
        low = log.wait(ex.first_step_on("a100", killed_at), 180, "a step on a100 after kill")
        log.wait(lambda es: sum(e["rung"] == "a100" for e in es) >= 8, 180, "8 a100 steps")
        added_at = time.time()
        cluster.add_node("h100")
        back = log.wait(ex.first_step_on("h100", added_at), 180, "a step on h100 after add")
        log.wait(lambda es: es[-1]["rung"] == "h100" and es[-1]["step"] >= back["step"] + every,
                 120, "a checkpoint on h100 after the climb")
    finally:
        flag.touch()
        result = fit.join_results(300)[0]
        logging.getLogger(TUNE_CONTROLLER_LOGGER).removeHandler(said)

    # The preemption the ladder recovered from is one INFO line, not Ray's traceback
    # at ERROR (before: "Trial task failed for trial ..." and the ActorDiedError).
    assert not [r for r in said.records if r.levelno >= logging.ERROR], said.records
    assert any("lost its node on rung h100" in r.getMessage() for r in said.records)
    entries = log.read()
    # The killed process may log a step while SIGKILL lands: count h100 steps up to the resume.
    last_top = max(e["step"] for e in entries if e["rung"] == "h100" and e["time"] < low["time"])
    # Resumed from a checkpoint, not from scratch, losing at most one checkpoint interval.
    assert low["resumed_from"] % every == 0 and low["resumed_from"] > 0
    assert low["step"] == low["resumed_from"] + 1
    assert last_top - low["resumed_from"] <= every
    # Moved up at a checkpoint boundary: the climb lost no step at all.
    on_a100 = [e["step"] for e in entries if e["rung"] == "a100"]
    assert back["resumed_from"] == max(on_a100) and back["resumed_from"] % every == 0

    assert result.error is None and result.metrics["ladder"]["rung"] == "h100"
    spans = rung_history(result)
    assert [s.rung for s in spans] == ["h100", "a100", "h100"]
    assert [s.ended_by for s in spans] == ["node lost", "climbed to h100", "completed"]
    assert all(s.end is not None and s.end >= s.start for s in spans)
    assert spans[0].end <= spans[1].start and spans[1].end <= spans[2].start
    block = result.metrics["ladder"]
    assert set(block["per_rung"]) == {"h100", "a100"} and block["moves"] == 2
    for rung, totals in block["per_rung"].items():
        cost = LADDER.rung(rung).cost_per_hour
        assert totals["cost"] == pytest.approx(totals["seconds"] * cost / 3600)

    # Deterministic training: the same model as an uninterrupted run of as many steps.
    with result.checkpoint.as_directory() as d:
        model = ex.load_model(d)
    assert model["step"] > back["step"]
    reference = ex.train_reference({**config, "steps": model["step"]})
    assert np.array_equal(model["w"], reference["w"])
    assert np.array_equal(model["b"], reference["b"])


def test_eu_trial_never_runs_on_the_us_rung(nodes_back, tmp_path):
    cluster = nodes_back
    cluster.remove_node(cluster.nodes("h100")[0])
    _wait_rungs({"h100": 0})  # the only EU accelerator is gone; the US a100 is free
    log = ex.StepLog(tmp_path / "steps.jsonl")
    trainable = with_ladder(ex.train_digits, LADDER, {"jurisdiction": "eu"})
    result = _tuner(trainable, tmp_path, steps=8, checkpoint_every=4, step_time_s=0.05,
                    step_log=str(log.path)).fit()[0]
    assert result.error is None
    assert {e["rung"] for e in log.read()} == {"cpu"}
    assert [s.rung for s in rung_history(result)] == ["cpu"]

    # Plain tune.Tuner, no LadderScheduler: the trial still starts on the best rung free.
    plain = tune.Tuner(with_ladder(ex.train_digits, LADDER), param_space={"steps": 4},
                       run_config=tune.RunConfig(storage_path=str(tmp_path / "plain"),
                                                 verbose=0)).fit()[0]
    assert plain.error is None and plain.metrics["ladder"]["rung"] == "a100"


def test_concurrent_trials_spread_over_free_rungs(nodes_back, tmp_path):
    log = ex.StepLog(tmp_path / "steps.jsonl")
    trainable = with_ladder(ex.train_digits, LADDER)
    grid = _tuner(trainable, tmp_path, steps=6, checkpoint_every=3, step_time_s=0.2,
                  seed=tune.grid_search([1, 2]), step_log=str(log.path)).fit()
    assert not grid.errors
    # Two trials, one h100: the second goes to the a100 instead of queueing for the h100.
    assert sorted(rung_history(r)[0].rung for r in grid) == ["a100", "h100"]
