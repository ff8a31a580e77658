"""`ray-ladder status`, `events` and `timeline` against a real cluster running a Serve ladder
app and a `@ladder_task` driver at once, before and after a node kill."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import cloudpickle
import httpx
import pytest
import ray
from ray import serve

from ray_ladder import Ladder, ladder_task
from ray_ladder.serve import build_app
from ray_ladder.testing import LocalCluster, free_port, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

SERVE = Ladder.from_yaml("""
name: web
policy: {probe_interval_s: 0.25, pending_timeout_s: 5, max_degraded_seconds: 2}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, cost_per_hour: 10}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9, cost_per_hour: 4,
     standby_replicas: 1}
  - {name: shed, kind: shed, quality: 0}
""")
TASKS = Ladder.from_yaml("""
name: batch
policy: {probe_interval_s: 0.2, pending_timeout_s: 5}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: cpu, num_cpus: 1, label_selector: {ladder.node-type: head}, quality: 0.5}
""")
#: Observed every 10 s: its entry is in `status` at once only because its first answer
#: publishes it (tpu: no node has it, so it is unobtainable with a reason).
FIRST = Ladder.from_yaml("""
name: first
policy: {probe_interval_s: 10}
rungs:
  - {name: tpu, resources: {ladder/tpu: 1}}
  - {name: cpu, num_cpus: 1, label_selector: {ladder.node-type: head}, quality: 0.5}
""")
SLOW = 120  # deadlines for a small shared machine


class Model:
    def __init__(self, rung):
        self.rung = rung

    def __call__(self, payload):
        return {"rung": self.rung.name}


cloudpickle.register_pickle_by_value(sys.modules[__name__])


@ladder_task(TASKS)
def work(x, *, rung):
    return rung.name


@ladder_task(FIRST)
def first(x, *, rung):
    return rung.name


class Live:
    def __init__(self, cluster: LocalCluster, port: int) -> None:
        self.cluster = cluster
        self.url = f"http://127.0.0.1:{port}"
        self.client = httpx.Client(timeout=30)

    def router(self) -> dict[str, Any]:
        return self.client.get(self.url + "/-/ladder").json()

    def traffic(self, n: int = 10) -> None:
        for i in range(n):
            self.client.post(self.url + "/", json={"i": i})
        ray.get([work.remote(i) for i in range(n)])

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ray_ladder.cli", *args, "--address",
                               self.cluster.address], capture_output=True, text=True,
                              timeout=60)

    def users(self) -> list[dict[str, Any]]:
        """The report's ladders."""
        proc = self.cli("status", "--json")
        assert proc.returncode in (0, 1), proc.stderr
        return json.loads(proc.stdout)["ladders"]

    def status(self) -> dict[str, dict[str, Any]]:
        """The report's ladders by part (one Serve app, one task here), task `first` left
        out."""
        return {u["part"]: u for u in self.users() if u["ladder"] != "first"}


@pytest.fixture(scope="module")
def live(local_cluster):
    # Room for the Serve replica and a task on each node (they share the rung's resource).
    nodes = {n: {"num_cpus": 2, "resources": {f"ladder/{n}": 2}} for n in ("h100", "a100")}
    cluster = local_cluster(nodes)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    proxy_location="HeadOnly")
        quick = {"graceful_shutdown_timeout_s": 1.0}
        serve.run(build_app(SERVE, {"h100": Model, "a100": Model},
                            deployment_options={"h100": quick, "a100": quick}),
                  name="webapp")
        app = Live(cluster, port)
        wait_until(lambda: app.router()["current"] == "h100"
                   and app.router()["rungs"][1]["running_replicas"] >= 1,
                   SLOW, 0.2, "router on h100 with a warm a100")
        yield app
    finally:
        serve.shutdown()


def rung(user: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in user["rungs"] if r["name"] == name)


def test_status_right_after_a_tasks_first_answer_lists_it_and_says_why_not(live):
    # The first call of this driver: its orchestrator observes every 10 s, so only the
    # answer itself can have published the entry `status` reads a moment later.
    assert ray.get(first.remote(0)) == "cpu"
    task = next(u for u in live.users() if u["ladder"] == "first")
    assert (task["part"], task["source"], task["current"]) == ("task", "first", "cpu")
    assert rung(task, "cpu")["served_1m"] == 1
    assert rung(task, "tpu")["why"] == {"cause": "no_node",
                                        "reason": "no alive node can host it"}
    people = live.cli("status")
    assert "no (no node)" in people.stdout
    assert "tpu is unobtainable: no alive node can host it" in people.stdout


