"""Budgets on a LocalCluster behind the fleet arbiter (issue 28): a Serve app of a team
with a tiny budget falls to its cheap rung once the budget is spent (demote), and a
reject team's app answers 429 with Retry-After to the window's end."""

from __future__ import annotations

import sys
import threading
import time

import cloudpickle
import httpx
import pytest
import ray
from ray import serve

from ray_ladder import Ladder
from ray_ladder.core.fleet import Fleet
from ray_ladder.fleet import start_arbiter
from ray_ladder.fleet.budget_watch import exhausted_to_demoted_s, read_entry, spent_at
from ray_ladder.serve import build_app
from ray_ladder.testing import free_port, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

LADDER = Ladder.from_yaml("""
name: budgeted
# pending_timeout_s 30: a request in flight when the budget runs out waits for the cold
# cpu rung's first replica, which can take over 10 s on two busy cores
policy: {probe_interval_s: 0.25, pending_timeout_s: 30}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, cost_per_hour: 12}
  - {name: a100, resources: {ladder/a100: 1}, cost_per_hour: 4, quality: 0.9}
  - {name: cpu, resources: {ladder/cpu: 1}, cost_per_hour: 0.5, quality: 0.5}
  - {name: shed, kind: shed}
""")
# one h100 unit costs 1 a second: b spends 12 in about 12 s of holding one, c 2 in 2 s
FLEET = Fleet.from_yaml("""
fleet: budget-it
control_period_s: 0.25
rungs: {h100: {resources: {ladder/h100: 1}, cost_per_hour: 3600}}
teams:
  - {name: b, quota: {h100: 1}, budget: {max_cost: 12, window_s: 3600, on_exhausted: demote}}
  - {name: c, quota: {h100: 1}, budget: {max_cost: 2, window_s: 3600, on_exhausted: reject}}
""")
SLOW = 180


class Model:
    def __init__(self, rung):
        self.rung = rung

    def __call__(self, payload):
        return {"rung": self.rung.name}


cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster(local_cluster):
    local_cluster(ladder=LADDER, initial={"h100": 2, "a100": 2, "cpu": 2})
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    arbiter = start_arbiter(FLEET)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.kill(arbiter, no_restart=True)


def _app(team: str) -> None:
    quick = {"graceful_shutdown_timeout_s": 2.0}
    serve.run(build_app(LADDER, {n: Model for n in ("h100", "a100", "cpu")}, team=team,
                        deployment_options=dict.fromkeys(["h100", "a100", "cpu"], quick)),
              name=team, route_prefix=f"/{team}")


def test_a_spent_demote_budget_falls_to_the_cheap_rung_and_reject_answers_429(cluster):
    _app("c")  # c spends its budget while b's app starts
    _app("b")
    b_url, c_url = cluster + "/b", cluster + "/c"
    wait_until(lambda: httpx.post(b_url, json={}, timeout=30).status_code == 200, SLOW, 0.1,
               "b's app answers")
    answers: list[tuple[float, int, str | None]] = []
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(timeout=60) as client:
            while not stop.is_set():
                try:
                    r = client.post(b_url, json={})
                    answers.append((time.time(), r.status_code, r.headers.get("x-ladder-rung")))
                except httpx.HTTPError:
                    answers.append((time.time(), -1, None))
                stop.wait(0.05)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    try:
        spent = spent_at("b", timeout_s=SLOW)
        wait_until(lambda: any(t > spent and rung == "cpu" for t, _, rung in answers),
                   60, 0.05, "b answered from cpu after its budget was spent")
        settled = time.time()
        wait_until(lambda: sum(t > settled for t, _, _ in answers) >= 10, 60, 0.05,
                   "b's answers after the demotion")
    finally:
        stop.set()
        thread.join(timeout=90)
    before = [rung for t, code, rung in answers if t < spent and code == 200]
    after = [rung for t, code, rung in answers if t > settled]
    demoted_s = exhausted_to_demoted_s(spent, [(t, r) for t, _, r in answers], {"cpu"})
    print(f"budget_exhausted_to_demoted_s={demoted_s}")
    # Dearer rungs while the budget was ok. (On a loaded machine b's replicas may still be
    # starting when its 12 s of budget run out: then no answer came before, which is fine.)
    assert set(before) <= {"h100", "a100"}, before
    assert set(after) == {"cpu"}, after  # a100 is held by the budget, h100 ungranted
    assert all(code == 200 for _, code, _ in answers), [a for a in answers if a[1] != 200]
    assert demoted_s is not None and demoted_s < 30, demoted_s

    wait_until(lambda: (read_entry("c") or {}).get("budget") == "reject", SLOW, 0.1,
               "c's budget is spent")

    def refused() -> httpx.Response | None:
        r = httpx.post(c_url, json={}, timeout=30)
        return r if r.status_code == 429 else None

    r = wait_until(refused, 60, 0.25, "c's app answers 429")
    until = read_entry("c")["budget_until"]
    assert 0 < int(r.headers["retry-after"]) <= 3600
    assert abs(int(r.headers["retry-after"]) - (until - time.time())) < 30
    body = r.json()
    assert body["team"] == "c" and body["attempts"][-1]["cause"] == "budget"
