"""A Train run bound to a fleet team, without a cluster: the binding, the grants as gang
limits, the demand, and a reclaim notice moving the group at its next checkpoint (the
policy driven as Ray Train's controller drives it, over an in-memory KV and FakeNodes)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from ray.train.v2._internal.execution.controller.state import (
    ResizingState,
    RunningState,
    SchedulingState,
)
from ray.train.v2._internal.execution.scaling_policy import NoopDecision, ResizeDecision

from ray_ladder import Ladder
from ray_ladder.testing import FakeNodes
from ray_ladder.train import lifecycle
from ray_ladder.train import policy as policy_module
from ray_ladder.train.lifecycle import Climbing, Noticed, Steady, on_reclaim
from ray_ladder.train.policy import GroupWatch, LadderScalingPolicy, PolicySpec
from ray_ladder.train.team import GangLimits, budget_taken, gang_limits

LADDER = Ladder.from_yaml("""
name: team-gang
policy: {probe_interval_s: 0.001}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, train: {workers: 2}}
  - {name: a100, resources: {ladder/a100: 1}, train: {workers: 2}}
""")
H100 = [("h", {"ladder/h100": 1.0})] * 2
A100 = [("a", {"ladder/a100": 1.0})] * 2


def _entry(held: int, noticed: int = 0, deadline: float | None = None) -> dict:
    return {"team": "b", "rungs": {"h100": {"held": held, "noticed": noticed,
                                            "deadline": deadline}}}


def test_the_team_is_checked_where_the_trainer_is_built() -> None:
    from ray_ladder.train import LadderTrainer

    trainer = LadderTrainer(lambda: None, ladder=LADDER, team="b")
    assert trainer.team == "b"
    with pytest.raises(ValueError, match="fleet team's name"):
        LadderTrainer(lambda: None, ladder=LADDER, team="Team B")


def test_grants_fewer_than_a_gang_deny_the_rung_and_a_notice_moves_the_gang() -> None:
    gangs = {"h100": 2, "a100": 2}
    assert gang_limits(None, gangs, "h100") == GangLimits()
    assert gang_limits(_entry(1), gangs, None).denied == {"h100"}  # 1 unit, 2 workers
    assert gang_limits(_entry(2), gangs, "h100") == GangLimits()
    noticed = gang_limits(_entry(2, 1, 40.0), gangs, "h100")
    assert noticed.going and noticed.deadline == 40.0 and noticed.denied == {"h100"}
    assert not gang_limits(_entry(2, 1, 40.0), gangs, "a100").going  # not where it runs


def test_the_reclaim_rules() -> None:
    step = on_reclaim(Steady(3), going=True, deadline=9.0, parked=None, target="a100")
    assert (step.kind, step.request, step.rung) == ("notice", 4, "a100")
    # a climb the workers already stopped for becomes the notice's request
    step = on_reclaim(Climbing(4, "x"), going=True, deadline=9.0, parked=4, target=None)
    assert (step.kind, step.state) == ("none", Noticed(4, 9.0))
    assert on_reclaim(Noticed(4, 9.0), going=True, deadline=9.0, parked=None,
                      target="a100").kind == "none"  # not at a checkpoint yet
    assert on_reclaim(Noticed(4, 9.0), going=True, deadline=9.0, parked=4,
                      target=None).kind == "none"  # nothing fits: they wait there
    step = on_reclaim(Noticed(4, 9.0), going=True, deadline=9.0, parked=4, target="a100")
    assert (step.kind, step.rung, step.state) == ("move", "a100", Steady(4))
    step = on_reclaim(Noticed(4, 9.0), going=False, deadline=None, parked=None, target=None)
    assert (step.kind, step.request, step.state) == ("cancel", 4, Steady(4))
    assert on_reclaim(Steady(1), going=False, deadline=None, parked=None,
                      target=None).kind == "none"
    assert lifecycle.resized("h100", "a100", ["h100", "a100"]) == lifecycle.RECLAIM_NOTICE
    assert lifecycle.resized("a100", "h100", ["h100", "a100"]) == "climbed to h100"


def _policy(entry: dict[str, Any], sent: list, ladder: Ladder = LADDER, team: str = "b",
            nodes_of: dict[str, str] | None = None) -> tuple[LadderScalingPolicy, FakeNodes]:
    """The policy of run1 (team ``team``) over FakeNodes: node id -> its rung's 2 units."""
    nodes = FakeNodes()
    for node_id, rung in (nodes_of or {"h": "h100", "a": "a100"}).items():
        nodes.add({f"ladder/{rung}": 2}, node_id=node_id)
    clock = iter(range(10_000))
    policy = LadderScalingPolicy(SimpleNamespace(num_workers=2),
                                 PolicySpec(ladder, None, "run1", team=team),
                                 node_source=nodes, clock=lambda: float(next(clock)),
                                 wall_clock=lambda: 1000.0)
    policy._maybe_send_resource_request = lambda: None  # no autoscaler here
    policy_module._LIVE["run1"] = policy
    assert policy.team is not None
    policy.team._grants = lambda team: entry
    policy.team._report = lambda team, user, wants: sent.append((team, user, dict(wants)))
    return policy, nodes


