"""A job across two real Ray clusters on this machine (an on-prem one and a cloud one, each
with its own head, dashboard, job server and GPU node) with its checkpoints in a real S3
API server (moto) on loopback, driven by `ray-ladder submit` as a user runs it.

The story: the job starts on-prem; the on-prem GPU node is SIGKILLed and the job resumes
on the cloud cluster from its last checkpoint; the node comes back and the job climbs home
at a checkpoint; the on-prem head is SIGKILLed and the job resumes in the cloud again and
finishes there. Both clusters' job tables are polled throughout: the run never has a job
RUNNING in both. A job whose data stays on-prem never starts in the cloud.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ray_ladder import load_ladder
from ray_ladder.jobs.runner import LadderJob
from ray_ladder.jobs.sandbox import JobWatch, s3_server, start_site
from ray_ladder.jobs.storage import RunStorage
from ray_ladder.testing import wait_until

pytest.importorskip("moto.server", reason="needs moto[server] (the test extras)")
pytestmark = [pytest.mark.ray, pytest.mark.long, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "checkpointed_job.py"
TUNE_JOB = ROOT / "examples" / "tune_in_job.py"
TRAIN_JOB = ROOT / "examples" / "train_in_job.py"
EVERY = 3
SLOW = 180  # a job's start (supervisor actor, driver) and a node's start on a loaded box


def ladder_for(onprem: str, cloud: str, **extra: Any) -> dict[str, Any]:
    """The example ladder with this machine's two clusters' addresses."""
    doc = load_ladder(ROOT / "examples" / "ladders" / "clusters.yaml").model_dump(
        mode="json", exclude_defaults=True)
    doc["clusters"]["onprem"]["address"] = onprem
    doc["clusters"]["cloud"]["address"] = cloud
    for name in ("onprem", "cloud"):
        doc["clusters"][name].pop("serve", None)
    return {**doc, **extra}


@pytest.fixture(scope="module")
def stage() -> Any:
    with s3_server() as storage:
        onprem = start_site("onprem")
        cloud = start_site("cloud")
        try:
            yield SimpleNamespace(storage=storage, onprem=onprem, cloud=cloud)
        finally:
            onprem.shutdown()
            cloud.shutdown()


def test_a_job_whose_data_stays_on_prem_waits_and_says_why(stage: Any) -> None:
    doc = ladder_for(stage.onprem.address, stage.cloud.address,
                     data={"region": "onprem", "stays": ["onprem"]})
    doc["rungs"][0]["resources"] = {"ladder/h100": 1}  # no on-prem node has one
    from ray_ladder import Ladder

    job = LadderJob(Ladder.from_dict(doc), f"{sys.executable} {JOB}", storage=stage.storage,
                    run="stays")
    watch = JobWatch([stage.onprem, stage.cloud], "stays")
    for _ in range(3):
        assert [a.kind for a in job.step()] == ["wait"]
        assert watch.running() == {"onprem": [], "cloud": []}
    (event,) = [e for e in job.events if e.kind == "wait"]  # said once, not per poll
    assert "cloud-gpu: excluded by the ladder's data (stays in ['onprem'])" in event.message
    assert "onprem-gpu: absent on cluster onprem" in event.message
    assert RunStorage.open(stage.storage, "stays").read("attempt.json") is None


def _steps(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("kind", ["tune", "train"])
def test_a_tune_or_train_run_inside_the_job_falls_within_its_cluster_and_the_job_stays(
        stage: Any, tmp_path: Path, kind: str) -> None:
    """The job's outer rungs need a CPU of their cluster (the head has one), so the inner
    ladder's fall (gpu -> cpu, on the GPU node's SIGKILL) is the run's own: it resumes
    from its checkpoint in S3 on the head, and the job never leaves on-prem."""
    doc = ladder_for(stage.onprem.address, stage.cloud.address)
    doc["rungs"] = [{"name": f"{site}-any", "cluster": site, "num_cpus": 1}
                    for site in ("onprem", "cloud")]
    ladder_file, run = tmp_path / "ladder.yaml", f"{kind}-in-job"
    ladder_file.write_text(json.dumps(doc))
    endpoint = re.search(r"endpoint_override=([^&]+)", stage.storage).group(1)
    steps, log, errors = tmp_path / "steps.jsonl", tmp_path / "job.log", tmp_path / "ev.log"
    prefix = kind.upper()
    env = json.dumps({"env_vars": {f"{prefix}_S3": endpoint, f"{prefix}_BUCKET": "ladder",
                                   "STEPS": "40", "STEP_S": "0.2", "STEP_LOG": str(steps)}})
    script = TUNE_JOB if kind == "tune" else TRAIN_JOB
    with log.open("w") as out, errors.open("w") as err:
        cli = subprocess.Popen(
            [sys.executable, "-m", "ray_ladder.cli", "submit", str(ladder_file),
             "--storage", stage.storage, "--run", run, "--runtime-env-json", env,
             "--", sys.executable, str(script)], stdout=out, stderr=err)
    watch = JobWatch([stage.onprem, stage.cloud], run, script=str(script)).start()
    try:
        wait_until(lambda: len([r for r in _steps(steps) if r["rung"] == "gpu"]) >= 5, SLOW,
                   0.1, "five steps on the GPU node")
        stage.onprem.kill_gpu()
        wait_until(lambda: any(r["rung"] == "cpu" for r in _steps(steps)), SLOW, 0.1,
                   "a step on the cpu rung")
        assert cli.wait(SLOW) == 0, errors.read_text()
    finally:
        watch.stop()
        if cli.poll() is None:
            cli.kill()
        stage.onprem.add_gpu()
    rows = _steps(steps)
    last_gpu = max(r["step"] for r in rows if r["rung"] == "gpu")
    first_cpu = min(r["step"] for r in rows if r["rung"] == "cpu")
    assert last_gpu - 2 <= first_cpu - 1 <= last_gpu  # from its last committed checkpoint
    assert rows[-1] == {"step": 40, "rung": "cpu"}
    assert f"{kind} done: step=40 path=['gpu', 'cpu']" in log.read_text()
    events = errors.read_text()
    assert "attempt 1 on onprem-any (cluster onprem): start" in events, events
    assert f"run {run}: SUCCEEDED" in events and "attempt 2" not in events
    assert {site for _, running, _ in watch.samples for site, ids in running.items()
            if ids} == {"onprem"}
    import pyarrow.fs as pafs

    s3 = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", region="us-east-1")
    saved = s3.get_file_info(pafs.FileSelector(f"ladder/{kind}/{run}", recursive=True))
    assert any("checkpoint_" in info.path for info in saved)  # the run's own, in the bucket


def _latest(store: RunStorage) -> dict[str, Any]:
    return store.read("latest.json") or {}


def _start_step(log: Path, attempt: int) -> int:
    """The step attempt ``attempt`` started from (its own log line, streamed by the CLI)."""
    match = re.search(rf"start attempt={attempt} rung=\S+ step=(\d+)", log.read_text())
    assert match, f"attempt {attempt} did not log its start"
    return int(match.group(1))


def test_the_job_falls_to_the_cloud_climbs_home_and_survives_the_head(stage: Any,
                                                                      tmp_path: Path) -> None:
    ladder_file = tmp_path / "ladder.yaml"
    ladder_file.write_text(json.dumps(ladder_for(stage.onprem.address, stage.cloud.address)))
    store = RunStorage.open(stage.storage, "story")
    log, errors = tmp_path / "job.log", tmp_path / "events.log"
    # TOTAL: more steps than the story can take; it ends once attempt 4 has checkpointed.
    done = tmp_path / "done"
    env = json.dumps({"env_vars": {"TOTAL": "1000", "EVERY": str(EVERY), "STEP_S": "0.2",
                                   "DONE_FILE": str(done)}})
    with log.open("w") as out, errors.open("w") as err:
        cli = subprocess.Popen(
            [sys.executable, "-m", "ray_ladder.cli", "submit", str(ladder_file),
             "--storage", stage.storage, "--run", "story", "--runtime-env-json", env,
             "--", sys.executable, str(JOB)], stdout=out, stderr=err)
    watch = JobWatch([stage.onprem, stage.cloud], "story", script=str(JOB)).start()
    try:
        wait_until(lambda: _latest(store).get("step", 0) >= 2 * EVERY, SLOW, 0.1,
                   "two checkpoints on-prem")
        assert _latest(store)["attempt"] == 1
        stage.onprem.kill_gpu()
        committed = _latest(store)["step"]
        wait_until(lambda: _latest(store).get("attempt") == 2, SLOW, 0.1,
                   "a checkpoint of attempt 2")
        owner = store.read("attempt.json")
        assert owner["rung"] == "cloud-gpu" and owner["cluster"] == "cloud"
        resumed = _start_step(log, 2)
        assert committed <= resumed <= committed + EVERY  # lost at most the steps since it

        stage.onprem.add_gpu()
        wait_until(lambda: _latest(store).get("attempt") == 3, SLOW, 0.1,
                   "a checkpoint of attempt 3, home again")
        yielded = store.read("yielded.json")
        assert yielded["attempt"] == 2 and yielded["to"] == "onprem-gpu"
        assert _start_step(log, 3) == yielded["step"]  # the climb lost no step

        stage.onprem.kill_head()
        wait_until(lambda: _latest(store).get("attempt", 0) >= 4, SLOW, 0.1,
                   "a checkpoint of attempt 4, in the cloud again")
        assert store.read("attempt.json")["cluster"] == "cloud"
        done.touch()
        assert cli.wait(SLOW) == 0, errors.read_text()
    finally:
        watch.stop()
        if cli.poll() is None:
            cli.kill()
    events = errors.read_text()
    for expected in ("attempt 1 on onprem-gpu (cluster onprem): start",
                     "attempt 2 on cloud-gpu (cluster cloud): fall",
                     "attempt 3 on onprem-gpu (cluster onprem): climb",
                     "on cloud-gpu (cluster cloud): lost", "run story: SUCCEEDED"):
        assert expected in events, events
    last = _latest(store)["step"]
    assert last % EVERY == 0 and f"done at step {last}" in log.read_text()
    seen = {site for _, running, _ in watch.samples for site, ids in running.items() if ids}
    assert seen == {"onprem", "cloud"}  # the watch saw it run in each
    assert max(drivers for _, _, drivers in watch.samples) == 1  # and saw its driver
    assert watch.overlap_s() == 0.0, [s for s in watch.samples if s[2] > 1 or len(
        [ids for ids in s[1].values() if ids]) > 1]


def test_a_second_runner_of_the_same_run_adopts_it_instead_of_submitting_again(
        stage: Any) -> None:
    from ray_ladder import Ladder

    ladder = Ladder.from_dict(ladder_for(stage.onprem.address, stage.cloud.address))
    store = RunStorage.open(stage.storage, "story")
    before = store.read("attempt.json")
    job = LadderJob(ladder, f"{sys.executable} {JOB}", storage=stage.storage, run="story")
    assert [e.kind for e in job.events] == ["adopt"]
    assert job.state.attempt == before["attempt"]
    deadline = time.monotonic() + 30
    while job.state.done is None and time.monotonic() < deadline:
        job.step()
    assert job.state.done == "SUCCEEDED"  # the adopted attempt had finished: no new one
    assert store.read("attempt.json") == before
