"""docs/jobs.md's recipe, run: a ``@ladder_task`` driver submitted with Ray's Job Submission
API (working_dir + py_modules) to a local cluster answers from the rung that can run it."""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

import ray_ladder
from ray_ladder.testing import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

SLOW = 300  # a job starts a supervisor, uploads two packages and a driver: generous
# docs/jobs.md's project directory, as the page shows it (tests/test_docs_snippets.py holds
# the page's driver block to this driver.py, character for character).
MY_BATCH = Path(__file__).resolve().parents[2] / "examples" / "my-batch"


@pytest.fixture(scope="module")
def cluster(local_cluster):
    # No h100 node: the ladder's best rung is unobtainable, the a100 rung answers. One
    # node only: nodes of a LocalCluster share one session directory, and a second
    # node's runtime-env agent can unpack the job's working_dir again in the same place,
    # which deletes the directory the driver runs in (not a thing on a real cluster).
    jobs = local_cluster({}, head={"num_cpus": 2, "resources": {"ladder/a100": 1}},
                         connect=False, include_dashboard=True)
    # Another Ray cluster started on the machine afterwards (another test, the demo):
    # it names itself in /tmp/ray/ray_current_cluster, where Ray's job supervisor looks
    # for the cluster to start a driver on. The job must still run on its own cluster
    # (here it would answer from the cpu rung: 'tiny').
    local_cluster({}, head={"num_cpus": 1}, connect=False)
    return jobs


def test_a_ladder_task_driver_submitted_as_a_job_answers_from_the_a100_rung(
        cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from ray.job_submission import JobStatus, JobSubmissionClient

    work = tmp_path / "my-batch"
    shutil.copytree(MY_BATCH, work, ignore=shutil.ignore_patterns("__pycache__"))
    url = cluster._cluster.head_node.address_info["webui_url"]  # the dashboard's host:port
    url = url if "://" in url else f"http://{url}"
    # As a user points `ray job submit` at a cluster (RAY_ADDRESS overrides the client's
    # address argument; the other cluster pinned it to its own GCS).
    monkeypatch.setenv("RAY_ADDRESS", url)
    client = JobSubmissionClient(url)
    runtime_env = {"working_dir": str(work),
                   # The package travels with the job, as on a cluster without it.
                   "py_modules": [str(Path(ray_ladder.__file__).parent)]}
    done = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}
    job = _submit(client, runtime_env)
    wait_until(lambda: client.get_job_status(job) in done, SLOW, 0.5, "the job to finish")
    logs = client.get_job_logs(job)
    assert client.get_job_status(job) == JobStatus.SUCCEEDED, logs
    assert "answers ['medium:a', 'medium:b'] rungs ['a100', 'a100']" in logs, logs


def _submit(client: Any, runtime_env: dict[str, Any]) -> str:
    submitted: list[str] = []

    def submit() -> bool:
        try:
            # `python driver.py` on a cluster; here the tests' own interpreter (the venv).
            submitted.append(client.submit_job(
                entrypoint=f"{shlex.quote(sys.executable)} driver.py",
                runtime_env=runtime_env))
        except RuntimeError as err:  # the head's job agent registers after the dashboard
            if "No available agent" not in str(err):
                raise
        return bool(submitted)

    wait_until(submit, SLOW, 1.0, "the cluster's job agent to take the job")
    return submitted[0]
