"""LadderScalingPolicy's decisions, driven the way Ray Train's controller drives it, with
Ray Train's own state objects, fake nodes and an in-memory KV (no cluster)."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
from ray.exceptions import ActorDiedError, RayActorError
from ray.train.v2._internal.execution.controller.controller import TrainController
from ray.train.v2._internal.execution.controller.state import (
    FinishedState,
    PreemptingState,
    ResizingState,
    RestartingState,
    RunningState,
    SchedulingState,
    ShuttingDownState,
)
from ray.train.v2._internal.execution.scaling_policy import NoopDecision, ResizeDecision
from ray.train.v2.api.exceptions import PreemptionError, WorkerGroupError
from ray.train.v2.api.preemption import PreemptionInfo

from ray_ladder import Constraints, Ladder, LadderExhaustedError
from ray_ladder.cluster.metrics import transition_label
from ray_ladder.core.placement import PREEMPTION_NOTICE
from ray_ladder.testing import FakeNodes
from ray_ladder.train import policy as policy_module
from ray_ladder.train.policy import GroupWatch, LadderScalingPolicy, PolicySpec

LADDER = Ladder.from_yaml("""
name: gang
policy: {promotion_hysteresis: 2, probe_interval_s: 0.001}
rungs:
  - {name: h100x8, resources: {ladder/h100: 2}, train: {workers: 4}, cost_per_hour: 98.4,
     label_selector: {pool: big}, tags: {jurisdiction: us}}
  - {name: a100x8, resources: {ladder/a100: 2}, train: {workers: 4}, cost_per_hour: 32.8,
     tags: {jurisdiction: eu}}
  - {name: a100x4, resources: {ladder/a100: 2}, train: {workers: 2}, cost_per_hour: 16.4,
     tags: {jurisdiction: eu}, params: {grad_accum_steps: 2}}
