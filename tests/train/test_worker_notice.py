"""The worker side of a preemption notice: ``ray_ladder.train.report`` stops at the
checkpoint the training function reports when ``ray.train.get_preemption_info()`` is set,
even when the controller's request comes after it (Ray Train tells the workers first).
Ray Train's worker API is faked; the run's channel is an in-memory KV."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import ray.train
import ray.train.collective

from ray_ladder import Ladder
from ray_ladder.cluster import ray_private_train
from ray_ladder.train import worker
from ray_ladder.train.channel import Channel
from ray_ladder.train.worker import WorkerSpec

LADDER = Ladder.from_yaml("""
name: gang
rungs:
  - {name: h100x2, resources: {ladder/h100: 1}, train: {workers: 2}}
  - {name: a100x2, resources: {ladder/a100: 1}, train: {workers: 2}}
""")


class Steps:
    """Stands in for ``time.sleep`` in the worker: runs one scripted event per call (what
    the controller does meanwhile); ``None`` does nothing; past the script it fails."""

    def __init__(self, *events: Callable[[], None] | None) -> None:
        self.events = list(events)

    def __call__(self, _seconds: float) -> None:
        assert self.events, "the worker waited longer than the scenario"
        event = self.events.pop(0)
        if event is not None:
            event()


class GroupStopped(Exception):
    """The controller stopped the worker group: the worker's process ends here."""


def group_stopped() -> None:
    raise GroupStopped


@pytest.fixture
def rank0(monkeypatch: pytest.MonkeyPatch, kv: dict[str, str]) -> SimpleNamespace:
    """Rank 0 of a 2-worker ladder run, with Ray Train's calls recorded."""
    calls: dict[str, list[Any]] = {"report": [], "committed": []}
    monkeypatch.setattr(worker, "_spec", WorkerSpec(LADDER, None, "run1"))
    monkeypatch.setattr(ray.train, "report", lambda metrics, checkpoint=None, **kw:
                        calls["report"].append((metrics, checkpoint)))
    monkeypatch.setattr(ray.train, "get_context", lambda: SimpleNamespace(
        get_world_rank=lambda: 0))
    monkeypatch.setattr(ray.train, "get_all_reported_checkpoints",
                        lambda consistency_mode=None: calls["committed"].append(
                            consistency_mode))
    monkeypatch.setattr(ray.train.collective, "broadcast_from_rank_zero", lambda x: x)
    notice: dict[str, Any] = {"info": None}
    monkeypatch.setattr(ray_private_train, "train_local_preemption_info",
                        lambda: notice["info"])
    return SimpleNamespace(calls=calls, notice=notice, channel=Channel("run1"), kv=kv)


def test_a_notice_checkpoint_waits_for_the_controllers_request_and_stops(
        rank0: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    rank0.notice["info"] = SimpleNamespace(deadline_ms=1, preempted_node_to_ranks={"n": [0]})
    channel, parked = rank0.channel, []
    steps = Steps(None,  # the controller has not polled since the notice: no request yet
                  lambda: channel.ask_climb(1, "a100x2", notice=True),  # now it has
                  lambda: parked.append(channel.parked()),  # stopped, waiting for the move
                  channel.clear,  # the controller starts the next group: the request goes
                  group_stopped)  # still waiting (no step past the checkpoint) when it ends
    monkeypatch.setattr(worker.time, "sleep", steps)
    with pytest.raises(GroupStopped):
        worker.report({"step": 7}, checkpoint="ckpt")
    assert rank0.calls["report"] == [({"step": 7}, "ckpt")]
    assert [str(m) for m in rank0.calls["committed"]] == ["CheckpointConsistencyMode.COMMITTED"]
    assert parked == [1] and not steps.events


def test_without_a_notice_or_a_request_a_checkpoint_goes_on_at_once(
        rank0: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker.time, "sleep", Steps())  # any wait fails
    worker.report({"step": 5}, checkpoint="ckpt")
    assert rank0.calls["committed"] == [] and "train/run1/parked" not in rank0.kv


def test_workers_stopped_for_a_climb_stay_when_a_notice_replaces_it(
        rank0: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    channel = rank0.channel
    channel.ask_climb(1, "h100x2")
    channel.park(1)
    seen: list[Any] = []
    steps = Steps(lambda: channel.ask_climb(2, "a100x2", notice=True),  # the notice came
                  lambda: seen.append(channel.parked()),
                  channel.clear,
                  group_stopped)
    monkeypatch.setattr(worker.time, "sleep", steps)
    with pytest.raises(GroupStopped):
        worker._wait_for_move(channel, 1, 60.0, True)
    assert seen == [2]  # parked again, for the notice: the controller ends Ray's wait


def test_a_cancelled_climb_lets_the_workers_go_on(
        rank0: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    channel = rank0.channel
    channel.ask_climb(1, "h100x2")
    channel.park(1)
    steps = Steps(None, lambda: channel.cancel_climb(1))  # the better rung went away
    monkeypatch.setattr(worker.time, "sleep", steps)
    worker._wait_for_move(channel, 1, 60.0, True)  # returns: training goes on
    assert not steps.events