def test_status_finds_the_app_and_the_task_driver_without_joining_the_cluster(live):
    live.traffic()
    jobs, actors = len(ray._private.state.jobs()), len(ray._private.state.actors())

    def both_on_h100():
        users = live.status()
        ok = {"serve", "task"} <= set(users) and all(
            u["current"] == "h100" and rung(u, "h100")["served_1m"] > 0
            for u in users.values())
        return users if ok else None

    users = wait_until(both_on_h100, SLOW, 0.5, "status shows both users on h100")
    app, task = users["serve"], users["task"]
    assert (app["ladder"], app["source"], task["ladder"], task["source"]) == \
        ("web", "webapp", "batch", "work")
    assert app["degraded_s"] == 0.0 and app["alert_fired"] is False
    assert task["degraded_s"] == 0.0 and task["job_id"] == ray.get_runtime_context().get_job_id()
    h100 = rung(app, "h100")
    assert (h100["obtainable"], h100["nodes"], h100["replicas"]) == (True, 1, 1)
    assert rung(app, "a100")["replicas"] == 1  # the standby
    assert rung(task, "cpu")["nodes"] == 1
    # Each rung's share of the last minute's answers: h100 has one, and they add up to at
    # most 1 (the rest unanswered). How large h100's is depends on the machine (a100
    # answers what a busy machine's h100 was slow to take, and the start-up's traffic):
    # bench/status.py's goals web_h100_share_1m_ge_0_5 and batch_h100_share_1m_1.
    for user in (app, task):
        shares = [r["share_1m"] for r in user["rungs"] if r["share_1m"] is not None]
        assert 0 < rung(user, "h100")["share_1m"] <= 1 and sum(shares) <= 1.001, user["rungs"]
    # Read-only: no driver (job) and no actor was added by the command.
    assert (len(ray._private.state.jobs()), len(ray._private.state.actors())) == (jobs, actors)

    people = live.cli("status")
    assert people.returncode == 0, people.stderr
    assert "ladder web (serve webapp): on h100" in people.stdout
    assert "ladder batch (task work): on h100" in people.stdout


def test_status_follows_a_node_kill_and_the_climb_back(live, tmp_path: Path):
    live.cluster.remove_node(live.cluster.nodes("h100")[0])  # SIGKILL: a preemption

    def fallen():
        live.traffic(3)
        users = live.status()
        app, task = users.get("serve"), users.get("task")
        ok = (app and task and app["current"] == "a100" and task["current"] == "cpu"
              and app["alert_fired"] and task["degraded_s"] > 0)
        return users if ok else None

    users = wait_until(fallen, SLOW, 0.5, "status shows the fall and the alert")
    app, task = users["serve"], users["task"]
    assert app["degraded_s"] > 2.0  # max_degraded_seconds: the alert fired
    for user in (app, task):
        h100 = rung(user, "h100")
        assert (h100["obtainable"], h100["nodes"]) == (False, 0)
        assert h100["why"]["cause"] in ("no_node", "down")  # the router may mark it down
        moves = [(e["from"], e["to"]) for e in user["last_transitions"]
                 if e["kind"] == "transition"]
        assert moves[-1] == ("h100", user["current"])
    assert rung(task, "h100")["why"]["cause"] == "no_node"
    assert [e["kind"] for e in app["last_transitions"]][-1] == "alert"
    later = wait_until(lambda: (s := live.status()) and s["task"]["degraded_s"]
                       > task["degraded_s"] and s, SLOW, 0.5, "degraded time grows")
    assert later["task"]["current"] == "cpu"

    # The events outlive the processes that saw them: read them back from the cluster.
    proc = live.cli("events", "--json", "--since", "10m")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    falls = {(e["part"], e["ladder"], e["to"]) for e in events
             if e["kind"] == "transition" and e["from"] == "h100"}
    assert {("serve", "web", "a100"), ("task", "batch", "cpu")} <= falls
    assert any(e["kind"] == "alert" and e["ladder"] == "web" for e in events)
    only = live.cli("events", "--ladder", "batch")
    assert only.returncode == 0 and " web " not in only.stdout and "h100 -> cpu" in only.stdout

    live.cluster.add_node("h100")

    def climbed():
        live.traffic(3)
        users = live.status()
        return all(users[p]["current"] == "h100" and users[p]["degraded_s"] == 0.0
                   for p in ("serve", "task")) and users

    users = wait_until(climbed, SLOW, 0.5, "status shows both back on h100")
    assert rung(users["serve"], "h100")["nodes"] == 1
    drawn = live.cli("timeline", "-o", str(tmp_path / "timeline.png"))
    assert drawn.returncode == 0, drawn.stderr
    assert (tmp_path / "timeline.png").stat().st_size > 10_000
