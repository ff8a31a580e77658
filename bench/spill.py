"""Spill, not queue: the ladder under bursts against plain Serve on the same top rung.

One LocalCluster, two Serve apps on one HTTP proxy:

* ``/ladder``: the ladder ``top -> low -> shed`` with a whole-answer target of
  ``TARGET_S``; ``top`` is one replica taking ``TOP_ONGOING`` requests at once, ``low``
  one replica taking ``LOW_ONGOING`` (the room below); each request is ``SERVICE_S`` of
  non-blocking work on either rung;
* ``/plain``: the same ``top`` deployment (one replica, ``TOP_ONGOING`` at once) behind
  Serve's own router, which queues what it cannot place.

For each load (0.5x, 1x, 2x, 4x the top rung's capacity, ``TOP_ONGOING / SERVICE_S``
requests a second), open-loop ``POST`` requests for ``BURST_S`` seconds, ladder then plain
(same order every load). Per system and load: p50 / p99 latency, the share answered
within the target, failed requests (anything but a 200), the share answered by the top
rung. For the ladder after each burst, ``burst_end_to_back_on_top_s``: from the burst's
last request until a new request is answered by ``top`` again (goal: within the ladder's
hysteresis + 1 s).

Then the same for streams (``bench/_spill_streams.py``): the ladder's OpenAI route with a
``ttft_s`` target (top and low ``CounterRung``, 10 tokens at 25 tokens/s, so a stream holds
its place 0.4 s) against plain Serve streaming the same model deployment through an
ingress (two hops each): time to first token p50 / p99, the share of streams whose first
token came within the target, failed or broken streams, the top rung's share.

Prints one JSON object on stdout. Under 2 minutes.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from typing import Any

from _json_out import json_stdout

OUT = json_stdout()

import _spill_streams  # noqa: E402
import httpx  # noqa: E402
from _machine import MachineProbe  # noqa: E402
from ray import serve  # noqa: E402

from ray_ladder import Ladder  # noqa: E402
from ray_ladder.serve import build_app  # noqa: E402
from ray_ladder.testing import LocalCluster, free_port, open_loop, wait_until  # noqa: E402

SERVICE_S = 0.4
TARGET_S = 2.0
TOP_ONGOING = 2
LOW_ONGOING = 16
BURST_S = 2.0
LOADS = (0.5, 1.0, 2.0, 4.0)
LADDER = Ladder.from_yaml(f"""
name: spill-bench
policy:
  probe_interval_s: 0.25
  promotion_hysteresis: 2
  targets: {{answer_s: {TARGET_S}}}
rungs:
  - {{name: top, num_cpus: 0, resources: {{ladder/top: 1}}}}
  - {{name: low, num_cpus: 0, resources: {{ladder/low: 1}}, quality: 0.8,
     standby_replicas: 1}}
  - {{name: shed, kind: shed}}
