"""A job run's storage on a real S3 API server (moto in server mode on loopback), and the
job-side checkpoint hook: commit, climb at the committed checkpoint, fence a stale attempt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_ladder.jobs import get_checkpoint, job_place, report
from ray_ladder.jobs.hook import JOB_ENV
from ray_ladder.jobs.sandbox import s3_server
from ray_ladder.jobs.storage import RunStorage

pytest.importorskip("moto.server", reason="needs moto[server] (the test extras)")


@pytest.fixture(scope="module")
def storage():
    with s3_server() as uri:
        yield uri


def _attempt(monkeypatch, storage: str, run: str, attempt: int) -> RunStorage:
    monkeypatch.setenv(JOB_ENV, json.dumps({
        "run": run, "attempt": attempt, "rung": "cloud-gpu", "cluster": "cloud",
        "placement": {"resources": {"ladder/gpu": 1}}, "storage": storage}))
    store = RunStorage.open(storage, run)
    store.write("attempt.json", {"attempt": attempt})
    return store


def _ckpt(tmp_path: Path, step: int) -> Path:
    d = tmp_path / f"ckpt{step}"
    d.mkdir()
    (d / "state.json").write_text(json.dumps({"step": step}))
    return d


def test_the_storage_uri_carries_the_endpoint_and_round_trips_json(storage):
    assert "endpoint_override=127.0.0.1:" in storage
    store = RunStorage.open(storage, "round-trip")
    assert store.read("missing.json") is None
    store.write("a.json", {"x": 1})
    assert store.read("a.json") == {"x": 1}
    store.delete("a.json")
    assert store.read("a.json") is None


def test_a_committed_checkpoint_is_what_the_next_attempt_starts_from(storage, monkeypatch,
                                                                     tmp_path):
    _attempt(monkeypatch, storage, "resume", 1)
    assert get_checkpoint() is None and job_place().placement == {
        "resources": {"ladder/gpu": 1}}
    report({"step": 3}, checkpoint=_ckpt(tmp_path, 3))
    report({"step": 6}, checkpoint=str(_ckpt(tmp_path, 6)))
    _attempt(monkeypatch, storage, "resume", 2)
    ckpt = get_checkpoint()
    assert json.loads((Path(ckpt.path) / "state.json").read_text()) == {"step": 6}


def test_a_climb_request_stops_the_job_right_after_its_checkpoint_is_committed(
        storage, monkeypatch, tmp_path):
    store = _attempt(monkeypatch, storage, "climb", 1)
    store.write("climb.json", {"attempt": 1, "to": "onprem-gpu"})
    with pytest.raises(SystemExit) as stop:
        report({"step": 9}, checkpoint=_ckpt(tmp_path, 9))
    assert stop.value.code == 0
    assert store.read("latest.json")["step"] == 9  # committed before it stopped
    assert store.read("yielded.json") == {"attempt": 1, "step": 9, "to": "onprem-gpu"}


def test_a_climb_asked_of_another_attempt_does_not_stop_this_one(storage, monkeypatch,
                                                                 tmp_path):
    store = _attempt(monkeypatch, storage, "other", 2)
    store.write("climb.json", {"attempt": 1, "to": "onprem-gpu"})
    report({"step": 3}, checkpoint=_ckpt(tmp_path, 3))
    assert store.read("yielded.json") is None


def test_an_attempt_that_is_no_longer_the_runs_stops_without_committing(storage, monkeypatch,
                                                                        tmp_path):
    store = _attempt(monkeypatch, storage, "fenced", 1)
    report({"step": 3}, checkpoint=_ckpt(tmp_path, 3))
    store.write("attempt.json", {"attempt": 2})  # its cluster was lost; attempt 2 took over
    with pytest.raises(SystemExit):
        report({"step": 6}, checkpoint=_ckpt(tmp_path, 6))
    assert store.read("latest.json")["step"] == 3


def test_outside_a_run_the_hook_does_nothing(monkeypatch, tmp_path):
    monkeypatch.delenv(JOB_ENV, raising=False)
    assert job_place() is None and get_checkpoint() is None
    report({"step": 1}, checkpoint=_ckpt(tmp_path, 1))