def _start(policy: LadderScalingPolicy, decision: Any, workers: Any) -> None:
    policy.after_controller_state_update(RunningState(), SchedulingState(decision))
    GroupWatch("run1").after_worker_group_start(SimpleNamespace(
        get_worker_group_state=lambda: SimpleNamespace(workers=[
            SimpleNamespace(metadata=SimpleNamespace(node_id=n), resources=r)
            for n, r in workers])))
    policy.after_controller_state_update(SchedulingState(decision), RunningState())


def test_with_no_unit_granted_the_run_starts_below_and_asks_for_a_gang_there(
        kv: dict[str, str]) -> None:
    sent: list = []
    policy, _ = _policy(_entry(0), sent)
    decision = policy.make_decision_for_non_running_worker_group()
    assert decision.resources_per_worker == {"ladder/a100": 1.0}
    assert sent == [("b", "train:run1", {"h100": 2, "a100": 0})]  # waiting: a best gang


def test_a_reclaim_notice_moves_the_group_at_its_next_checkpoint(kv: dict[str, str]) -> None:
    entry = _entry(2)
    sent: list = []
    policy, nodes = _policy(entry, sent)
    decision = policy.make_decision_for_non_running_worker_group()
    assert decision.resources_per_worker == {"ladder/h100": 1.0}
    _start(policy, decision, H100)
    nodes.use("h", {"ladder/h100": 2})
    running = SimpleNamespace(workers=[])
    assert isinstance(policy.make_decision_for_running_worker_group(running, None),
                      NoopDecision)
    entry["rungs"]["h100"].update(noticed=2, deadline=1006.0)  # a's demand arrived
    assert isinstance(policy.make_decision_for_running_worker_group(running, None),
                      NoopDecision)
    request = policy.channel.climb()
    assert request is not None and request.notice and request.to == "a100"
    # not at a checkpoint yet: nothing moves mid-step
    assert isinstance(policy.make_decision_for_running_worker_group(running, None),
                      NoopDecision)
    kv["train/run1/parked"] = str(request.id)  # rank 0: stopped at a committed checkpoint
    decision = policy.make_decision_for_running_worker_group(running, None)
    assert isinstance(decision, ResizeDecision)
    assert decision.resources_per_worker == {"ladder/a100": 1.0}
    event = policy.summary.events[-1]
    assert (event["from"], event["to"], event["cause"]) == ("h100", "a100",
                                                            "preemption_notice")
    assert "reclaim notice: team b's units go back; moved at a committed checkpoint, " \
           "6.0 s before the deadline" in event["reason"]
    policy.after_controller_state_update(RunningState(), ResizingState(decision))
    assert policy.summary.spans[0].ended_by == lifecycle.RECLAIM_NOTICE
    assert sent[0] == ("b", "train:run1", {"h100": 2, "a100": 0})