""")


def cluster_nodes() -> FakeNodes:
    """Three nodes: ``big`` (8 H100s, pool big), ``a1`` and ``a2`` (4 A100s each); a test
    makes their availability follow the worker group the policy starts."""
    nodes = FakeNodes()
    nodes.add({"ladder/h100": 8}, node_id="big", labels={"pool": "big"})
    for node_id in ("a1", "a2"):
        nodes.add({"ladder/a100": 4}, node_id=node_id)
    return nodes


def come_back(nodes: FakeNodes, node_id: str) -> None:
    """The killed node returns, idle, under its id."""
    node = nodes.node(node_id)
    nodes.remove(node_id)
    nodes.add(node.total, node_id=node_id, labels=node.labels)


def group(*placements: tuple[str, dict[str, float]]) -> Any:
    """A WorkerGroupState-like object: workers with their node and resources."""
    return SimpleNamespace(workers=[SimpleNamespace(metadata=SimpleNamespace(node_id=n),
                                                    resources=r) for n, r in placements])


def make(cluster: FakeNodes, constraints: Constraints | None = None,
         max_wait_s: float | None = 300.0) -> LadderScalingPolicy:
    clock = iter(range(10_000))
    policy = LadderScalingPolicy(SimpleNamespace(num_workers=4),
                                 PolicySpec(LADDER, constraints, "run1", max_wait_s=max_wait_s),
                                 node_source=cluster, clock=lambda: float(next(clock)),
                                 wall_clock=lambda: 1000.0)
    policy._maybe_send_resource_request = lambda: None  # no autoscaler here
    policy_module._LIVE["run1"] = policy  # what after_controller_start does in the controller
    return policy


def start(policy: LadderScalingPolicy, decision: Any, workers: Any) -> None:
    """What the controller does with a ResizeDecision: schedule, start, run."""
    policy.after_controller_state_update(RestartingState(None) if policy.summary.spans
                                         else RunningState(), SchedulingState(decision))
    GroupWatch("run1").after_worker_group_start(SimpleNamespace(
        get_worker_group_state=lambda: workers))
    policy.after_controller_state_update(SchedulingState(decision), RunningState())


def test_starts_on_the_best_gang_with_its_label_selector(kv: dict[str, str]) -> None:
    policy = make(cluster_nodes())
    decision = policy.make_decision_for_non_running_worker_group()
    assert isinstance(decision, ResizeDecision)
    assert (decision.num_workers, decision.resources_per_worker) == (4, {"ladder/h100": 2.0})
    assert policy.on_controller_start_worker_group(scaling_config=None, num_workers=4) == {
        "pool": "big"}
    event = policy.summary.events[0]
    assert (event["from"], event["to"]) == (None, "h100x8")
    assert "first placement; free: h100x8, a100x8, a100x4" in event["reason"]
    assert event["cause"] == "first"
    summary = json.loads(kv["train/run1/summary"])
    assert summary["events"][0]["to"] == "h100x8"


def test_a_lost_node_restarts_the_group_on_the_next_gang_without_it(kv: dict[str, str]) -> None:
    cluster = cluster_nodes()
    policy = make(cluster)
    start(policy, policy.make_decision_for_non_running_worker_group(),
          group(*[("big", {"ladder/h100": 2.0})] * 4))
    cluster.use("big")
    assert isinstance(policy.make_decision_for_running_worker_group(
        group(*[("big", {"ladder/h100": 2.0})] * 4), None), NoopDecision)
    # SIGKILL: Ray Train sees its workers die; the GCS still shows the node alive.
    error = WorkerGroupError("lost", {r: ActorDiedError() for r in range(4)})
    policy.after_controller_state_update(RunningState(), RestartingState(error))
    assert policy.summary.spans[-1].ended_by == "workers lost"
    assert set(policy.suspects) == {"big"}
    decision = policy.make_decision_for_non_running_worker_group()
    assert (decision.num_workers, decision.resources_per_worker) == (4, {"ladder/a100": 2.0})
    assert policy.on_controller_start_worker_group(scaling_config=None, num_workers=4) is None
    assert policy.summary.events[-1]["direction"] == "down"
    assert "h100x8 workers lost; free: a100x8, a100x4" in policy.summary.events[-1]["reason"]
    assert policy.summary.events[-1]["cause"] == "lost"


def test_a_failure_of_the_code_restarts_in_the_same_shape(kv: dict[str, str]) -> None:
    cluster = cluster_nodes()
    policy = make(cluster)
    start(policy, policy.make_decision_for_non_running_worker_group(),
          group(*[("big", {"ladder/h100": 2.0})] * 4))
    cluster.use("big")  # its own group still holds the node at the restart decision
    error = WorkerGroupError("bug", {0: ValueError("my bug")})
    policy.after_controller_state_update(RunningState(), RestartingState(error))
    assert policy.summary.spans[-1].ended_by == "workers failed" and not policy.suspects
    decision = policy.make_decision_for_non_running_worker_group()
    assert decision.resources_per_worker == {"ladder/h100": 2.0}


def test_a_preemption_notice_leaves_the_drained_node_out(kv: dict[str, str]) -> None:
    policy = make(cluster_nodes())
    start(policy, policy.make_decision_for_non_running_worker_group(),
          group(*[("big", {"ladder/h100": 2.0})] * 4))
    info = PreemptionInfo(deadline_ms=None, preempted_node_to_ranks={"big": [0, 1, 2, 3]})
    policy.after_controller_state_update(RunningState(), RestartingState(PreemptionError(info)))
    assert policy.summary.spans[-1].ended_by == "preempted"
    decision = policy.make_decision_for_non_running_worker_group()
    assert decision.resources_per_worker == {"ladder/a100": 2.0}  # big still alive: left out


def test_climbs_at_a_checkpoint_the_workers_wait_at(kv: dict[str, str]) -> None:
    cluster = cluster_nodes()
    cluster.kill("big")
    policy = make(cluster)
    a100 = group(("a1", {"ladder/a100": 2.0}), ("a1", {"ladder/a100": 2.0}),
                 ("a2", {"ladder/a100": 2.0}), ("a2", {"ladder/a100": 2.0}))
    start(policy, policy.make_decision_for_non_running_worker_group(), a100)
    assert policy.placed == "a100x8"
    come_back(cluster, "big")
    policy.make_decision_for_running_worker_group(a100, None)  # 1st observation
    assert "train/run1/climb" not in kv
    assert isinstance(policy.make_decision_for_running_worker_group(a100, None), NoopDecision)
    request = json.loads(kv["train/run1/climb"])  # 2nd: hysteresis met, ask the workers
    assert request == {"id": 1, "to": "h100x8", "cancelled": False, "notice": False}
    # Not parked yet: nothing moves mid-step.
    assert isinstance(policy.make_decision_for_running_worker_group(a100, None), NoopDecision)
    kv["train/run1/parked"] = "1"  # rank 0: every worker waits at a committed checkpoint
    decision = policy.make_decision_for_running_worker_group(a100, None)
    assert isinstance(decision, ResizeDecision)
    assert decision.resources_per_worker == {"ladder/h100": 2.0}
    assert "train/run1/climb" not in kv and "train/run1/parked" not in kv
    policy.after_controller_state_update(RunningState(), ResizingState(decision))
    assert policy.summary.spans[-1].ended_by == "climbed to h100x8"
    assert policy.summary.events[-1]["direction"] == "up"
    assert "climb at checkpoint" in policy.summary.events[-1]["reason"]
    assert policy.summary.events[-1]["cause"] == "promoted"


def test_a_climb_whose_rung_went_away_is_cancelled(kv: dict[str, str]) -> None:
    cluster = cluster_nodes()
    policy = make(cluster)
    cluster.kill("big")
    a100 = group(*[("a1", {"ladder/a100": 2.0})] * 2, *[("a2", {"ladder/a100": 2.0})] * 2)
    start(policy, policy.make_decision_for_non_running_worker_group(), a100)
    come_back(cluster, "big")
    policy.make_decision_for_running_worker_group(a100, None)
    policy.make_decision_for_running_worker_group(a100, None)
    assert json.loads(kv["train/run1/climb"])["to"] == "h100x8"
    cluster.use("big", {"ladder/h100": 6})  # someone else took it
    kv["train/run1/parked"] = "1"
    assert isinstance(policy.make_decision_for_running_worker_group(a100, None), NoopDecision)
    assert json.loads(kv["train/run1/climb"])["cancelled"] is True  # the workers go on
    assert policy.placed == "a100x8"


def test_constraints_hold_at_every_placement(kv: dict[str, str]) -> None:
    cluster = cluster_nodes()
    policy = make(cluster, Constraints(jurisdiction="eu"))
    decision = policy.make_decision_for_non_running_worker_group()
    assert decision.resources_per_worker == {"ladder/a100": 2.0}  # big is free, but us
    a100 = group(*[("a1", {"ladder/a100": 2.0})] * 2, *[("a2", {"ladder/a100": 2.0})] * 2)
    start(policy, decision, a100)
    for _ in range(5):
        policy.make_decision_for_running_worker_group(a100, None)
    assert "train/run1/climb" not in kv  # never asked to climb to the us rung


def test_waits_when_no_gang_fits_then_raises_exhausted(kv: dict[str, str]) -> None:
    cluster = cluster_nodes()
    for n in ("big", "a1", "a2"):
        cluster.kill(n)
    waiting = make(cluster)
    assert isinstance(waiting.make_decision_for_non_running_worker_group(), NoopDecision)
    policy = make(cluster, max_wait_s=0.5)
    assert isinstance(policy.make_decision_for_non_running_worker_group(), NoopDecision)
    with pytest.raises(LadderExhaustedError) as info:
        policy.make_decision_for_non_running_worker_group()
    assert [a.rung for a in info.value.attempts] == ["h100x8", "a100x8", "a100x4"]


def test_the_policy_waits_between_answers_not_its_decision(kv: dict[str, str]) -> None:
    # The decision says how long (a probe interval, at most 0.5 s); the policy waits.
    cluster = cluster_nodes()
    for n in ("big", "a1", "a2"):
        cluster.kill(n)
    slept: list[float] = []
    policy = LadderScalingPolicy(SimpleNamespace(num_workers=4), PolicySpec(LADDER, None, "run1"),
                                 node_source=cluster, clock=lambda: 0.0, sleep=slept.append)
    policy._maybe_send_resource_request = lambda: None
    for _ in range(2):
        assert isinstance(policy.make_decision_for_non_running_worker_group(), NoopDecision)
    assert slept == [0.001, 0.001]


def test_the_history_closes_with_the_end_of_the_run(kv: dict[str, str]) -> None:
    policy = make(cluster_nodes())
    start(policy, policy.make_decision_for_non_running_worker_group(),
          group(*[("big", {"ladder/h100": 2.0})] * 4))
    policy.after_controller_state_update(RunningState(), ShuttingDownState(FinishedState()))
    span = policy.summary.spans[-1]
    assert (span.rung, span.ended_by, span.node_ids) == ("h100x8", "completed", ("big",) * 4)
    assert json.loads(kv["train/run1/summary"])["path"] == ["h100x8"]


# --- preemption notices: stop at the next checkpoint, then end Ray Train's wait -------------

def _notice(deadline_in_s: float = 60.0, node: str = "big") -> Any:
    ranks = [0, 1, 2, 3]
    return PreemptionInfo(deadline_ms=int((time.time() + deadline_in_s) * 1000),
                          preempted_node_to_ranks={node: ranks})


def _waiting(state: Any, grace_s: float = 0.0) -> bool:
    """Ray Train's own check: is it still waiting for the drain's deadline in ``state``?"""
    return not TrainController._is_preemption_deadline_exceeded(
        state.preemption_info, state.detected_at_s, grace_s)


def test_a_notice_moves_the_run_at_the_next_committed_checkpoint(kv: dict[str, str]) -> None:
    policy = make(cluster_nodes())
    big = group(*[("big", {"ladder/h100": 2.0})] * 4)
    start(policy, policy.make_decision_for_non_running_worker_group(), big)
    entered = PreemptingState(_notice(), time.time())
    policy.after_controller_state_update(RunningState(), entered)
    request = json.loads(kv["train/run1/climb"])  # the workers stop at their next checkpoint
    assert request == {"id": 1, "to": "a100x8", "cancelled": False, "notice": True}
    assert _waiting(entered)
    waiting = PreemptingState(entered.preemption_info, entered.detected_at_s)
    policy.after_controller_state_update(entered, waiting)
    assert _waiting(waiting)  # not stopped yet: Ray Train waits for the deadline
    kv["train/run1/parked"] = "1"  # rank 0: every worker waits at a committed checkpoint
    parked = PreemptingState(waiting.preemption_info, waiting.detected_at_s)
    policy.after_controller_state_update(waiting, parked)
    assert not _waiting(parked)  # Ray Train raises PreemptionError at its next poll
    assert parked.preemption_info.preempted_node_to_ranks == {"big": [0, 1, 2, 3]}
    error = PreemptionError(parked.preemption_info, drain_timed_out=True)
    policy.after_controller_state_update(parked, RestartingState(error))
    assert policy.summary.spans[-1].ended_by == "preempted"
    decision = policy.make_decision_for_non_running_worker_group()
    assert decision.resources_per_worker == {"ladder/a100": 2.0}  # big (alive) left out
    event = policy.summary.events[-1]
    assert event["reason"].startswith(f"h100x8 {PREEMPTION_NOTICE}: moved at a committed "
                                      "checkpoint, ")
    assert "s before the deadline; free: a100x8, a100x4" in event["reason"]
    assert transition_label(event) == "preemption_notice"
    assert "train/run1/climb" not in kv and "train/run1/parked" not in kv


def test_ending_the_wait_leaves_room_for_the_runs_preemption_grace(kv: dict[str, str]) -> None:
    clock = iter(range(10_000))
    policy = LadderScalingPolicy(SimpleNamespace(num_workers=4),
                                 PolicySpec(LADDER, None, "run1", preemption_grace_s=30.0),
                                 node_source=cluster_nodes(), clock=lambda: float(next(clock)))
    policy._maybe_send_resource_request = lambda: None
    start(policy, policy.make_decision_for_non_running_worker_group(),
          group(*[("big", {"ladder/h100": 2.0})] * 4))
    entered = PreemptingState(_notice(), time.time())
    policy.after_controller_state_update(RunningState(), entered)
    kv["train/run1/parked"] = "1"
    parked = PreemptingState(entered.preemption_info, entered.detected_at_s)
    policy.after_controller_state_update(entered, parked)
    assert not _waiting(parked, grace_s=30.0)


def _asking_to_climb() -> LadderScalingPolicy:
    """A run on a100x8 whose policy asks (request 1) to climb to the returned h100x8."""
    cluster = cluster_nodes()
    cluster.kill("big")
    policy = make(cluster)
    a100 = group(*[("a1", {"ladder/a100": 2.0})] * 2, *[("a2", {"ladder/a100": 2.0})] * 2)
    start(policy, policy.make_decision_for_non_running_worker_group(), a100)
    come_back(cluster, "big")
    policy.make_decision_for_running_worker_group(a100, None)
    policy.make_decision_for_running_worker_group(a100, None)
    return policy


def test_a_notice_replaces_a_climb_the_workers_have_not_stopped_for(kv: dict[str, str]) -> None:
    policy = _asking_to_climb()
    assert json.loads(kv["train/run1/climb"]) == {"id": 1, "to": "h100x8", "cancelled": False,
                                                  "notice": False}
    entered = PreemptingState(_notice(node="a2"), time.time())
    policy.after_controller_state_update(RunningState(), entered)
    assert json.loads(kv["train/run1/climb"]) == {"id": 2, "to": "h100x8", "cancelled": False,
                                                  "notice": True}
    kv["train/run1/parked"] = "1"  # a stale park (the climb): not the notice's
    stale = PreemptingState(entered.preemption_info, entered.detected_at_s)
    policy.after_controller_state_update(entered, stale)
    assert _waiting(stale)
    kv["train/run1/parked"] = "2"
    parked = PreemptingState(stale.preemption_info, stale.detected_at_s)
    policy.after_controller_state_update(stale, parked)
    assert not _waiting(parked)


def test_workers_stopped_for_a_climb_move_at_once_on_a_notice(kv: dict[str, str]) -> None:
    policy = _asking_to_climb()
    kv["train/run1/parked"] = "1"  # stopped at the climb's checkpoint; the notice came first
    entered = PreemptingState(_notice(node="a2"), time.time())
    policy.after_controller_state_update(RunningState(), entered)
    assert json.loads(kv["train/run1/climb"])["id"] == 1  # kept: they are already there
    assert not _waiting(entered)
    policy.after_controller_state_update(entered, RestartingState(
        PreemptionError(entered.preemption_info, drain_timed_out=True)))
    decision = policy.make_decision_for_non_running_worker_group()
    assert decision.resources_per_worker == {"ladder/h100": 2.0}


def test_a_run_that_never_stops_at_a_checkpoint_restarts_at_the_deadline(
        kv: dict[str, str]) -> None:
    policy = make(cluster_nodes())
    start(policy, policy.make_decision_for_non_running_worker_group(),
          group(*[("big", {"ladder/h100": 2.0})] * 4))
    entered = PreemptingState(_notice(deadline_in_s=0.5), time.time())
    policy.after_controller_state_update(RunningState(), entered)
    again = PreemptingState(entered.preemption_info, entered.detected_at_s)
    policy.after_controller_state_update(entered, again)
    assert again.preemption_info == entered.preemption_info  # Ray's own deadline, untouched
    policy.after_controller_state_update(again, RestartingState(
        PreemptionError(again.preemption_info, drain_timed_out=True)))
    policy.make_decision_for_non_running_worker_group()
    event = policy.summary.events[-1]
    assert event["reason"].startswith(f"h100x8 {PREEMPTION_NOTICE}: restarted at the "
                                      "drain's deadline; free: a100x8")
    assert event["cause"] == "preemption_notice"
    assert policy.summary.spans[-1].ended_by == "preempted"


def test_a_preempted_death_without_a_notice_seen_is_a_loss(kv: dict[str, str]) -> None:
    # The node was drained and killed at its deadline before Ray Train's watcher polled.
    policy = make(cluster_nodes())
    start(policy, policy.make_decision_for_non_running_worker_group(),
          group(*[("big", {"ladder/h100": 2.0})] * 4))
    dead = RayActorError(error_msg="preempted", preempted=True)
    error = WorkerGroupError("lost", {r: dead for r in range(4)})
    policy.after_controller_state_update(RunningState(), RestartingState(error))
    assert policy.summary.spans[-1].ended_by == "preempted"
    policy.make_decision_for_non_running_worker_group()
    event = policy.summary.events[-1]
    assert event["reason"].startswith("h100x8 preempted: node lost, its notice unseen")
    assert transition_label(event) == "lost"


def test_the_old_nodes_keyword_still_works_for_a_release_and_warns(kv: dict[str, str]) -> None:
    nodes = cluster_nodes()
    with pytest.warns(DeprecationWarning, match=r"LadderScalingPolicy\(nodes=.*node_source="):
        policy = LadderScalingPolicy(SimpleNamespace(num_workers=4),
                                     PolicySpec(LADDER, None, "run1"), nodes=nodes)
    assert policy._nodes is nodes
