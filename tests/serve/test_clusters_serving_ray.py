"""Serving across two real Ray clusters on this machine: the on-prem cluster's ladder apps
have a top rung of their own and, below it, the cloud cluster's ladder apps (its OpenAI
route for the LLM app, its JSON route for the JSON app; the rungs say ``cluster: cloud``
and take the cloud's Serve address from the ladder's ``clusters:``). The stage is
``ray_ladder.jobs.serving_stage`` (bench/clusters_serving.py measures on it).

The on-prem top rung's node is SIGKILLed under 20 requests a second with streams open:
the cloud cluster's apps take them; no request fails, no stream breaks, and each stream's
exact counter runs on across the clusters without a gap or a repeat.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from ray_ladder.jobs.sandbox import counter_stream, mixed_load
from ray_ladder.testing import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.long, pytest.mark.timeout(600)]

RATE, SECONDS, TOKENS = 20.0, 6.0, 10


@pytest.fixture(scope="module")
def stage() -> Any:
    from ray_ladder.jobs.serving_stage import serving_stage

    with serving_stage() as stage:
        yield stage


def test_the_cloud_clusters_app_takes_streams_and_json_when_on_prem_loses_its_top_rung(
        stage: Any) -> None:
    url = stage["url"]
    # The top rung answers before the load (its router has seen its replica take one).
    wait_until(lambda: {r for r, _ in counter_stream(url + "/llm", 0, 3, "onprem")["pieces"]}
               == {"h100"}, 60, 0.2, "a stream from the on-prem top rung")
    killer = threading.Timer(2.0, lambda: stage["onprem"].remove_node(
        stage["onprem"].nodes("h100")[0]))
    killer.start()
    results = mixed_load(url + "/llm", url + "/json", RATE, SECONDS, TOKENS, "onprem")
    killer.join()
    streams = [r for r in results if r["kind"] == "stream"]
    answers = [r for r in results if r["kind"] == "json"]
    assert len(results) >= RATE * SECONDS * 0.9
    assert [(r["status"], r.get("error"), r.get("pieces", [])[-2:]) for r in results
            if r["status"] != 200] == []  # 0 failed, 0 broken
    for r in streams:  # exact counters: no gap, no repeat, across the clusters
        # A chunk may carry several numbers: the cloud rung's pieces that queued while
        # one was in flight go to the router together (serve/llm/coalesce.py).
        assert [int(n) for _, t in r["pieces"] for n in t.split()] == list(
            range(r["start"] + 1, r["start"] + TOKENS + 1)), r
    moved = [r for r in streams if {rung for rung, _ in r["pieces"]} == {"h100", "cloud"}]
    assert moved, ([(round(r["sent"] - results[0]["sent"], 2), [g for g, _ in r["pieces"]][:3])
                    for r in streams][:3], [(e["from"], e["to"], e["reason"]) for e in httpx.get(
                        url + "/llm/-/ladder").json()["events"]],
                   )  # no stream was open on h100 when its node died
    assert {r["by"] for r in answers} == {"h100", "cloud-cpu"}  # on-prem, then the cloud's
    wait_until(lambda: httpx.get(url + "/llm/-/ladder").json()["current"] == "cloud", 30,
               0.2, "the on-prem ladder on the cloud cluster's app")
    started = time.monotonic()
    first = counter_stream(url + "/llm", 0, TOKENS, "onprem")
    assert first["status"] == 200 and {r for r, _ in first["pieces"]} == {"cloud"}
    assert time.monotonic() - started < 30