def test_a_withdrawn_notice_lets_the_workers_go_on(kv: dict[str, str]) -> None:
    entry = _entry(2)
    policy, nodes = _policy(entry, [])
    _start(policy, policy.make_decision_for_non_running_worker_group(), H100)
    nodes.use("h", {"ladder/h100": 2})
    running = SimpleNamespace(workers=[])
    entry["rungs"]["h100"].update(noticed=2, deadline=1006.0)
    policy.make_decision_for_running_worker_group(running, None)
    request = policy.channel.climb()
    assert request is not None and not request.cancelled
    entry["rungs"]["h100"].update(noticed=0, deadline=None)
    policy.make_decision_for_running_worker_group(running, None)
    cancelled = policy.channel.climb()
    assert cancelled is not None and cancelled.cancelled and cancelled.id == request.id
    assert isinstance(policy.state, Steady)


COSTED = Ladder.from_yaml("""
name: team-budget
policy: {probe_interval_s: 0.001, promotion_hysteresis: 1}
rungs:
  - {name: a100, resources: {ladder/a100: 1}, train: {workers: 2}, cost_per_hour: 4}
  - {name: cpu, resources: {ladder/cpu: 1}, train: {workers: 2}, cost_per_hour: 0.5}
""")


def test_budget_taken_is_the_one_budget_rule_with_the_running_rung_counted() -> None:
    costs = {"a100": 4.0, "cpu": 0.5}
    spent = {"team": "d", "budget": "demote", "budget_until": 99.0}
    assert budget_taken(spent, costs, ["a100", "cpu"], {"a100": False, "cpu": True},
                        "a100") == {"a100"}  # its own gang fills a100: still taken
    assert budget_taken(spent, costs, ["a100", "cpu"], {"cpu": False}, "a100") == set()
    for action in ("queue", "reject", "ok"):  # they act on new work, not on a run
        assert budget_taken({**spent, "budget": action}, costs, ["a100", "cpu"],
                            {"cpu": True}, "a100") == set()
    assert budget_taken(None, costs, ["a100", "cpu"], {"cpu": True}, "a100") == set()


def test_a_spent_demote_budget_moves_the_group_down_at_its_next_checkpoint(
        kv: dict[str, str]) -> None:
    entry: dict[str, Any] = {"team": "d", "budget": "ok", "rungs": {}}
    policy, nodes = _policy(entry, [], COSTED, "d", {"a": "a100", "c": "cpu"})
    decision = policy.make_decision_for_non_running_worker_group()
    assert decision.resources_per_worker == {"ladder/a100": 1.0}
    _start(policy, decision, [("a", {"ladder/a100": 1.0})] * 2)
    nodes.use("a", {"ladder/a100": 2})
    running = SimpleNamespace(workers=[])
    assert isinstance(policy.make_decision_for_running_worker_group(running, None),
                      NoopDecision)
    assert policy.channel.climb() is None
    entry.update(budget="demote", budget_until=4600.0)  # d's window is spent
    policy.make_decision_for_running_worker_group(running, None)
    request = policy.channel.climb()
    assert request is not None and request.to == "cpu"
    kv["train/run1/parked"] = str(request.id)  # stopped at a committed checkpoint
    decision = policy.make_decision_for_running_worker_group(running, None)
    assert isinstance(decision, ResizeDecision)
    assert decision.resources_per_worker == {"ladder/cpu": 1.0}
    event = policy.summary.events[-1]
    assert (event["from"], event["to"], event["cause"]) == ("a100", "cpu", "lost")
    assert "team d's budget is spent (demote)" in event["reason"]
    policy.after_controller_state_update(RunningState(), ResizingState(decision))
    assert policy.summary.spans[0].ended_by == lifecycle.budget_reason("d")
    # on cpu, a100 free again: no climb back while the budget stays spent
    _start(policy, decision, [("c", {"ladder/cpu": 1.0})] * 2)
    nodes.free("a", {"ladder/a100": 2})
    nodes.use("c", {"ladder/cpu": 2})
    for _ in range(3):
        policy.make_decision_for_running_worker_group(running, None)
    assert policy.channel.climb() is None or policy.channel.climb().cancelled
