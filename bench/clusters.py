"""A job across two real Ray clusters (on-prem and cloud, each with its own head, job server
and GPU node) with checkpoints in a real S3 API server (moto) on loopback; against plain
``ray job submit`` of the same job.

Prints one JSON object on stdout (progress goes to stderr):

* ``loss_to_resumed_elsewhere_s``: SIGKILL of the on-prem GPU node until the job runs its
  next step on the cloud cluster (resumed from its last checkpoint in S3).
* ``steps_lost``: steps the on-prem attempt ran past the checkpoint the cloud attempt
  resumed from (redone); goal: <= the steps between two checkpoints (``every``).
* ``climb_home_at_checkpoint_s``: the re-added on-prem GPU node registered (``add_node``
  returned) until the job runs its next step on-prem again; ``climb_steps_lost`` (goal 0).
* ``overlap_s_running_in_both``: seconds during which both clusters' Job APIs showed one of
  the run's jobs RUNNING, or two of its driver processes were alive (goal 0).
* ``fall_breakdown_s``: the loss in parts: the node's loss seen and the old attempt told to
  stop; the old attempt over and the new one submitted; the new job's driver and worker
  started (Ray's own job start, compare ``plain.submit_to_first_step_s``).
* ``plain``: the same job with plain ``ray job submit`` (its worker on the GPU node) to the
  cloud cluster and the same node kill: seconds from submission to its first step, its
  status after the loss and when it ended, and ``loss_to_resumed_elsewhere_s`` ``null``
  (nothing resubmits it; a resubmission would start again from step 0).
* ``serving_*``: ``null`` here: serving across clusters is ``bench/clusters_serving.py``
  (both stages in one script would pass the 2-minute limit on this machine).

Usage: ``python bench/clusters.py`` (about 2 minutes here).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _json_out import json_stdout  # noqa: E402
from _machine import MachineProbe  # noqa: E402

from ray_ladder import load_ladder  # noqa: E402
from ray_ladder.jobs.runner import LadderJob, submission_id  # noqa: E402
from ray_ladder.jobs.sandbox import JobWatch, Site, s3_server, start_site  # noqa: E402
from ray_ladder.testing import wait_until  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "examples" / "checkpointed_job.py"
EVERY, STEP_S, TOTAL = 5, 0.1, 100_000
SLOW = 90.0


def log(message: str) -> None:
    print(f"[clusters] {message}", file=sys.stderr, flush=True)


def _ladder(onprem: Site, cloud: Site) -> Any:
    doc = load_ladder(ROOT / "examples" / "ladders" / "clusters.yaml").model_dump(
        mode="json", exclude_defaults=True)
    for name, site in (("onprem", onprem), ("cloud", cloud)):
        doc["clusters"][name]["address"] = site.address
        doc["clusters"][name].pop("serve", None)
        doc["clusters"][name]["poll_interval_s"] = 0.25
    from ray_ladder import Ladder

    return Ladder.from_dict(doc)


class Logs:
    """Polls the current attempt's log (Job API) and notes when each step line appears."""

    def __init__(self, job: LadderJob, sites: dict[str, Site]) -> None:
        self.job, self.sites = job, sites
        self.first_step_at: dict[int, tuple[float, int]] = {}  # attempt -> (time, start step)
        self.last_step: dict[int, int] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        from ray.job_submission import JobSubmissionClient

        while not self._stop.is_set():
            attempt = self.job.state.attempt
            rung = self.job.state.rung
            if attempt and rung:
                site = self.sites[self.job.ladder.rung(rung).cluster or ""]
                try:
                    text = JobSubmissionClient(site.address).get_job_logs(
                        submission_id(self.job.run_name, attempt))
                except Exception:
                    text = ""
                steps = [int(s) for s in re.findall(r"^step (\d+)$", text, re.M)]
                start = re.search(r"start attempt=\d+ rung=\S+ step=(\d+)", text)
                if steps and start and attempt not in self.first_step_at:
                    self.first_step_at[attempt] = (time.monotonic(), int(start.group(1)))
                if steps:
                    self.last_step[attempt] = max(steps)
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()


