"""The arbiter actor's class (fleet/arbiter.py) with Ray's KV faked: it acts on the held
demand, counts grace restarts in its status, publishes the fleet's team names, and takes
a part whose entry was removed as gone at once."""

from __future__ import annotations

import json

import pytest

from ray_ladder.cluster import fleet_teams, grants, ray_private
from ray_ladder.cluster.fake_nodes import FakeNodes
from ray_ladder.core.fleet import Fleet
from ray_ladder.fleet.arbiter import FleetArbiter
from tests.cluster.test_fleet_teams import FakeKv

FLEET = Fleet.from_yaml("""
fleet: hold
control_period_s: 1.0
demand_hold_s: 3.0
rungs: {h100: {resources: {ladder/h100: 1}}}
teams:
  - {name: a, quota: {h100: 2}, cohort: onprem}
  - {name: b, cohort: onprem, reclaim_grace_s: 20}
""")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch):
    kv = FakeKv(monkeypatch)
    monkeypatch.setattr(ray_private, "kv_list",
                        lambda prefix, namespace=None: [k.encode() for k in kv.data
                                                        if k.startswith(prefix)])
    nodes = FakeNodes()
    nodes.add({"ladder/h100": 2.0, "CPU": 1.0})
    clock = Clock()
    arbiter = FleetArbiter(FLEET.model_dump_json(), node_source=nodes, clock=clock,
                           loop=False)
    return kv, clock, arbiter


def step(world, **wants: int) -> dict:
    kv, clock, arbiter = world
    clock.now += 1.0
    for team, units in wants.items():
        grants.report_demand(team, f"app-{team}", {"h100": units}, now=clock.now)
    return arbiter.step()


def test_a_dip_shorter_than_the_hold_keeps_the_notice_and_counts_no_restart(world) -> None:
    kv, _, _ = world
    assert json.loads(kv.data[fleet_teams.TEAMS_KEY])["teams"] == ["a", "b"]
    step(world, b=2)
    status = step(world, a=2, b=2)
    deadline = status["reclaims"][0]["deadline"]
    for a in (0, 2, 1, 0, 2):  # one-round dips of a steady lender
        status = step(world, a=a, b=2)
        assert [r["deadline"] for r in status["reclaims"]] == [deadline]
        assert status["teams"]["a"]["rungs"]["h100"]["wanted"] == 2
    assert status["grace_restarts"] == 0 and status["demand_hold_s"] == 3.0


def test_a_withdrawn_notice_then_a_new_one_is_a_grace_restart(world) -> None:
    step(world, b=2)
    step(world, a=2, b=2)
    for _ in range(4):  # a real drop, longer than the hold: the notice is withdrawn
        status = step(world, a=0, b=2)
    assert status["reclaims"] == []
    status = step(world, a=2, b=2)  # a's work is back before the old deadline
    assert status["grace_restarts"] == 1
    assert status["teams"]["a"]["grace_restarts"] == 1


def test_a_removed_entry_is_gone_at_once(world) -> None:
    kv, clock, _ = world
    step(world, a=2)
    assert step(world, a=2)["teams"]["a"]["rungs"]["h100"]["held"] == 2
    assert grants.withdraw_demand("a", "app-a", written_at=clock.now)  # the app deleted
    status = step(world)
    assert status["teams"]["a"]["rungs"]["h100"]["held"] == 0
    assert status["teams"]["a"]["rungs"]["h100"]["wanted"] == 0
