"""The runner over fakes of what cannot be two real clusters cheaply here: each cluster's
state API reply and Job Submission client (the seams RemoteCluster.get and .jobs())."""

from __future__ import annotations

from typing import Any

import pytest

from ray_ladder import Ladder
from ray_ladder.jobs.runner import LadderJob, submission_id

LADDER = Ladder.from_yaml("""
name: train
policy: {promotion_hysteresis: 1}
clusters:
  onprem: {address: "http://onprem:8265", site: onprem, lost_after_s: 5}
  cloud: {address: "http://cloud:8265", site: cloud, lost_after_s: 5}
rungs:
  - {name: onprem-gpu, cluster: onprem, resources: {ladder/gpu: 1}}
  - {name: cloud-gpu, cluster: cloud, resources: {ladder/gpu: 1}}
""")


def nodes(gpu: bool) -> dict[str, Any]:
    row = {"node_id": "n", "state": "ALIVE", "resources_total": {"ladder/gpu": 1.0} if gpu
           else {"CPU": 1.0}, "labels": {}}
    return {"data": {"result": {"result": [row]}}}


class FakeJobs:
    """A Job Submission client: jobs by submission id; ``forget`` drops them all."""

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}

    def submit_job(self, *, entrypoint: str, submission_id: str, **_: Any) -> str:
        assert submission_id not in self.jobs, "submitted twice"
        self.jobs[submission_id] = "RUNNING"
        return submission_id

    def get_job_status(self, sid: str) -> str:
        if sid not in self.jobs:
            raise RuntimeError(f"Job {sid} does not exist")
        return self.jobs[sid]

    def stop_job(self, sid: str) -> bool:
        self.jobs[sid] = "STOPPED"
        return True

    def get_job_logs(self, sid: str) -> str:
        return ""


@pytest.fixture
def world(tmp_path):
    clock = [0.0]
    gpus = {"onprem": True, "cloud": True}
    jobs = {"onprem": FakeJobs(), "cloud": FakeJobs()}

    def make(run: str = "r") -> LadderJob:
        job = LadderJob(LADDER, "python train.py", storage=str(tmp_path), run=run,
                        clock=lambda: clock[0])
        for name, cluster in job.clusters.items():
            cluster.get = lambda url, name=name: nodes(gpus[name])
            cluster.make_client = lambda address, name=name: jobs[name]
        return job

    return make, clock, gpus, jobs


def test_a_cluster_that_answers_but_forgot_the_job_counts_it_lost(world):
    make, clock, gpus, jobs = world
    job = make()
    job.step()
    assert jobs["onprem"].jobs == {submission_id("r", 1): "RUNNING"}
    jobs["onprem"].jobs.clear()  # the head restarted within lost_after_s, without its jobs
    clock[0] = 1.0
    job.step()
    assert job.state.attempt == 2 and job.state.rung == "onprem-gpu"
    assert [e.cause for e in job.events if e.kind == "submit"] == ["start", "lost"]


def test_a_restarted_runner_keeps_the_climb_it_asked_for(world):
    make, clock, gpus, jobs = world
    gpus["onprem"] = False
    job = make()
    job.step()  # attempt 1 in the cloud
    gpus["onprem"] = True
    clock[0] = 1.0
    job.step()  # hysteresis 1: asks attempt 1 to climb
    assert job.store.read("climb.json") == {"attempt": 1, "to": "onprem-gpu"}
    job.store.write("yielded.json", {"attempt": 1, "step": 9, "to": "onprem-gpu"})
    jobs["cloud"].jobs[submission_id("r", 1)] = "SUCCEEDED"  # it stopped at its checkpoint
    again = make()  # the runner restarted before placing the climb
    clock[0] = 2.0
    again.step()
    assert again.state.done is None  # not taken for the job's end
    assert again.state.rung == "onprem-gpu" and again.state.attempt == 2
    assert submission_id("r", 2) in jobs["onprem"].jobs


def test_each_cluster_is_read_at_its_own_poll_interval(tmp_path):
    ladder = Ladder.from_dict({**LADDER.model_dump(mode="json"), "clusters": {
        "onprem": {"address": "http://onprem:8265", "poll_interval_s": 0.5},
        "cloud": {"address": "http://cloud:8265", "poll_interval_s": 2.0}}})
    clock, reads = [0.0], {"onprem": 0, "cloud": 0}
    job = LadderJob(ladder, "python train.py", storage=str(tmp_path), run="p",
                    clock=lambda: clock[0])
    for name, cluster in job.clusters.items():
        def get(url: str, name: str = name) -> dict[str, Any]:
            reads[name] += 1
            return nodes(True)
        cluster.get = get
        cluster.make_client = lambda address: FakeJobs()
    for tick in range(8):  # 4 s in steps of 0.5 s
        clock[0] = tick * 0.5
        job.step()
    assert reads == {"onprem": 8, "cloud": 2}
