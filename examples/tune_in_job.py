"""A Ray Tune run on its own ladder, inside a job that `ray-ladder submit` places on a
cluster rung: the trial falls within the cluster (gpu -> cpu) when its GPU node goes, from
its last checkpoint in S3, and the job itself stays where it is (docs/clusters.md, "Tune
and Train inside a job").

    ray-ladder submit LADDER.yaml --storage 's3://ckpt/runs?endpoint_override=...' \
        -- python examples/tune_in_job.py

Environment: ``TUNE_S3`` the S3 endpoint (``host:port``, http) and ``TUNE_BUCKET`` the
bucket Tune keeps its checkpoints in; ``STEPS`` (40), ``STEP_S`` (0.2); ``STEP_LOG`` (a
file on this machine: one line per step with its rung, for a watcher).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

import pyarrow.fs as pafs
import ray
from ray import tune

from ray_ladder import Ladder
from ray_ladder.tune import Tuner, current_rung, rung_history, with_ladder

LADDER = Ladder.from_yaml("""
name: tune-in-job
policy: {probe_interval_s: 0.25, promotion_hysteresis: 2}
rungs:
  - {name: gpu, resources: {ladder/gpu: 1}}
  - {name: cpu, num_cpus: 1, quality: 0.5}
""")


def train(config: dict[str, Any]) -> None:
    """Count steps from the last checkpoint, one checkpoint a step, logging each step's rung."""
    step = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d, open(os.path.join(d, "state.json")) as f:
            step = json.load(f)["step"]
    rung = current_rung().name
    while step < config["steps"]:
        time.sleep(config["step_s"])
        step += 1
        if config["log"]:
            with open(config["log"], "a") as f:
                f.write(json.dumps({"step": step, "rung": rung}) + "\n")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            tune.report({"step": step, "rung": rung}, checkpoint=tune.Checkpoint.from_directory(d))


def main() -> None:
    ray.init()  # in a job, RAY_ADDRESS names the cluster it runs on
    s3 = pafs.S3FileSystem(endpoint_override=os.environ["TUNE_S3"], scheme="http",
                           region="us-east-1")
    tuner = Tuner(with_ladder(train, LADDER),
                  param_space={"steps": int(os.environ.get("STEPS", "40")),
                               "step_s": float(os.environ.get("STEP_S", "0.2")),
                               "log": os.environ.get("STEP_LOG", "")},
                  run_config=tune.RunConfig(
                      name="tune-in-job", storage_path=f"{os.environ['TUNE_BUCKET']}/tune",
                      storage_filesystem=s3, verbose=0,
                      failure_config=tune.FailureConfig(max_failures=3)))
    result = tuner.fit()[0]
    path = [span.rung for span in rung_history(result)]
    print(f"tune done: step={result.metrics['step']} path={path}", flush=True)
    if result.error is not None or result.metrics["step"] != int(os.environ.get("STEPS", "40")):
        raise SystemExit(f"the trial did not finish: {result.error}")


if __name__ == "__main__":
    main()
