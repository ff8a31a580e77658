"""Inside a job that ``ray-ladder submit`` placed: where it runs, its last checkpoint, and
the checkpoint hook (``report``) at which it falls or climbs to another cluster.

The same two calls as Ray Train's (``ray.train.get_checkpoint``, ``ray.train.report``):

.. code-block:: python

    import ray_ladder.jobs as lj
    ckpt = lj.get_checkpoint()                # the run's last committed one, or None
    start = load(ckpt) if ckpt else 0
    for step in range(start, steps):
        ...
        if step % 10 == 0:
            lj.report({"step": step}, checkpoint=Checkpoint.from_directory(save(step)))

``report`` uploads the checkpoint to the run's shared storage and commits it
(``latest.json`` is the commit point). Then, if the runner asked this attempt to climb
(a better cluster rung has been obtainable for the hysteresis), it records that it
yielded at this checkpoint and exits the job (status 0): nothing runs past the committed
checkpoint. An attempt that is no longer the run's (another attempt took over after its
cluster was lost) exits at its next ``report`` without committing.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from ray_ladder.jobs.storage import RunStorage

#: The environment variable the runner sets on every attempt (a JSON object).
JOB_ENV = "RAY_LADDER_JOB"


@dataclass(frozen=True)
class JobPlace:
    """Where this attempt runs (``RAY_LADDER_JOB``, set by the runner).

    Attributes:
        run: The run's name (the same on every cluster and attempt).
        attempt: This attempt's number (1, 2, ...).
        rung: The rung it was placed on.
        cluster: The cluster that rung lives on.
        placement: Ray scheduling options of the rung (``resources``, ``num_gpus``...)
            for the job's own tasks and actors: ``Trainer.options(**place.placement)``.
        storage: The run storage's URI.
    """

    run: str
    attempt: int
    rung: str
    cluster: str
    placement: dict[str, Any]
    storage: str


def job_place() -> JobPlace | None:
    """This attempt's place, or ``None`` outside a job the runner submitted."""
    raw = os.environ.get(JOB_ENV)
    if not raw:
        return None
    value = json.loads(raw)
    return JobPlace(run=value["run"], attempt=int(value["attempt"]), rung=value["rung"],
                    cluster=value["cluster"], placement=dict(value.get("placement") or {}),
                    storage=value["storage"])


def _store(place: JobPlace) -> RunStorage:
    return RunStorage.open(place.storage, place.run)


def get_checkpoint() -> Any:
    """The run's last committed checkpoint as a ``ray.train.Checkpoint`` on local disk
    (downloaded from the run's storage), or ``None`` (a first start, or outside a run)."""
    place = job_place()
    if place is None:
        return None
    store = _store(place)
    latest = store.read("latest.json")
    if latest is None:
        return None
    from ray.train import Checkpoint

    local = tempfile.mkdtemp(prefix=f"ladder-{place.run}-")
    return Checkpoint.from_directory(store.download(latest["path"], local))


def report(metrics: dict[str, Any], checkpoint: Any = None) -> None:
    """Commit ``checkpoint`` (a ``ray.train.Checkpoint`` or a local directory) with
    ``metrics`` to the run's storage; then stop here if the runner asked this attempt to
    climb, or if another attempt owns the run. Outside a run it does nothing."""
    place = job_place()
    if place is None:
        return
    store = _store(place)
    owner = store.read("attempt.json") or {}
    if int(owner.get("attempt", place.attempt)) != place.attempt:
        print(f"ray-ladder: attempt {place.attempt} is no longer the run's (attempt "
              f"{owner.get('attempt')} is); stopping without committing", flush=True)
        sys.exit(0)
    if checkpoint is None:
        return
    local = checkpoint if isinstance(checkpoint, (str, os.PathLike)) \
        else checkpoint.to_directory()
    step = int(metrics.get("step", time.time_ns() // 1000))
    path = store.upload(str(local), step)
    store.write("latest.json", {"path": path, "step": step, "attempt": place.attempt,
                                "metrics": metrics, "time": time.time()})
    climb = store.read("climb.json")
    if climb is not None and int(climb.get("attempt", -1)) == place.attempt:
        store.write("yielded.json", {"attempt": place.attempt, "step": step,
                                     "to": climb.get("to")})
        print(f"ray-ladder: climbing to {climb.get('to')} at the committed checkpoint of "
              f"step {step}", flush=True)
        sys.exit(0)
