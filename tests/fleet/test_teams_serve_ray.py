"""Two teams' Serve ladder apps on one LocalCluster behind the fleet arbiter: team b
borrows team a's idle h100 unit; a's app arrives; b's traffic moves to a100 on the
reclaim notice, loses no request, and a serves from h100 once the grace is over."""

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
from ray_ladder.serve import build_app
from ray_ladder.testing import free_port, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

LADDER = Ladder.from_yaml("""
name: shared
policy: {probe_interval_s: 0.25, pending_timeout_s: 10}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9, standby_replicas: 1}
  - {name: shed, kind: shed}
""")
GRACE_S = 4.0
FLEET = Fleet.from_yaml(f"""
fleet: serve-it
control_period_s: 0.25
rungs: {{h100: {{resources: {{ladder/h100: 1}}}}}}
teams:
  - {{name: a, quota: {{h100: 1}}, cohort: onprem}}
  - {{name: b, cohort: onprem, reclaim_grace_s: {GRACE_S}}}
""")
SLOW = 180


class Model:
    def __init__(self, rung):
        self.rung = rung

    def __call__(self, payload):
        return {"rung": self.rung.name}


cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Load:
    """Posts to one app at a steady rate, bounded in count and time."""

    def __init__(self, url: str, rate: float = 10.0, max_s: float = 240.0) -> None:
        self.url, self.rate, self.max_s = url, rate, max_s
        self.results: list[tuple[float, int, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        client = httpx.Client(timeout=60)
        start = time.monotonic()
        i = 0
        while not self._stop.is_set() and time.monotonic() - start < self.max_s:
            sent = time.monotonic()
            try:
                r = client.post(self.url, json={"i": i})
                self.results.append((sent, r.status_code, r.headers.get("x-ladder-rung")))
            except httpx.HTTPError as err:
                self.results.append((sent, -1, type(err).__name__))
            i += 1
            self._stop.wait(max(0.0, start + i / self.rate - time.monotonic()))

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=90)


def _rung(url: str) -> str | None:
    try:
        return httpx.post(url, json={}, timeout=30).headers.get("x-ladder-rung")
    except httpx.HTTPError:
        return None


@pytest.fixture(scope="module")
def cluster(local_cluster):
    local_cluster(ladder=LADDER, initial={"h100": 1, "a100": 2})
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    arbiter = start_arbiter(FLEET)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.kill(arbiter, no_restart=True)


def test_a_lender_gets_its_unit_back_and_the_borrower_loses_no_request(cluster) -> None:
    quick = {"graceful_shutdown_timeout_s": 5.0}
    options = dict.fromkeys(["h100", "a100"], quick)
    serve.run(build_app(LADDER, {"h100": Model, "a100": Model}, team="b",
                        deployment_options=options), name="b", route_prefix="/b")
    b_url, a_url = cluster + "/b", cluster + "/a"
    wait_until(lambda: _rung(b_url) == "h100", SLOW, 0.5, "b serves from a's idle h100")
    with Load(b_url) as load:
        wait_until(lambda: sum(r[2] == "h100" for r in load.results) >= 10, SLOW, 0.1,
                   "b's load on h100")
        arrived = time.monotonic()
        serve.run(build_app(LADDER, {"h100": Model, "a100": Model}, team="a",
                            deployment_options=options), name="a", route_prefix="/a")
        wait_until(lambda: _rung(a_url) == "h100", SLOW, 0.25, "a serves from its h100")
        a_on_h100_s = time.monotonic() - arrived
        moved = time.monotonic()
        wait_until(lambda: any(r[0] > moved and r[2] == "a100" for r in load.results),
                   SLOW, 0.1, "b answered from a100")
    failed = [r for r in load.results if r[1] != 200]
    assert failed == [], failed  # the borrower lost no request across the reclaim
    assert {r[2] for r in load.results} == {"h100", "a100"}
    after = [r[2] for r in load.results if r[0] > moved]
    assert after and set(after) == {"a100"}  # b never went back onto a's unit
    # a's wait: its app's start, the grace, b's replica going, a's replica starting
    assert a_on_h100_s < GRACE_S + 90, a_on_h100_s
