"""One ledger per team (issue 44 item 1), on a real LocalCluster behind the fleet arbiter:
team b runs **two parts at once** on a's two idle h100 units (a Serve app under load,
placed first, and task calls), and a's demand arrives in two steps. Each step's notice
moves exactly one unit's worth of b's work, the most recently placed part first, and at
each deadline the unit is physically free in Ray (no part of b still runs on it)."""

from __future__ import annotations

import sys
import time
from typing import Any

import cloudpickle
import httpx
import pytest
import ray
from ray import serve

from ray_ladder import Ladder, ladder_task
from ray_ladder.core.fleet import Fleet
from ray_ladder.fleet import start_arbiter
from ray_ladder.serve import build_app
from ray_ladder.testing import free_port, wait_until
from ray_ladder.testing.demand import steady_demand
from tests.fleet.test_arbiter_ray import Feeder, entry
from tests.fleet.test_teams_serve_ray import Load, Model

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

LADDER = Ladder.from_yaml("""
name: ledger
policy: {probe_interval_s: 0.25, pending_timeout_s: 10}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, num_cpus: 0}
  - {name: a100, resources: {ladder/a100: 1}, num_cpus: 0, quality: 0.9, standby_replicas: 1}
  - {name: shed, kind: shed}
""")
GRACE_S = 6.0
FLEET = Fleet.from_yaml(f"""
fleet: ledger-it
control_period_s: 0.25
rungs: {{h100: {{resources: {{ladder/h100: 1}}}}}}
teams:
  - {{name: a, quota: {{h100: 2}}, cohort: onprem}}
  - {{name: b, cohort: onprem, reclaim_grace_s: {GRACE_S}}}
""")
NODES = {"h100": {"num_cpus": 2, "resources": {"ladder/h100": 2}},
         "a100": {"num_cpus": 2, "resources": {"ladder/a100": 6}}}
SLOW = 120

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@ladder_task(LADDER, team="b", max_attempts=6, num_cpus=0)
def work(i: int, *, rung) -> str:
    time.sleep(0.3)
    return rung.name


def free_h100() -> float:
    """Units of h100 no work of anyone holds now, as Ray counts them."""
    return ray.available_resources().get("ladder/h100", 0.0)


def shares(team: str) -> dict[str, dict[str, int]]:
    return entry(team).get("rungs", {}).get("h100", {}).get("parts", {})


@pytest.fixture(scope="module")
def cluster(local_cluster: Any) -> Any:
    local_cluster(NODES)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    arbiter = start_arbiter(FLEET)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.kill(arbiter, no_restart=True)


def test_each_step_of_a_lenders_demand_frees_one_unit_of_a_two_part_borrower(cluster) -> None:
    quick = {"graceful_shutdown_timeout_s": 1.0}
    serve.run(build_app(LADDER, {"h100": Model, "a100": Model}, team="b",
                        deployment_options=dict.fromkeys(["h100", "a100"], quick)),
              name="b", route_prefix="/b")
    url = cluster + "/b"
    wait_until(lambda: httpx.post(url, json={}, timeout=30).headers.get("x-ladder-rung")
               == "h100", SLOW, 0.25, "b's app serves from a's idle h100")
    steps: list[dict[str, Any]] = []
    with Load(url, rate=10) as load:
        feeder = Feeder(work, depth=4)  # b's second part, placed after its app
        try:
            wait_until(lambda: ray.get(feeder.sent[-1][1], timeout=SLOW) == "h100", SLOW, 0.1,
                       "b's calls run on its second h100 unit")
            assert set(shares("b")) == {"b", "task:work"}, shares("b")
            with steady_demand("a", "app-a", {}) as demand:
                for wants in (1, 2):  # a's demand arrives in two steps
                    demand.set({"h100": wants})
                    deadline = wait_until(
                        lambda w=wants: entry("b")["rungs"]["h100"]["noticed"] >= 1
                        and entry("b")["rungs"]["h100"]["held"] == 3 - w
                        and entry("b")["rungs"]["h100"]["deadline"], SLOW, 0.05,
                        f"a notice to b for a's unit {wants}")
                    noticed = {p: g["noticed"] for p, g in shares("b").items()}
                    wait_until(lambda d=deadline: time.time() > d + 1.0, GRACE_S + 10, 0.05)
                    # past the deadline the unit is free in Ray, not only on paper
                    wait_until(lambda w=wants: free_h100() >= w, SLOW, 0.1,
                               f"{wants} h100 unit(s) free in Ray after the deadline")
                    steps.append({"deadline": deadline, "noticed": noticed,
                                  "deadline_mono": time.monotonic() - (time.time() - deadline)})
            wait_until(lambda: sum(r[0] > steps[-1]["deadline_mono"] + 1.0
                                   for r in load.results) >= 10, SLOW, 0.1,
                       "b's app answers after the second deadline")
        finally:
            sent = feeder.end()
    first, second = steps[0]["noticed"], steps[1]["noticed"]
    assert first == {"b": 0, "task:work": 1}, first  # the latest placed part moves first
    assert second.get("b") == 1, second  # then the app
    rungs = ray.get([ref for _, ref in sent], timeout=3 * SLOW)
    assert len(rungs) == len(sent)  # no call lost
    late = [r for (at, _), r in zip(sent, rungs, strict=True) if at > steps[0]["deadline"] + 1]
    assert late and set(late) == {"a100"}, late  # the tasks gave their unit back
    assert [r for r in load.results if r[1] != 200] == []  # b's app lost no request
    after = [r[2] for r in load.results if r[0] > steps[1]["deadline_mono"] + 1.0]
    assert after and set(after) == {"a100"}, after  # the app gave its unit back at step 2
