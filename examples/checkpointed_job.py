"""A job that `ray-ladder submit` can move between clusters: it resumes from the run's last
committed checkpoint, runs its steps on the rung it was placed on, and checkpoints through
``ray_ladder.jobs.report`` (where it stops when asked to climb home).

    ray-ladder submit examples/ladders/clusters.yaml \
        --storage 's3://ckpt/runs?endpoint_override=10.0.0.9:9000&scheme=http' \
        -- python examples/checkpointed_job.py

Environment: ``TOTAL`` steps (150), ``EVERY`` steps between checkpoints (3), ``STEP_S``
seconds per step (0.2), ``DONE_FILE`` (a path: once it exists the job ends at its next
checkpoint, done); outside a run, ``PLACEMENT``: the Ray options of its worker (JSON).
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import ray

import ray_ladder.jobs as lj

TOTAL = int(os.environ.get("TOTAL", "150"))
EVERY = int(os.environ.get("EVERY", "3"))
STEP_S = float(os.environ.get("STEP_S", "0.2"))
DONE_FILE = os.environ.get("DONE_FILE")


@ray.remote
class Stepper:
    """The work: one step at a time on the rung's node (its GPU in real life)."""

    def step(self, n: int) -> int:
        time.sleep(STEP_S)
        return n + 1


def main() -> None:
    ray.init()  # in a job, RAY_ADDRESS names the cluster it runs on
    place = lj.job_place()  # None outside a run; .run .attempt .rung .cluster .storage
    # Outside a run (plain `ray job submit`), PLACEMENT (JSON) says where the work goes.
    placement = place.placement if place else json.loads(os.environ.get("PLACEMENT", "{}"))
    ckpt = lj.get_checkpoint()  # the run's last committed one (downloaded), or None
    step = 0
    if ckpt is not None:
        with open(os.path.join(ckpt.path, "state.json")) as f:
            step = json.load(f)["step"]
    where = f"attempt={place.attempt} rung={place.rung}" if place else "outside a run"
    print(f"start {where} step={step}", flush=True)
    worker = Stepper.options(**placement).remote()  # the rung's resources / num_gpus ...
    while step < TOTAL:
        step = ray.get(worker.step.remote(step))
        print(f"step {step}", flush=True)
        if step % EVERY == 0:
            state = tempfile.mkdtemp()
            with open(os.path.join(state, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            lj.report({"step": step}, checkpoint=state)  # a local dir or a ray.train.Checkpoint
            if DONE_FILE and os.path.exists(DONE_FILE):
                break
    print(f"done at step {step}", flush=True)


if __name__ == "__main__":
    main()