def ladder_story(storage: str, onprem: Site, cloud: Site) -> dict[str, Any]:
    env = {"env_vars": {"TOTAL": str(TOTAL), "EVERY": str(EVERY), "STEP_S": str(STEP_S)}}
    job = LadderJob(_ladder(onprem, cloud), f"{sys.executable} {JOB}", storage=storage,
                    run=f"bench-{int(time.time())}", runtime_env=env,
                    on_event=lambda e: log(e.message))
    watch = JobWatch([onprem, cloud], job.run_name, script=str(JOB), interval_s=0.2).start()
    logs = Logs(job, {"onprem": onprem, "cloud": cloud})
    runner = threading.Thread(target=lambda: _quiet_run(job), daemon=True)
    runner.start()
    try:
        # Between two checkpoints (not right after one), as a node is lost in real life.
        wait_until(lambda: 1 in logs.first_step_at
                   and logs.last_step.get(1, 0) >= 2 * EVERY + EVERY // 2 + 1,
                   SLOW, 0.02, "on-prem steps")
        killed = time.monotonic()
        onprem.kill_gpu()
        wait_until(lambda: 2 in logs.first_step_at, SLOW, 0.02, "a step in the cloud")
        resumed_at, resumed_from = logs.first_step_at[2]
        ran_to = _last_step(onprem, job.run_name, 1)  # its whole log, read afterwards
        wait_until(lambda: logs.last_step.get(2, 0) >= resumed_from + 2 * EVERY, SLOW, 0.05,
                   "cloud checkpoints")
        onprem.add_gpu()
        added = time.monotonic()
        wait_until(lambda: 3 in logs.first_step_at, SLOW, 0.02, "a step home again")
        home_at, home_from = logs.first_step_at[3]
        yielded = job.store.read("yielded.json") or {}
    finally:
        job.state = job.state.__class__(done="STOPPED")  # end the runner's loop
        runner.join(10)
        logs.stop()
        watch.stop()
        _stop_all(job, {"onprem": onprem, "cloud": cloud})
    stop = next(e.time for e in job.events if e.kind == "stop" and e.time > killed)
    moved = next(e.time for e in job.events if e.kind == "submit" and e.cause == "fall")
    return {
        "loss_to_resumed_elsewhere_s": round(resumed_at - killed, 2),
        "fall_breakdown_s": {"node_loss_seen_stop_sent": round(stop - killed, 2),
                             "old_attempt_stopped_new_submitted": round(moved - stop, 2),
                             "new_driver_and_worker_started": round(resumed_at - moved, 2)},
        "steps_lost": ran_to - resumed_from,
        "steps_between_checkpoints": EVERY,
        "climb_home_at_checkpoint_s": round(home_at - added, 2),
        "climb_steps_lost": int(yielded.get("step", home_from)) - home_from,
        "overlap_s_running_in_both": round(watch.overlap_s(), 3),
        "watch_samples": len(watch.samples),
    }


def _last_step(site: Site, run: str, attempt: int) -> int:
    from ray.job_submission import JobSubmissionClient

    text = JobSubmissionClient(site.address).get_job_logs(submission_id(run, attempt))
    return max([int(s) for s in re.findall(r"^step (\d+)$", text, re.M)] or [0])


def _quiet_run(job: LadderJob) -> None:
    try:
        job.run(poll_s=0.25)
    except Exception as err:  # the bench ends the loop itself
        log(f"runner ended: {err!r}")


def _stop_all(job: LadderJob, sites: dict[str, Site]) -> None:
    from ray.job_submission import JobSubmissionClient

    for attempt in range(1, job.state.attempt + 2):
        for site in sites.values():
            with contextlib.suppress(Exception):
                JobSubmissionClient(site.address).stop_job(submission_id(job.run_name, attempt))


def plain_story(site: Site) -> dict[str, Any]:
    """The same job, plain `ray job submit` style: no ladder, the same node kill."""
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(site.address)
    env = {"env_vars": {"TOTAL": str(TOTAL), "EVERY": str(EVERY), "STEP_S": str(STEP_S),
                        "PLACEMENT": json.dumps({"resources": {"ladder/gpu": 1}})}}
    submitted = time.monotonic()
    sid = client.submit_job(entrypoint=f"{sys.executable} {JOB}", runtime_env=env)
    wait_until(lambda: re.search(r"^step \d+$", client.get_job_logs(sid), re.M), SLOW, 0.02,
               "a plain step")
    first_step = round(time.monotonic() - submitted, 2)
    wait_until(lambda: len(re.findall(r"^step \d+$", client.get_job_logs(sid), re.M))
               >= 2 * EVERY, SLOW, 0.05, "plain steps")
    killed = time.monotonic()
    site.kill_gpu()

    def over() -> bool:
        return str(client.get_job_status(sid)).rsplit(".", 1)[-1] in (
            "FAILED", "SUCCEEDED", "STOPPED")

    try:
        wait_until(over, 30, 0.05, "the plain job to end")
        status = str(client.get_job_status(sid)).rsplit(".", 1)[-1]
        detected = round(time.monotonic() - killed, 2)
    except TimeoutError:
        status, detected = "RUNNING (still waiting for a GPU node after 30 s)", None
        client.stop_job(sid)
    steps = [int(s) for s in re.findall(r"^step (\d+)$", client.get_job_logs(sid), re.M)]
    return {"submit_to_first_step_s": first_step,
            "status_after_node_loss": status, "ended_after_s": detected,
            "loss_to_resumed_elsewhere_s": None, "steps_done_before_loss": max(steps or [0]),
            "steps_lost_if_resubmitted": max(steps or [0])}


def main() -> None:
    out = json_stdout()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    probe = MachineProbe()
    t0 = time.monotonic()
    with s3_server() as storage:
        onprem, cloud = start_site("onprem"), start_site("cloud")
        log(f"clusters up in {time.monotonic() - t0:.1f} s")
        try:
            ladder = ladder_story(storage, onprem, cloud)
            log(f"ladder story done at {time.monotonic() - t0:.1f} s")
            plain = plain_story(cloud)
        finally:
            onprem.shutdown()
            cloud.shutdown()
    result = {
        "bench": "clusters",
        "job": {"every": EVERY, "step_s": STEP_S},
        **ladder,
        "goals": {"steps_lost_le_every": ladder["steps_lost"] <= EVERY,
                  "overlap_zero": ladder["overlap_s_running_in_both"] == 0.0,
                  "climb_steps_lost_zero": ladder["climb_steps_lost"] == 0},
        "plain": plain,
        "serving_failed_requests": None,
        "serving_first_remote_answer_s": None,
        "wall_s": round(time.monotonic() - t0, 1),
        "machine": probe.report(),
    }
    print(json.dumps(result), file=out, flush=True)


if __name__ == "__main__":
    main()
