"""Budgets on a LocalCluster behind the fleet arbiter (issue 28): a Serve app of a team
with a tiny budget falls to its cheap rung once the budget is spent (demote), a reject
team's app answers 429 with Retry-After to the window's end, and a running Tune trial of
a team whose budget runs out leaves its dearer rung at its next checkpoint."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle
import httpx
import pytest
import ray
from ray import serve

from ray_ladder import Ladder
from ray_ladder.cluster import grants
from ray_ladder.core.fleet import Fleet
from ray_ladder.demo.teams.checkpoint import (
    EVERY,
    read_steps,
    runs,
    steps_lost,
    tune_fn,
)
from ray_ladder.fleet import start_arbiter
from ray_ladder.fleet.budget_watch import exhausted_to_demoted_s, read_entry, spent_at
from ray_ladder.serve import build_app
from ray_ladder.testing import free_port, wait_until
from tests.fleet._team_train import team_trainer

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
  - {name: d, quota: {h100: 1}, budget: {max_cost: 3, window_s: 3600, on_exhausted: demote}}
  - {name: e, quota: {h100: 1}, budget: {max_cost: 3, window_s: 3600, on_exhausted: demote}}
""")
#: Team d's Tune trials: a dearer rung, then the cheap one (neither is the shared h100).
TRIAL = Ladder.from_yaml("""
name: budgeted-trial
policy: {probe_interval_s: 0.25}
rungs:
  - {name: a100, resources: {ladder/a100: 1}, cost_per_hour: 4}
  - {name: cpu, resources: {ladder/cpu: 1}, cost_per_hour: 0.5}
""")
#: Team e's Train runs: the same two rungs, one worker each.
TRAIN = Ladder.from_yaml("""
name: budgeted-run
policy: {probe_interval_s: 0.25}
rungs:
  - {name: a100, resources: {ladder/a100: 1}, cost_per_hour: 4, train: {workers: 1}}
  - {name: cpu, resources: {ladder/cpu: 1}, cost_per_hour: 0.5, train: {workers: 1}}
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


def test_a_running_trial_leaves_the_rung_a_spent_budget_takes_at_its_checkpoint(
        cluster, tmp_path: Path) -> None:
    from ray import tune

    from ray_ladder.tune import Tuner, rung_history, with_ladder
    from ray_ladder.tune.lifecycle import BUDGET_DEMOTED

    log, flag = tmp_path / "steps.jsonl", tmp_path / "stop"
    tuner = Tuner(with_ladder(tune_fn, TRIAL, team="d"), param_space={"log": str(log)},
                  run_config=tune.RunConfig(
                      storage_path=str(tmp_path / "results"), verbose=0,
                      stop=lambda trial_id, result: flag.exists(),
                      failure_config=tune.FailureConfig(max_failures=3)))
    result = _spend_while_it_runs("d", log, flag, tuner.fit)[0]
    assert result.error is None
    spans = rung_history(result)
    assert [s.rung for s in spans] == ["a100", "cpu"], spans
    assert spans[0].ended_by == BUDGET_DEMOTED


def _spend_while_it_runs(team: str, log: Path, flag: Path, fit: Any) -> Any:
    """Run ``fit()`` in a thread; once the team's work steps on a100, its other work takes
    an h100 unit (1 a second against a budget of 3); wait for the work to move to cpu and
    check it moved at a checkpoint. ``fit()``'s result."""
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(result=fit()), daemon=True)
    thread.start()
    try:
        wait_until(lambda: sum(e["rung"] == "a100" for e in read_steps(log)) >= 5, SLOW,
                   0.1, f"{team}'s work steps on a100")
        assert grants.budget_state(read_entry(team)) == "ok"
        grants.report_demand(team, "spender", {"h100": 1})
        spent = spent_at(team, timeout_s=SLOW)
        first = wait_until(lambda: next((e for e in read_steps(log) if e["rung"] == "cpu"),
                                        None), SLOW, 0.05, f"{team}'s work resumed on cpu")
        wait_until(lambda: sum(e["rung"] == "cpu" and e["time"] > first["time"]
                               for e in read_steps(log)) >= EVERY + 5, SLOW, 0.1,
                   "a checkpoint on cpu (its results carry the ladder's history)")
    finally:
        flag.touch()
        thread.join(120)
        grants.report_demand(team, "spender", {})
    assert not thread.is_alive()
    _moved_at_a_checkpoint(log, spent, first)
    return out["result"]


def _moved_at_a_checkpoint(log: Path, spent: float, first: dict) -> None:
    entries = read_steps(log)
    last_a100 = max(e["step"] for e in entries if e["rung"] == "a100")
    print(f"spent -> first cpu step {first['time'] - spent:.2f} s")
    assert first["time"] > spent  # the budget moved it, nothing else
    cut = [(r[0]["rung"], r[0]["resumed_from"], r[-1]["step"], round(r[0]["time"] - spent, 2),
            round(r[-1]["time"] - spent, 2)) for r in runs(entries)]
    assert first["resumed_from"] == last_a100, cut  # at a checkpoint: no step lost
    assert steps_lost(entries) == 0 and len(runs(entries)) == 2
    assert not [e for e in entries if e["rung"] == "a100" and e["time"] > first["time"]]


def test_a_running_train_run_leaves_the_rung_a_spent_budget_takes_at_its_checkpoint(
        cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ray_ladder.train.lifecycle import budget_reason

    monkeypatch.setenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")  # the controller's poll
    trainer, log, flag = team_trainer(TRAIN, "e", tmp_path)
    result = _spend_while_it_runs("e", log, flag, trainer.fit)
    assert result.error is None
    assert result.ladder.path == ["a100", "cpu"]
    assert result.ladder.spans[0].ended_by == budget_reason("e")
    event = result.ladder.events[-1]
    assert event["cause"] == "lost" and "team e's budget is spent" in event["reason"]
