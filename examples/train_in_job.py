"""A Ray Train run on its own ladder of worker-group shapes, inside a job that `ray-ladder
submit` places on a cluster rung: the group falls within the cluster (gpu -> cpu) when its
GPU node goes, from its last checkpoint in S3, and the job itself stays where it is
(docs/clusters.md, "Ray Train and Tune inside such a job").

    ray-ladder submit LADDER.yaml --storage 's3://ckpt/runs?endpoint_override=...' \
        -- python examples/train_in_job.py

Environment: ``TRAIN_S3`` the S3 endpoint (``host:port``, http) and ``TRAIN_BUCKET`` the
bucket Train keeps its checkpoints in; ``STEPS`` (40), ``STEP_S`` (0.2); ``STEP_LOG`` (a
file on this machine: one line per step with its rung, for a watcher).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")  # before ray.train is imported
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")

import pyarrow.fs as pafs  # noqa: E402
import ray  # noqa: E402

from ray_ladder import Ladder  # noqa: E402

LADDER = Ladder.from_yaml("""
name: train-in-job
policy: {probe_interval_s: 0.25, promotion_hysteresis: 2}
rungs:
  - {name: gpu, resources: {ladder/gpu: 1}, train: {workers: 1}}
  - {name: cpu, num_cpus: 1, quality: 0.5, train: {workers: 1}}
""")


def loop(config: dict[str, Any]) -> None:
    """Count steps from the last checkpoint, one checkpoint a step, logging each step's rung."""
    import ray.train

    import ray_ladder.train as lt

    step = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d, open(os.path.join(d, "state.json")) as f:
            step = json.load(f)["step"]
    rung = lt.current_rung().name
    while step < config["steps"]:
        time.sleep(config["step_s"])
        step += 1
        if config["log"]:
            with open(config["log"], "a") as f:
                f.write(json.dumps({"step": step, "rung": rung}) + "\n")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            lt.report({"step": step, "rung": rung},
                      checkpoint=ray.train.Checkpoint.from_directory(d))


def main() -> None:
    from ray.train.v2.api.config import FailureConfig, RunConfig

    from ray_ladder.train import LadderTrainer

    ray.init()  # in a job, RAY_ADDRESS names the cluster it runs on
    s3 = pafs.S3FileSystem(endpoint_override=os.environ["TRAIN_S3"], scheme="http",
                           region="us-east-1")
    steps = int(os.environ.get("STEPS", "40"))
    trainer = LadderTrainer(
        loop, ladder=LADDER,
        train_loop_config={"steps": steps, "step_s": float(os.environ.get("STEP_S", "0.2")),
                           "log": os.environ.get("STEP_LOG", "")},
        run_config=RunConfig(name="train-in-job",
                             storage_path=f"{os.environ['TRAIN_BUCKET']}/train",
                             storage_filesystem=s3,
                             failure_config=FailureConfig(max_failures=3)))
    result = trainer.fit()
    path = [span.rung for span in result.ladder.spans]
    print(f"train done: step={result.metrics['step']} path={path}", flush=True)
    if result.error is not None or result.metrics["step"] != steps:
        raise SystemExit(f"the run did not finish: {result.error}")


if __name__ == "__main__":
    main()
