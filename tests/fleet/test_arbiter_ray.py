"""The fleet arbiter on a real LocalCluster: grants in Ray's KV, a reclaim as a notice a
team's CapacityView sees as going away, and a SIGKILL of the arbiter losing no grant."""

from __future__ import annotations

import json
import os
import signal

import pytest
import ray

from ray_ladder import Ladder
from ray_ladder.cluster import grants, ray_private
from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.core.fleet import Fleet
from ray_ladder.fleet import get_arbiter, start_arbiter
from ray_ladder.testing import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

LADDER = Ladder.from_yaml("""
name: teams
policy: {probe_interval_s: 0.25}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}}
""")
FLEET = Fleet.from_yaml("""
fleet: it
control_period_s: 0.2
rungs: {h100: {resources: {ladder/h100: 1}}}
teams:
  - {name: a, quota: {h100: 2}, cohort: onprem}
  - {name: b, cohort: onprem, reclaim_grace_s: 6}
""")
SLOW = 60


def entry(team: str) -> dict:
    raw = ray_private.kv_get(grants.GRANTS_PREFIX + team, namespace=grants.KV_NAMESPACE)
    return json.loads(raw) if raw else {}


def held(team: str) -> tuple[int, int]:
    rung = entry(team).get("rungs", {}).get("h100", {})
    return rung.get("held", 0), rung.get("noticed", 0)


@pytest.fixture(scope="module")
def arbiter(local_cluster):
    local_cluster(ladder=LADDER, initial={"h100": 2, "a100": 1})
    handle = start_arbiter(FLEET)
    wait_until(lambda: entry("a") and entry("b"), SLOW, 0.1, "grants published")
    yield handle
    ray.kill(handle, no_restart=True)


def test_a_borrower_gets_idle_quota_then_a_notice_then_gives_the_units_back(arbiter) -> None:
    grants.report_demand("b", "app-b", {"h100": 2})
    wait_until(lambda: held("b") == (2, 0), SLOW, 0.1, "b borrows a's idle units")
    view = CapacityView(LADDER, follow_hook=False, team="b", refresh_interval_s=0.0)
    assert view.refresh().obtainable["h100"] is True
    grants.report_demand("a", "app-a", {"h100": 2})
    wait_until(lambda: held("b") == (2, 2), SLOW, 0.1, "a notice on both of b's units")
    snap = view.refresh()
    assert snap.obtainable["h100"] is False and snap.going_away["h100"] is not None
    assert "reclaim notice" in snap.why("h100")
    wait_until(lambda: held("a") == (2, 0) and held("b") == (0, 0), SLOW, 0.1,
               "the units go to a at the deadline")
    assert view.refresh().why("h100") == "no h100 unit granted to team b"
    status = ray.get(arbiter.status.remote())
    assert status["teams"]["a"]["rungs"]["h100"]["held"] == 2
    assert status["capacity"] == {"h100": 2}
    grants.report_demand("a", "app-a", {})
    grants.report_demand("b", "app-b", {})


def test_a_sigkill_of_the_arbiter_loses_no_grant(arbiter) -> None:
    grants.report_demand("a", "app-a", {"h100": 1})
    wait_until(lambda: held("a") == (1, 0), SLOW, 0.1, "a holds one unit")
    pid = ray.get(arbiter.__ray_call__.remote(lambda self: os.getpid()))
    os.kill(pid, signal.SIGKILL)
    # While it is down the entry stays: parts keep what they hold.
    assert held("a") == (1, 0)
    wait_until(lambda: get_arbiter() is not None
               and ray.get(get_arbiter().status.remote(), timeout=5)["restored"], SLOW, 0.5,
               "Ray restarts the arbiter, which resumes from the KV")
    restarted = ray.get(get_arbiter().status.remote())
    assert restarted["teams"]["a"]["rungs"]["h100"]["held"] == 1
    assert ray.get(get_arbiter().__ray_call__.remote(lambda self: os.getpid())) != pid
    grants.report_demand("a", "app-a", {})


def test_a_borrowing_task_moves_off_reclaimed_units_and_loses_no_call(arbiter) -> None:
    import time as _time

    from ray_ladder import ladder_task

    @ladder_task(LADDER, team="b", max_attempts=6)
    def work(i: int, *, rung) -> str:
        _time.sleep(0.3)
        return rung.name

    # b's calls are its demand: it borrows a's idle units while it has work.
    load = [work.remote(i) for i in range(60)]
    wait_until(lambda: held("b")[0] >= 1, SLOW, 0.1, "b borrows a's idle h100 units")
    wait_until(lambda: ray.get(work.remote(-1), timeout=SLOW) == "h100", SLOW, 0.1,
               "b's calls run on the borrowed units")
    grants.report_demand("a", "app-a", {"h100": 2})  # a's own work arrives
    notice = wait_until(lambda: entry("b")["rungs"]["h100"]["deadline"], SLOW, 0.05,
                        "b gets a notice")
    # b's ladder moves to a100 on the notice, before the deadline (moving frees the units
    # early: its demand for them drops).
    wait_until(lambda: ray.get(work.remote(-2), timeout=SLOW) == "a100", SLOW, 0.05,
               "b's new calls go to a100")
    assert _time.time() < notice, "b moved on the notice, not at the deadline"
    during = [work.remote(i) for i in range(10)]  # sent while the notice runs
    rungs = ray.get(load + during, timeout=3 * SLOW)
    assert len(rungs) == 70  # no call lost
    assert set(rungs[60:]) == {"a100"}  # nothing new lands on units being reclaimed
    wait_until(lambda: held("a") == (2, 0) and held("b") == (0, 0), SLOW, 0.1,
               "a holds its quota after the grace")
    grants.report_demand("a", "app-a", {})
