"""The fleet arbiter on a real LocalCluster: grants in Ray's KV, a reclaim as a notice a
team's CapacityView sees as going away, a SIGKILL of the arbiter losing no grant, and the
one node table it reads for every ladder."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from typing import Any

import pytest
import ray

from ray_ladder import Ladder
from ray_ladder.cluster import grants, ray_private
from ray_ladder.cluster.capacity import CapacityView, ray_node_states
from ray_ladder.cluster.node_table import SharedNodeTable
from ray_ladder.core.fleet import Fleet
from ray_ladder.fleet import get_arbiter, start_arbiter
from ray_ladder.testing import wait_until
from ray_ladder.testing.demand import steady_demand

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
def cluster(local_cluster):
    return local_cluster(ladder=LADDER, initial={"h100": 2, "a100": 1})


@pytest.fixture(scope="module")
def arbiter(cluster):
    handle = start_arbiter(FLEET)
    wait_until(lambda: entry("a") and entry("b"), SLOW, 0.1, "grants published")
    yield handle
    ray.kill(handle, no_restart=True)


def test_a_borrower_gets_idle_quota_then_a_notice_then_gives_the_units_back(arbiter) -> None:
    with contextlib.ExitStack() as demand:
        demand.enter_context(steady_demand("b", "app-b", {"h100": 2}))
        wait_until(lambda: held("b") == (2, 0), SLOW, 0.1, "b borrows a's idle units")
        view = CapacityView(LADDER, follow_hook=False, team="b", refresh_interval_s=0.0)
        assert view.refresh().obtainable["h100"] is True
        demand.enter_context(steady_demand("a", "app-a", {"h100": 2}))
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


def test_a_sigkill_of_the_arbiter_loses_no_grant(arbiter) -> None:
    with steady_demand("a", "app-a", {"h100": 1}):
        wait_until(lambda: held("a") == (1, 0), SLOW, 0.1, "a holds one unit")
        pid = ray.get(arbiter.__ray_call__.remote(lambda self: os.getpid()))
        os.kill(pid, signal.SIGKILL)
        # While it is down the entry stays: parts keep what they hold.
        assert held("a") == (1, 0)
        wait_until(lambda: get_arbiter() is not None
                   and ray.get(get_arbiter().status.remote(), timeout=5)["restored"], SLOW,
                   0.5, "Ray restarts the arbiter, which resumes from the KV")
        restarted = ray.get(get_arbiter().status.remote())
        assert restarted["teams"]["a"]["rungs"]["h100"]["held"] == 1
        assert ray.get(get_arbiter().__ray_call__.remote(lambda self: os.getpid())) != pid


class Feeder:
    """Keeps ``depth`` calls of a task outstanding from a thread (a team's steady work: its
    queued calls are its demand), recording each call's ref and when it was sent."""

    def __init__(self, task: Any, depth: int = 8) -> None:
        self.task, self.depth = task, depth
        self.sent: list[tuple[float, Any]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._feed, daemon=True)
        self.thread.start()

    def _feed(self) -> None:
        pending: list[Any] = []
        while not self.stop.is_set():
            while len(pending) < self.depth:
                ref = self.task.remote(len(self.sent))
                self.sent.append((time.time(), ref))
                pending.append(ref)
            _, pending = ray.wait(pending, num_returns=1, timeout=1.0)

    def end(self) -> list[tuple[float, Any]]:
        self.stop.set()
        self.thread.join(timeout=SLOW)
        return self.sent


def test_a_borrowing_task_moves_off_reclaimed_units_and_loses_no_call(arbiter) -> None:
    from ray_ladder import ladder_task

    @ladder_task(LADDER, team="b", max_attempts=6)
    def work(i: int, *, rung) -> str:
        time.sleep(0.3)
        return rung.name

    with contextlib.ExitStack() as demand:  # a's demand, from its arrival to the end
        # b's queued calls are its demand: it borrows a's idle units while it has work.
        feeder = Feeder(work)
        try:
            wait_until(lambda: held("b")[0] >= 1, SLOW, 0.1, "b borrows a's idle h100 units")
            wait_until(lambda: ray.get(feeder.sent[-1][1], timeout=SLOW) == "h100", SLOW, 0.1,
                       "b's calls run on the borrowed units")
            demand.enter_context(steady_demand("a", "app-a", {"h100": 2}))  # a's own work
            deadline = wait_until(lambda: entry("b")["rungs"]["h100"]["deadline"], SLOW, 0.05,
                                  "b gets a notice")
            wait_until(lambda: feeder.sent[-1][0] > deadline + 1.0, SLOW, 0.05,
                       "b keeps sending calls past the notice's deadline")
        finally:
            sent = feeder.end()
        rungs = ray.get([ref for _, ref in sent], timeout=3 * SLOW)
        assert len(rungs) == len(sent)  # no call lost
        # b's ladder moved to a100 on the notice, before the deadline (moving frees the units
        # early: its demand for them drops): its last call placed on h100 was sent before the
        # deadline, and calls sent before the deadline already ran on a100.
        placed = list(zip((at for at, _ in sent), rungs, strict=True))
        assert max(at for at, rung in placed if rung == "h100") < deadline
        assert any(rung == "a100" and at < deadline for at, rung in placed), placed
        wait_until(lambda: held("a") == (2, 0) and held("b") == (0, 0), SLOW, 0.1,
                   "a holds its quota after the grace")


def alive(nodes: list) -> set[str]:
    return {n.node_id for n in nodes if n.alive}


def test_every_ladder_reads_the_one_node_table_the_arbiter_publishes(arbiter, cluster) -> None:
    """A reader refreshing every second uses the arbiter's table (no GCS read of its own)
    and sees a node join and a node's SIGKILL through it."""
    table = SharedNodeTable(1.0)
    wait_until(lambda: alive(table()) == alive(ray_node_states()) and table.last == "shared",
               SLOW, 0.1, "the arbiter's table, as the GCS has it")
    extra = cluster.add_node("a100")
    wait_until(lambda: extra.node_id in alive(table()) and table.last == "shared", SLOW, 0.1,
               "the new node in the shared table")
    view = CapacityView(LADDER, follow_hook=False, refresh_interval_s=1.0, node_source=table)
    assert view.refresh().rungs["a100"].total == 2
    cluster.remove_node(extra)  # SIGKILL: a preemption
    wait_until(lambda: view.refresh().rungs["a100"].total == 1 and table.last == "shared",
               SLOW, 0.1, "the node's death in the shared table")
    assert table.reads["shared"] > table.reads["gcs"]
    assert ray.get(arbiter.status.remote())["node_tables_published"] > 0