""")


class Work:
    """``SERVICE_S`` of non-blocking work per request (a model waiting on its GPU)."""

    def __init__(self, rung: Any = None) -> None:
        self.rung = getattr(rung, "name", "plain")

    async def __call__(self, payload: Any) -> dict[str, str]:
        await asyncio.sleep(SERVICE_S)
        return {"rung": self.rung}


def say(what: str) -> None:
    """Progress on stderr (stdout carries the JSON alone)."""
    print(f"[spill {time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def post(client: httpx.Client, url: str) -> tuple[int, str | None, float]:
    """One request: status, the rung that answered, latency."""
    start = time.monotonic()
    try:
        r = client.post(url, json={})
    except httpx.HTTPError:
        return 0, None, time.monotonic() - start
    rung = r.headers.get("x-ladder-rung") or (r.json().get("rung") if r.status_code == 200
                                              else None)
    return r.status_code, rung, time.monotonic() - start


def figures(shots: list[tuple[int, str | None, float]], top: str) -> dict[str, Any]:
    """What one system did under one load."""
    latencies = sorted(s[2] for s in shots)
    ok = [s for s in shots if s[0] == 200]
    return {
        "requests": len(shots),
        "p50_s": round(statistics.median(latencies), 3),
        "p99_s": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 3),
        "within_target": round(sum(s[0] == 200 and s[2] <= TARGET_S for s in shots)
                               / len(shots), 4),
        "failed": len(shots) - len(ok),
        "top_share": round(sum(s[1] == top for s in ok) / len(shots), 4),
    }


def back_on_top(client: httpx.Client, url: str, since: float) -> float:
    """Seconds from ``since`` until a request is answered by ``top`` again."""
    wait_until(lambda: post(client, url)[1] == "top", 60, 0.05, "back on top")
    return round(time.monotonic() - since, 3)


def start(port: int) -> None:
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    quick = {"graceful_shutdown_timeout_s": 1.0}
    serve.run(build_app(LADDER, {"top": Work, "low": Work}, deployment_options={
        "top": {**quick, "max_ongoing_requests": TOP_ONGOING},
        "low": {**quick, "max_ongoing_requests": LOW_ONGOING}}),
        name="ladder", route_prefix="/ladder")
    plain = serve.deployment(name="plain-top", max_ongoing_requests=TOP_ONGOING,
                             ray_actor_options={"num_cpus": 0,
                                                "resources": {"ladder/top": 1}})(Work)
    serve.run(plain.bind(), name="plain", route_prefix="/plain")


def main() -> dict[str, Any]:
    probe = MachineProbe()
    capacity = TOP_ONGOING / SERVICE_S
    out: dict[str, Any] = {"service_s": SERVICE_S, "target_s": TARGET_S,
                           "top_capacity_per_s": capacity, "low_capacity_per_s":
                           LOW_ONGOING / SERVICE_S, "burst_s": BURST_S, "loads": {}}
    with LocalCluster({}, head={"num_cpus": 2, "resources": {"ladder/top": 4,
                                                             "ladder/low": 2}},
                      log_to_driver=False):
        port = free_port()
        start(port)
        base = f"http://127.0.0.1:{port}"
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        with httpx.Client(timeout=120, limits=limits) as client:
            wait_until(lambda: client.get(base + "/ladder/-/ladder").json()["current"]
                       == "top" and post(client, base + "/plain")[0] == 200, 120, 0.2,
                       "both apps up")
            for _ in range(10):  # warm both paths
                post(client, base + "/ladder"), post(client, base + "/plain")
            for load in LOADS:
                rate = load * capacity
                say(f"{load}x: {rate:g} requests/s for {BURST_S:g}s, ladder then plain")
                ladder = open_loop(lambda i: post(client, base + "/ladder"), rate, BURST_S,
                                   workers=200)
                row = {"ladder": figures(ladder, "top")}
                row["ladder"]["burst_end_to_back_on_top_s"] = back_on_top(
                    client, base + "/ladder", time.monotonic())
                plain = open_loop(lambda i: post(client, base + "/plain"), rate, BURST_S,
                                  workers=200)
                row["plain_serve"] = figures(plain, "plain")
                out["loads"][f"{load:g}x"] = row
            state = client.get(base + "/ladder/-/ladder").json()
            out["ladder_spills"] = state["metrics"]["spills"]
            say("streams")
            out["streams"] = _spill_streams.run(base, client, LOADS, BURST_S, TOP_ONGOING,
                                                LOW_ONGOING)
        serve.shutdown()
    out["hysteresis_plus_1_s"] = LADDER.policy.promotion_hysteresis \
        * LADDER.policy.probe_interval_s + 1.0
    out["goals"] = {
        "ladder_within_target_ge_0_99": all(r["ladder"]["within_target"] >= 0.99
                                            for r in out["loads"].values()),
        "ladder_failed_0": all(r["ladder"]["failed"] == 0 for r in out["loads"].values()),
        "ladder_streams_within_ttft_ge_0_99": all(
            r["ladder"]["within_ttft_target"] >= 0.99
            for r in out["streams"]["loads"].values()),
        "ladder_streams_failed_0": all(r["ladder"]["failed"] == 0
                                       for r in out["streams"]["loads"].values()),
        "back_on_top_within_hysteresis_plus_1_s": all(
            r["ladder"]["burst_end_to_back_on_top_s"] <= out["hysteresis_plus_1_s"]
            for r in out["loads"].values()),
    }
    out["machine"] = probe.report()
    return out


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import json

    print(json.dumps(main()), file=OUT, flush=True)
