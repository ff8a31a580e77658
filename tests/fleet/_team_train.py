"""A Ray Train run of a fleet team for the fleet tests: the step function (the same step
log as the Tune one, ``ray_ladder.demo.teams.checkpoint``) and its trainer. Pickled by
value: Ray Train's workers cannot import the tests folder."""

from __future__ import annotations

import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import cloudpickle
from ray import cloudpickle as ray_cloudpickle

from ray_ladder.core.spec import Ladder
from ray_ladder.demo.teams.checkpoint import EVERY, log_step

for _pickler in (cloudpickle, ray_cloudpickle):
    _pickler.register_pickle_by_value(sys.modules[__name__])


def train_fn(config: dict[str, Any]) -> None:
    """The same steps in a Ray Train worker: a checkpoint every ``EVERY`` steps through
    ``ray_ladder.train.report``; runs until the file ``config["stop"]`` exists."""
    import os

    import ray.train

    import ray_ladder.train as lt

    run, step = uuid.uuid4().hex, 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            step = json.loads(Path(d, "state.json").read_text())["step"]
    resumed_from, rung = step, lt.current_rung().name
    while not os.path.exists(config["stop"]):
        time.sleep(0.1)
        step += 1
        log_step(config["log"], run, step, rung, resumed_from)
        if step % EVERY == 0:
            with tempfile.TemporaryDirectory() as d:
                Path(d, "state.json").write_text(json.dumps({"step": step}))
                lt.report({"step": step}, checkpoint=ray.train.Checkpoint.from_directory(d))


def team_trainer(ladder: Ladder, team: str, folder: Path) -> tuple[Any, Path, Path]:
    """A ``LadderTrainer`` of :func:`train_fn` bound to ``team``, its step log
    (``folder/steps.jsonl``) and its stop file (``folder/stop``): touch it to end the run.
    Set ``RAY_TRAIN_HEALTH_CHECK_INTERVAL_S`` low first for a prompt move."""
    from ray.train.v2.api.config import FailureConfig, RunConfig

    from ray_ladder.train import LadderTrainer

    log, flag = folder / "steps.jsonl", folder / "stop"
    trainer = LadderTrainer(
        train_fn, ladder=ladder, team=team,
        train_loop_config={"log": str(log), "stop": str(flag)},
        run_config=RunConfig(name=f"team-{folder.name}", storage_path=str(folder / "r"),
                             failure_config=FailureConfig(max_failures=1)))
    return trainer, log, flag


def team_tuner(ladder: Ladder, team: str, folder: Path) -> tuple[Any, Path, Path]:
    """A ``Tuner`` of one trial of the teams demo's checkpointing ``tune_fn`` on ``ladder``
    bound to ``team``, its step log (``folder/steps.jsonl``) and its stop file
    (``folder/stop``): touch it to end the run."""
    import os

    from ray import tune

    from ray_ladder.demo.teams.checkpoint import tune_fn
    from ray_ladder.tune import Tuner, with_ladder

    log, flag = folder / "steps.jsonl", folder / "stop"
    stop = str(flag)
    tuner = Tuner(with_ladder(tune_fn, ladder, team=team), param_space={"log": str(log)},
                  run_config=tune.RunConfig(
                      storage_path=str(folder / "results"), verbose=0,
                      stop=lambda trial_id, result: os.path.exists(stop),
                      failure_config=tune.FailureConfig(max_failures=3)))
    return tuner, log, flag
