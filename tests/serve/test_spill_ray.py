"""Latency targets on a real LocalCluster over real HTTP: a burst at twice the top rung's
capacity spills its excess below and keeps the top rung full, a rung made slow is found
slow and left, and an EU-bound request never spills out of the EU."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys
import time

import cloudpickle
import httpx
import pytest
from ray import serve

from ray_ladder import Ladder
from ray_ladder.autoscale.sources import read_spill
from ray_ladder.serve import build_app
from ray_ladder.testing import free_port, open_loop, wait_until
from tests._other_work import OtherWork

pytestmark = [pytest.mark.ray, pytest.mark.alone]

SERVICE_S = 0.2
TARGET_S = 1.0
LADDER = Ladder.from_yaml(f"""
name: burst
policy:
  probe_interval_s: 0.25
  promotion_hysteresis: 2
  pending_timeout_s: 30
  targets: {{answer_s: {TARGET_S}, slow_after_s: 1.5}}
rungs:
  - {{name: top, num_cpus: 0, resources: {{ladder/top: 1}}, tags: {{jurisdiction: eu}}}}
  - {{name: low, num_cpus: 0, resources: {{ladder/low: 1}}, quality: 0.8,
     standby_replicas: 1, tags: {{jurisdiction: us}}}}
  - {{name: shed, kind: shed}}
