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

import json
import threading
import time
from typing import Any

import httpx
import pytest

from ray_ladder.jobs.sandbox import counter_stream, mixed_load
from ray_ladder.testing import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.long, pytest.mark.timeout(600)]

RATE, SECONDS, TOKENS = 20.0, 6.0, 10
WITNESS_TOKENS = 150  # 15 s at the stage's 10 tokens a second: open across the kill


def _watched_stream(url: str, start: int, tokens: int, on_top: threading.Event
                    ) -> dict[str, Any]:
    """A counter stream read piece by piece; sets ``on_top`` at its first ``h100`` piece."""
    pieces: list[tuple[str, str]] = []
    with httpx.stream("POST", url + "/v1/completions", timeout=60, json={
            "model": "onprem", "prompt": str(start), "max_tokens": tokens,
            "stream": True}) as reply:
        status: Any = reply.status_code
        for line in reply.iter_lines() if status == 200 else ():
            chunk = json.loads(line[6:]) if line.startswith("data: {") else {}
            if "error" in chunk:
                status = "broken"
            elif chunk.get("choices") and chunk["choices"][0]["text"]:
                pieces.append((chunk["ladder"]["rung"], chunk["choices"][0]["text"]))
                if pieces[0][0] == "h100":
                    on_top.set()
    return {"status": status, "pieces": pieces, "start": start, "tokens": tokens}


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
    # A witness stream long enough to be open on h100 when its node dies: the kill waits
    # for its first h100 piece (a condition), so "a stream moved" does not hang on whether
    # the load's short streams happened to be open at a fixed instant.
    witness: dict[str, Any] = {}
    on_top = threading.Event()
    reader = threading.Thread(target=lambda: witness.update(
        _watched_stream(url + "/llm", 900_000, WITNESS_TOKENS, on_top)))
    reader.start()

    def kill() -> None:
        if on_top.wait(60):
            stage["onprem"].remove_node(stage["onprem"].nodes("h100")[0])

    killer = threading.Timer(2.0, kill)
    killer.start()
    results = mixed_load(url + "/llm", url + "/json", RATE, SECONDS, TOKENS, "onprem")
    killer.join()
    reader.join(120)
    streams = [r for r in results if r["kind"] == "stream"]
    answers = [r for r in results if r["kind"] == "json"]
    assert len(results) >= RATE * SECONDS * 0.9
    assert [(r["status"], r.get("error"), r.get("pieces", [])[-2:]) for r in results
            if r["status"] != 200] == []  # 0 failed, 0 broken
    for r in [*streams, witness]:  # exact counters: no gap, no repeat, across the clusters
        # A chunk may carry several numbers: the cloud rung's pieces that queued while
        # one was in flight go to the router together (serve/llm/coalesce.py).
        assert r["status"] == 200, r
        assert [int(n) for _, t in r["pieces"] for n in t.split()] == list(
            range(r["start"] + 1, r["start"] + r.get("tokens", TOKENS) + 1)), r
    # The witness was open on h100 when its node died: it went on on the cloud's app.
    assert [g for g, _ in witness["pieces"]][0] == "h100"
    assert {g for g, _ in witness["pieces"]} == {"h100", "cloud"}, (
        witness, [(e["from"], e["to"], e["reason"]) for e in httpx.get(
            url + "/llm/-/ladder").json()["events"]])
    assert {r["by"] for r in answers} == {"h100", "cloud-cpu"}  # on-prem, then the cloud's
    wait_until(lambda: httpx.get(url + "/llm/-/ladder").json()["current"] == "cloud", 30,
               0.2, "the on-prem ladder on the cloud cluster's app")
    started = time.monotonic()
    first = counter_stream(url + "/llm", 0, TOKENS, "onprem")
    assert first["status"] == 200 and {r for r, _ in first["pieces"]} == {"cloud"}
    assert time.monotonic() - started < 30
