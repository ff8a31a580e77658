"""Cloud only when on-prem is full, on Ray's real autoscaler with the fake provider.

Two on-prem h100 units (static, on the head) are team a's quota; team b has none and a
cloud a100 rung (a fake autoscaler node type). b borrows both h100 units; a's demand
arrives, the arbiter sends b a notice, b's ladder falls and the hook asks for the cloud
rung, only then; a's demand goes, b is granted h100 again, its ladder climbs home and the
cloud node is given back (Ray's idle timeout). No task of b's is lost.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from ray_ladder import Ladder
from ray_ladder.autoscale.teams import CloudSample, cloud_figures
from ray_ladder.core.fleet import Fleet
from ray_ladder.testing import wait_until
from tests.autoscale._fake import Consumer
from tests.autoscale._fake import hook_state as _state

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

LADDER = Ladder.from_yaml("""
name: b-work
policy: {promotion_hysteresis: 2, probe_interval_s: 0.25}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100-cloud, resources: {ladder/a100: 1}, quality: 0.9}
  - {name: cpu, num_cpus: 0, resources: {ladder/cpu: 1}, quality: 0.5}
""")
FLEET = Fleet.from_yaml("""
fleet: cloud-it
control_period_s: 0.25
rungs:
  h100: {resources: {ladder/h100: 1}}
  a100-cloud: {resources: {ladder/a100: 1}, cloud: true, cost_per_hour: 4}
teams:
  - {name: a, quota: {h100: 2}, cohort: onprem}
  - {name: b, cohort: onprem, reclaim_grace_s: 3}
""")
OPTIONS = {"node_types": {"h100": [], "a100-cloud": ["a100"]}, "interval_s": 0.25,
           "drain_s": 1.0, "provision_timeout_s": 120.0}
CLOUD = {"ladder/a100": 1.0}
UNITS = 2


@pytest.fixture(scope="module")
def cluster():
    import ray

    from ray_ladder.autoscale.fake.cluster import FakeAutoscalingCluster, fake_worker_type

    c = FakeAutoscalingCluster(
        {"a100": fake_worker_type({"ladder/a100": 1}, labels={"ladder.node-type": "a100"})},
        head_resources={"CPU": 2, "ladder/h100": UNITS, "ladder/cpu": 8},
        idle_timeout_minutes=0.1)
    c.start()
    try:
        ray.init(address=c.address, logging_level="WARNING", log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


class Timeline:
    """Reports both teams' demand and samples what the test asserts, every 0.2 s."""

    def __init__(self, hook: Any) -> None:
        self.hook = hook
        self.demand = {"a": 0, "b": UNITS}
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def set_a(self, units: int) -> float:
        """a's demand from now on; returns when (the ground truth changes here)."""
        from ray_ladder.cluster.grants import report_demand

        self.demand["a"] = units
        report_demand("a", "test", {"h100": units})
        return time.time()

    def _run(self) -> None:
        import ray

        from ray_ladder.cluster.grants import report_demand

        while not self._stop.wait(0.2):
            for team, units in self.demand.items():
                report_demand(team, "test", {"h100": units})
            state = _state(self.hook)
            cloud = sum(1 for n in ray.nodes() if n["Alive"]
                        and n["Labels"].get("ladder.node-type") == "a100")
            # ground truth: b may borrow every h100 unit a does not want
            self.samples.append({"time": time.time(), "serving": state.get("serving"),
                                 "asked": CLOUD in (state.get("request") or []),
                                 "cloud_nodes": cloud, "free": self.demand["a"] < UNITS})

    def __enter__(self) -> Timeline:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def latest(self) -> dict[str, Any]:
        return self.samples[-1] if self.samples else {}


def test_cloud_is_bought_only_while_on_prem_is_full_and_given_back(cluster) -> None:
    from ray_ladder.autoscale import start_hook, stop_hook
    from ray_ladder.cluster.grants import GrantReader, report_demand
    from ray_ladder.fleet import start_arbiter

    began = time.monotonic()
    start_arbiter(FLEET)
    report_demand("b", "test", {"h100": UNITS})
    grants = GrantReader()
    wait_until(lambda: (grants.get("b") or {}).get("rungs", {}).get("h100", {}).get("held")
               == UNITS, timeout_s=60, message="b never borrowed a's idle h100 units")
    hook = start_hook(LADDER, OPTIONS, team="b", detached=False)
    try:
        with Timeline(hook) as line, Consumer(hook, LADDER) as work:
            wait_until(lambda: line.latest().get("serving") == "h100", timeout_s=60,
                       message="b's ladder never served from its borrowed h100")
            settle = time.time() + 2.0  # b runs on borrowed units a while: no cloud ask
            wait_until(lambda: line.latest().get("time", 0) > settle, timeout_s=60)
            reclaim_at = line.set_a(UNITS)
            wait_until(lambda: line.latest().get("serving") == "a100-cloud", timeout_s=90,
                       message="b never moved to the cloud rung after the reclaim")
            home_at = line.set_a(0)
            wait_until(lambda: line.latest().get("serving") == "h100", timeout_s=60,
                       message="b never climbed home to h100")
            wait_until(lambda: line.latest().get("cloud_nodes") == 0
                       and not line.latest()["asked"], timeout_s=90,
                       message="the cloud node was not given back")
        answers = work.results()
    finally:
        stop_hook(LADDER.name)
    samples = line.samples
    launches = [e for e in cluster.events() if e["event"] == "launching"]
    # the hook asked for the cloud rung only after a's reclaim, and never before it
    assert not any(s["asked"] or s["cloud_nodes"] for s in samples if s["time"] < reclaim_at)
    assert launches and all(e["time"] >= reclaim_at for e in launches)
    assert len(launches) == 1  # once: on-prem freed before a second could be bought
    # b's work moved to the cloud and came home; nothing was lost
    rungs = {rung for rung, _ in answers}
    assert {"h100", "a100-cloud"} <= rungs
    assert all(node == "a100" for rung, node in answers if rung == "a100-cloud")
    figures = cloud_figures([CloudSample(s["time"], s["cloud_nodes"], s["free"])
                             for s in samples])
    assert figures["cloud_node_s_while_onprem_free"] == 0.0
    assert figures["cloud_node_s"] > 0
    climb = next(s["time"] for s in samples if s["time"] > home_at and s["serving"] == "h100")
    print(f"\nteams cloud: {figures}; reclaim -> cloud serving "
          f"{next(s['time'] for s in samples if s['serving'] == 'a100-cloud') - reclaim_at:.1f} s"
          f", on-prem free -> climbed home {climb - home_at:.1f} s; module "
          f"{time.monotonic() - began:.1f} s; {len(answers)} tasks, 0 lost")