""")
SLOW = 180  # generous: the CI machine is small and shared


class Work:
    """``SERVICE_S`` of (non-blocking) work per request, plus the delay in ``delay_file``."""

    def __init__(self, rung, delay_file: str) -> None:
        self.rung = rung.name
        self.delay_file = pathlib.Path(delay_file)

    async def __call__(self, payload):
        extra = float(self.delay_file.read_text() or 0) if self.delay_file.exists() else 0.0
        await asyncio.sleep(SERVICE_S + extra)
        return {"rung": self.rung}


cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def app(local_cluster, tmp_path_factory):
    cluster = local_cluster({}, head={"num_cpus": 2,
                                      "resources": {"ladder/top": 3, "ladder/low": 2}})
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    delays = tmp_path_factory.mktemp("delays")
    quick = {"graceful_shutdown_timeout_s": 1.0}
    serve.run(build_app(LADDER, {"top": Work, "low": Work},
                        init_kwargs={n: {"delay_file": str(delays / n)} for n in ("top", "low")},
                        deployment_options={"top": {**quick, "max_ongoing_requests": 2},
                                            "low": {**quick, "max_ongoing_requests": 8}}),
              name="burst", route_prefix="/")
    # The same ladder, its top rung allowed a second replica (Serve's max_replicas).
    serve.run(build_app(LADDER, {"top": Work, "low": Work},
                        init_kwargs={n: {"delay_file": str(delays / "none")}
                                     for n in ("top", "low")},
                        deployment_options={"top": {**quick, "max_ongoing_requests": 2,
                                                    "autoscaling_config": {"max_replicas": 2}},
                                            "low": {**quick, "max_ongoing_requests": 8}}),
              name="grow", route_prefix="/grow")
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(timeout=60) as client:
        def ready() -> bool:
            state = client.get(url + "/-/ladder").json()
            return state["current"] == "top" and all(
                r["running_replicas"] for r in state["rungs"] if r["kind"] == "compute")
        try:
            wait_until(ready, 60, 0.2, "both rungs running, the ladder on top")
        except TimeoutError:
            raise AssertionError(client.get(url + "/-/ladder").json()) from None
        yield url, client, delays, cluster.address
    serve.shutdown()


def _post(client: httpx.Client, url: str, headers: dict[str, str] | None = None):
    start = time.monotonic()
    response = client.post(url + "/", json={}, headers=headers or {})
    return response.status_code, response.headers.get("x-ladder-rung"), \
        time.monotonic() - start, response.headers.get("retry-after"), response.text[:600], \
        float(response.headers.get("x-ladder-elapsed-s") or "nan")


def _state(client: httpx.Client, url: str) -> dict:
    return client.get(url + "/-/ladder").json()


def test_a_burst_at_twice_the_top_rungs_capacity_spills_its_excess_below(app):
    url, client, *_ = app
    capacity = 2 / SERVICE_S  # one replica, two requests at once: 10 a second
    with OtherWork() as other:
        shots = open_loop(lambda i: _post(client, url), rate=2 * capacity, duration_s=6.0)
    burst_end = time.monotonic()
    # Under any load: each request answered, or shed with Retry-After (never an error).
    assert all(s[0] == 200 or (s[0] == 503 and s[1] == "shed" and s[3]) for s in shots), \
        [s[4] for s in shots if s[0] != 200][:2]
    failed = [s for s in shots if s[0] != 200]
    # The target holds from the request's arrival at the router (X-Ladder-Elapsed-S); the
    # client's own clock adds Serve's HTTP proxy, which a busy machine can slow.
    within = sum(s[5] <= TARGET_S for s in shots) / len(shots)
    top_share = sum(s[1] == "top" for s in shots) / len(shots)
    if other.too_busy() and (failed or within < 0.99 or abs(top_share - 0.5) > 0.10):
        # The rungs' service times grew with the other work: the router predicts misses
        # and sheds, as it should; the goal measures this machine's other work then.
        pytest.skip(f"the burst's latency goal not judged: {other}; {len(failed)} of "
                    f"{len(shots)} shed, {within:.0%} within the target")
    assert failed == [], [s[4] for s in failed][:2]
    assert within >= 0.99, (sorted(s[5] for s in shots)[-5:], sorted(s[2] for s in shots)[-5:])
    assert abs(top_share - 0.5) <= 0.10, top_share  # the top rung kept full, not left
    spills = _state(client, url)["metrics"]["spills"]
    assert spills.get("top", 0) >= len(shots) // 4, spills
    # After the burst, requests are back on top (under any load); within hysteresis + 1 s
    # (here at once: a spill moves one request, never the ladder) when the machine was
    # its own, as bench/spill.py's back_on_top_within_hysteresis_plus_1_s.
    with OtherWork() as after:
        back = wait_until(lambda: _post(client, url)[1] == "top" and time.monotonic(),
                          SLOW, 0.05, "a request answered by top again")
    hysteresis_s = LADDER.policy.promotion_hysteresis * LADDER.policy.probe_interval_s
    assert other.too_busy() or after.too_busy() or back - burst_end <= hysteresis_s + 1.0, \
        (back - burst_end, str(after))


def test_an_eu_bound_burst_never_spills_out_of_the_eu(app):
    url, client, *_ = app
    eu = {"X-Ladder-Jurisdiction": "eu"}
    with OtherWork() as other:
        shots = open_loop(lambda i: _post(client, url, eu), rate=30, duration_s=3.0)
    assert {s[1] for s in shots} <= {"top", "shed"}
    shed = [s for s in shots if s[0] == 503]
    assert shed, "three times the EU rung's capacity: some requests get the shed rung"
    assert all(s[1] == "shed" and s[3] is not None for s in shed)
    # Shed at once rather than queued: within the target + 0.5 s by the client's clock,
    # judged when the machine was its own (Serve's HTTP proxy on a busy machine adds its
    # own wait).
    assert other.too_busy() or all(s[2] < TARGET_S + 0.5 for s in shed), \
        (sorted(s[2] for s in shed)[-3:], str(other))
    assert all(s[0] == 200 for s in shots if s[1] == "top")


def test_a_rung_made_slow_is_reported_slow_left_and_retried(app):
    url, client, delays, address = app
    (delays / "top").write_text("1.5")  # its replicas now take 1.7 s, the target is 1 s
    try:
        def found_slow() -> bool:
            _post(client, url)
            return next(r for r in _state(client, url)["rungs"] if r["name"] == "top")["slow"]
        wait_until(found_slow, SLOW, 0.1, "top found slow")
        state = _state(client, url)
        assert state["current"] == "low"
        assert any(e["cause"] == "slow" and e["from"] == "top" for e in state["events"])
        assert state["metrics"]["slow"] == {"top": 1}
        top = state["load"]["top"]  # what the router's estimates use, per rung
        assert top["slow"] is True and "against the 1s target" in top["slow_reason"]
        assert top["service_s"] > 2 * SERVICE_S and top["in_flight"] >= 0  # an average
        answers = [_post(client, url) for _ in range(5)]
        assert [a[1] for a in answers] == ["low"] * 5
        # `ray-ladder status` says so, with the reason.
        def status_says_slow() -> dict:
            _post(client, url)  # traffic keeps finding it slow at each retry
            proc = subprocess.run([sys.executable, "-m", "ray_ladder.cli", "status", "--json",
                                   "--address", address], capture_output=True, text=True,
                                  timeout=60)
            users = [u for u in json.loads(proc.stdout)["ladders"] if u["source"] == "burst"]
            return users and users[0].get("slow", {}).get("top")
        assert "against the 1s target" in wait_until(status_says_slow, SLOW, 0.5,
                                                     "status shows top slow")
    finally:
        (delays / "top").write_text("0")
    # Its retry (1.5 s later) finds it fast again: the ladder climbs back, damped.
    wait_until(lambda: _post(client, url)[1] == "top", SLOW, 0.2, "back on top")


def test_sustained_spill_is_demand_the_top_rung_grows_and_takes_it_back(app):
    """Spilled requests never reach the top rung's queue, so Serve's autoscaler cannot see
    them: the router publishes them as demand, and the top rung gets its second replica."""
    import threading

    url, client, *_ = app
    grow = url + "/grow"
    wait_until(lambda: _state(client, grow)["current"] == "top", SLOW, 0.2, "grow app up")
    shots: list = []
    grew: list[float] = []
    # Until 5 s after the growth (the 2 s settle, then the share on top), 32 s at most: the
    # 25 s wait for growth + the settle (a loaded CI run grew at ~23 s).
    load = threading.Thread(target=lambda: shots.extend(open_loop(
        lambda i: (time.monotonic(), _post(client, grow)), rate=15, duration_s=32.0,
        until=lambda: bool(grew) and time.monotonic() > grew[0] + 5.0)))
    load.start()
    seen: list = []

    hook_saw: list[dict] = []

    def grown() -> bool:
        state = _state(client, grow)
        seen.append((state["spill_wants_replicas"], state["metrics"]["spills"]))
        if state["spill_wants_replicas"]:  # what the ladder's autoscaler hook reads
            hook_saw.append(read_spill(state["ladder"], time.time()))
        return next(r for r in state["rungs"] if r["name"] == "top")["running_replicas"] == 2

    with OtherWork() as other:
        try:
            wait_until(grown, 25.0, 0.5, "a second top replica while the spill lasts")
            grew_at = time.monotonic()
            grew.append(grew_at)
        except TimeoutError:
            raise AssertionError(seen[-3:]) from None
        finally:
            load.join()
    # Under any load each request is answered, or shed with Retry-After when the router
    # predicts that no rung makes the target (other work slowing both rungs): never an
    # error. With the machine to itself (low has room for 8 at once), none is shed.
    refused = [s[1][:2] + s[1][4:5] for s in shots if s[1][0] != 200]
    assert all(s[1][0] == 200 or (s[1][0] == 503 and s[1][1] == "shed" and s[1][3])
               for s in shots), refused[:3]
    assert other.too_busy() or refused == [], (str(other), refused[:3])
    assert any(saw.get("top", 0) >= 2 for saw in hook_saw), hook_saw  # placements to ask
    later = [s for s in shots if s[0] > grew_at + 2.0]
    answered = [s for s in later if s[1][0] == 200]
    # Once grown, top takes the spill back: under any load it answers some of it; with
    # the machine to itself, most of what is asked is answered and most of that on top
    # (shares a busy machine decides: judged only then).
    assert later and any(s[1][1] == "top" for s in answered), [s[1][1] for s in later]
    if not other.too_busy():
        assert len(answered) >= len(later) / 2, [s[1][1] for s in later]
        assert sum(s[1][1] == "top" for s in answered) / len(answered) >= 0.8, \
            [s[1][1] for s in later]
