"""The Serve ladder keeps serving through the death of its own parts: the router replica,
Serve's controller and the autoscaler hook (each a real SIGKILL under steady load)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import NamedTuple

import cloudpickle
import httpx
import pytest
import ray
from ray import serve

from ray_ladder import Ladder
from ray_ladder.autoscale.hook import HOOK_NAMESPACE, hook_name, start_hook, stop_hook
from ray_ladder.serve import build_app
from ray_ladder.testing import free_port, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

# pending_timeout_s 30: the a100 replica's restart must fit inside it for requests to wait
# for it (a fresh-clone CI run on a loaded machine took over 10 s: one request shed).
LADDER = Ladder.from_yaml("""
name: faults-serve
policy: {promotion_hysteresis: 2, probe_interval_s: 0.25, pending_timeout_s: 30}
rungs:
  - {name: a100, resources: {ladder/a100: 1}, quality: 1.0, params: {model: big}}
  - {name: cpu, num_cpus: 0.1, standby_replicas: 1, quality: 0.5, params: {model: small}}
  - {name: shed, kind: shed, quality: 0.0}
""")
SLOW = 120


class Model:
    """A rung class that names its model."""

    def __init__(self, rung):
        self.rung = rung

    def __call__(self, payload):
        return {"echo": payload, "model": self.rung.params["model"]}


cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Sent(NamedTuple):
    """One request as its client saw it (``time.monotonic()`` clock)."""

    sent: float
    done: float
    status: int  # -1: no HTTP answer
    rung: str | None  # X-Ladder-Rung, or the client's error class

    def spans(self, t: float, slack_s: float = 0.05) -> bool:
        """Was it in flight at ``t``? (As bench/soak.py reads it, with 50 ms of slack.)"""
        return self.sent - slack_s <= t <= self.done + slack_s


class Load:
    """POSTs at ``rate`` per second until stopped, one at a time; keeps each :class:`Sent`.
    """

    def __init__(self, url: str, rate: float = 20.0,
                 headers: dict[str, str] | None = None) -> None:
        self.url, self.rate, self.headers = url, rate, headers or {}
        self.results: list[Sent] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        client = httpx.Client(timeout=60)
        start = time.monotonic()
        i = 0
        while not self._stop.is_set() and time.monotonic() - start < 300:
            sent = time.monotonic()
            try:
                r = client.post(self.url + "/", json={"i": i}, headers=self.headers)
                self.results.append(Sent(sent, time.monotonic(), r.status_code,
                                         r.headers.get("x-ladder-rung")))
            except httpx.HTTPError as err:
                self.results.append(Sent(sent, time.monotonic(), -1, type(err).__name__))
            i += 1
            self._stop.wait(max(0.0, start + i / self.rate - time.monotonic()))

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=90)

    def answered_after(self, t: float) -> int:
        return sum(1 for r in list(self.results) if r.sent > t and r.status == 200)

    def failed(self) -> list[Sent]:
        return [r for r in self.results if r.status != 200]


def actor_pid(name: str, namespace: str) -> int:
    handle = ray.get_actor(name, namespace=namespace)
    return ray.get(handle.__ray_call__.remote(lambda self: os.getpid()), timeout=SLOW)


def replicas(deployment: str) -> list[str]:
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["namespace"] == "serve"
                  and a["name"].startswith("SERVE_REPLICA::faults#")
                  and a["name"].split("#")[1] == deployment)


def router_replicas() -> list[str]:
    return replicas("LadderRouter")


@pytest.fixture(scope="module")
def app(local_cluster):
    cluster = local_cluster(ladder=LADDER)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    quick = {"graceful_shutdown_timeout_s": 1.0}
    serve.run(build_app(LADDER, {"a100": Model, "cpu": Model},
                        deployment_options=dict.fromkeys(["a100", "cpu"], quick)),
              name="faults")
    start_hook(LADDER, {"interval_s": 0.5})
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: httpx.post(url + "/", json={}).headers.get("x-ladder-rung") == "a100",
               SLOW, 0.2, "serving on a100")
    try:
        yield url
    finally:
        stop_hook(LADDER.name)
        serve.shutdown()
    del cluster


def kill_under_load(url: str, name: str, namespace: str,
                    headers: dict[str, str] | None = None) -> tuple[Load, float]:
    """SIGKILL actor ``name`` while 20 req/s flow; return the load (once 40 more requests
    were answered after the kill) and the kill's time."""
    pid = actor_pid(name, namespace)
    with Load(url, headers=headers) as load:
        wait_until(lambda: load.answered_after(0) >= 20, SLOW, 0.05, "load flowing")
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_until(lambda: load.answered_after(killed_at) >= 40, SLOW, 0.05,
                   "answers after the kill")
    return load, killed_at


def test_sigkill_of_the_router_replica_under_load_fails_only_a_request_inside_it(app):
    # A request inside the router replica at its SIGKILL gets Serve's proxy's 500 (it
    # does not re-send what a replica took; docs/reliability.md): counted apart, as
    # bench/soak.py does, so only a 500 in flight at the kill may fail. The client sends
    # one request at a time: that is the request in flight then (or, within the 50 ms
    # slack, its neighbour); every other request must be answered.
    (replica,) = router_replicas()
    old_pid = actor_pid(replica, "serve")
    load, killed_at = kill_under_load(app, replica, "serve")
    in_router = [r for r in load.failed() if r.status == 500 and r.spans(killed_at)]
    assert [r for r in load.failed() if r not in in_router] == []
    # Serve's controller started a replacement replica.
    wait_until(lambda: router_replicas() and actor_pid(router_replicas()[0], "serve") != old_pid,
               SLOW, 0.2, "a new router replica")


def test_sigkill_of_the_serve_controller_under_load_fails_no_request(app):
    load, _ = kill_under_load(app, "SERVE_CONTROLLER_ACTOR", "serve")
    assert load.failed() == []
    wait_until(lambda: serve.status().applications["faults"].status == "RUNNING",
               SLOW, 0.2, "the restarted controller reports the app running")


def test_sigkill_of_the_autoscaler_hook_under_load_fails_no_request(app):
    hook = ray.get_actor(hook_name(LADDER.name), namespace=HOOK_NAMESPACE)
    old_pid = actor_pid(hook_name(LADDER.name), HOOK_NAMESPACE)
    load, _ = kill_under_load(app, hook_name(LADDER.name), HOOK_NAMESPACE)
    assert load.failed() == []
    # Ray restarted the hook (max_restarts=-1); it steps again from its published state.
    wait_until(lambda: actor_pid(hook_name(LADDER.name), HOOK_NAMESPACE) != old_pid
               and ray.get(hook.state.remote(), timeout=SLOW).get("serving") == "a100",
               SLOW, 0.2, "the restarted hook serving a100")


def test_requests_wait_for_the_replica_of_their_only_rung_to_restart(app):
    # Min quality 0.9 leaves a100 (and shed): while its one replica restarts on a live
    # node there is nothing to fall to, and the ladder must not shed a request that
    # Serve itself would queue for the replacement replica.
    (replica,) = replicas("a100")  # a rung deployment is named after its rung
    load, _ = kill_under_load(app, replica, "serve", headers={"X-Ladder-Min-Quality": "0.9"})
    assert load.failed() == []
    assert {r.rung for r in load.results} == {"a100"}
