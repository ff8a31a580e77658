"""One ledger per team (issue 44 items 1 and 5), on a real LocalCluster behind the fleet
arbiter, three teams: team b runs **two parts at once** on a's two idle h100 units (a
Serve app under load, placed first, and a checkpointing Tune run), team c (no quota, no
cohort) runs task calls, and a's demand arrives in two steps. Each step's notice moves
exactly one unit's worth of b's work, the most recently placed part first (the Tune run
at its checkpoint, then the app), at each deadline the unit is physically free in Ray
(no part of b still runs on it), and c never gets an h100 unit and loses no call."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import cloudpickle
import httpx
import pytest
import ray
from ray import cloudpickle as ray_cloudpickle
from ray import serve

from ray_ladder import Ladder, ladder_task
from ray_ladder.core.fleet import Fleet
from ray_ladder.demo.teams.checkpoint import read_steps, steps_lost
from ray_ladder.fleet import start_arbiter
from ray_ladder.serve import build_app
from ray_ladder.testing import free_port, wait_until
from ray_ladder.testing.demand import steady_demand
from tests.fleet._team_train import team_tuner
from tests.fleet.test_arbiter_ray import Feeder, entry
from tests.fleet.test_teams_serve_ray import Load, Model

pytestmark = [pytest.mark.ray, pytest.mark.long, pytest.mark.timeout(600)]

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
  - {{name: c}}
""")
NODES = {"h100": {"num_cpus": 2, "resources": {"ladder/h100": 2}},
         "a100": {"num_cpus": 4, "resources": {"ladder/a100": 6}}}
SLOW = 120

for _pickler in (cloudpickle, ray_cloudpickle):
    _pickler.register_pickle_by_value(sys.modules[__name__])


@ladder_task(LADDER, team="c", max_attempts=6, num_cpus=0)
def c_work(i: int, *, rung) -> str:
    time.sleep(0.2)
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


def _step(wants: int, demand: Any) -> dict[str, Any]:
    """a's demand rises to ``wants`` units: the notice b gets, the parts it falls on, and
    the unit free in Ray after its deadline."""
    demand.set({"h100": wants})
    deadline = wait_until(
        lambda: entry("b")["rungs"]["h100"]["noticed"] >= 1
        and entry("b")["rungs"]["h100"]["held"] == 3 - wants
        and entry("b")["rungs"]["h100"]["deadline"], SLOW, 0.05,
        f"a notice to b for a's unit {wants}")
    noticed = {p: g["noticed"] for p, g in shares("b").items()}
    wait_until(lambda: time.time() > deadline + 1.0, GRACE_S + 10, 0.05)
    # past the deadline the unit is free in Ray, not only on paper
    wait_until(lambda: free_h100() >= wants, SLOW, 0.1,
               f"{wants} h100 unit(s) free in Ray after the deadline")
    return {"deadline": deadline, "noticed": noticed,
            "deadline_mono": time.monotonic() - (time.time() - deadline)}


def test_each_step_of_a_lenders_demand_frees_one_unit_of_a_two_part_borrower(
        cluster, tmp_path) -> None:
    quick = {"graceful_shutdown_timeout_s": 1.0}
    serve.run(build_app(LADDER, {"h100": Model, "a100": Model}, team="b",
                        deployment_options=dict.fromkeys(["h100", "a100"], quick)),
              name="b", route_prefix="/b")
    url = cluster + "/b"
    wait_until(lambda: httpx.post(url, json={}, timeout=30).headers.get("x-ladder-rung")
               == "h100", SLOW, 0.25, "b's app serves from a's idle h100")
    steps: list[dict[str, Any]] = []
    with Load(url, rate=10) as load:
        c_calls = Feeder(c_work, depth=2)  # team c's work: no h100 unit is ever its
        tuner, log, flag = team_tuner(LADDER, "b", tmp_path)  # b's second part, placed
        out: dict = {}                                      # after its app
        fit = threading.Thread(target=lambda: out.update(grid=tuner.fit()), daemon=True)
        fit.start()
        try:
            wait_until(lambda: sum(e["rung"] == "h100" for e in read_steps(log)) >= 5, SLOW,
                       0.1, "b's trial steps on its second h100 unit")
            parts = shares("b")
            assert len(parts) == 2 and "b" in parts, parts
            with steady_demand("a", "app-a", {}) as demand:
                steps.append(_step(1, demand))  # a's app arrives (one unit)
                first_moved = wait_until(lambda: next(
                    (e for e in read_steps(log) if e["rung"] == "a100"), None), SLOW, 0.1,
                    "b's trial resumed on a100")
                steps.append(_step(2, demand))  # a's tasks arrive (the second unit)
            wait_until(lambda: sum(r[0] > steps[-1]["deadline_mono"] + 1.0
                                   for r in load.results) >= 10, SLOW, 0.1,
                       "b's app answers after the second deadline")
        finally:
            flag.touch()
            fit.join(120)
            c_sent = c_calls.end()
    tune_part = next(p for p in parts if p != "b")
    assert steps[0]["noticed"] == {"b": 0, tune_part: 1}, steps  # the latest placed first
    assert steps[1]["noticed"].get("b") == 1, steps  # then the app
    entries = read_steps(log)
    assert steps_lost(entries) == 0  # the trial moved at its checkpoint
    assert max(e["time"] for e in entries if e["rung"] == "h100") < steps[0]["deadline"]
    assert first_moved["time"] < steps[0]["deadline"] + 1.0
    assert not fit.is_alive() and out["grid"][0].error is None
    assert [r for r in load.results if r[1] != 200] == []  # b's app lost no request
    after = [r[2] for r in load.results if r[0] > steps[1]["deadline_mono"] + 1.0]
    assert after and set(after) == {"a100"}, after  # the app gave its unit back at step 2
    c_rungs = ray.get([ref for _, ref in c_sent], timeout=3 * SLOW)
    assert len(c_rungs) == len(c_sent) and set(c_rungs) == {"a100"}  # c: none lost, no h100
