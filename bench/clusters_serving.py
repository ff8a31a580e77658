"""Serving across two real Ray clusters: the on-prem ladder apps' top rung node is SIGKILLed
under load, the cloud cluster's ladder apps (the on-prem apps' second rung) take it.

Prints one JSON object on stdout (progress goes to stderr):

* ``serving_failed_requests``: requests (JSON answers and streams) that did not end in a
  whole answer: an HTTP error, a broken stream, or a stream whose exact counter skipped or
  repeated a piece across the clusters (goal 0).
* ``serving_first_remote_answer_s``: after the kill, the latency of the first JSON request
  answered by the cloud cluster's rung (goal <= 0.5 s + one network round trip, here the
  loopback: ``rtt_s``).
* ``moved_streams``: streams that began on-prem and ended on the cloud cluster.
* ``onprem_json_median_s`` / ``remote_json_median_s_once_settled``: JSON latency on the
  on-prem top rung before the kill and on the cloud rung from ``SETTLED_AFTER_S`` after
  it (the remote hop's own cost under this load, for reading the first answer against).
* ``fall_event_after_kill_s``: per on-prem app, from the kill to its ladder's event
  leaving ``h100`` (when the router saw the node gone; requests sent before that hedge
  to the cloud after ``assign_timeout_s``).
* ``failures_by_kind``: ``kind:status:error code`` -> count of the failed requests.

No plain-Serve run beside it: plain Serve has no rung on another cluster to compare with
(a plain app on the on-prem node fails every request from the kill until the node is
back); ``bench/serve_ladder.py`` compares the ladder app with plain Serve in one cluster.

Usage: ``python bench/clusters_serving.py`` (about 2 minutes here).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _json_out import json_stdout  # noqa: E402
from _machine import MachineProbe  # noqa: E402

from ray_ladder.jobs.sandbox import counter_stream, mixed_load  # noqa: E402
from ray_ladder.jobs.serving_stage import serving_stage  # noqa: E402
from ray_ladder.testing import wait_until  # noqa: E402

RATE, SECONDS, TOKENS, KILL_AT = 20.0, 8.0, 10, 3.0
#: JSON answers sent this long after the kill show the cloud rung's own latency.
SETTLED_AFTER_S = 2.0


def log(message: str) -> None:
    print(f"[clusters_serving] {message}", file=sys.stderr, flush=True)


def _rtt(url: str) -> float:
    import httpx

    best = float("inf")
    with httpx.Client() as client:
        for _ in range(20):
            start = time.monotonic()
            client.get(url + "/json/-/ladder")
            best = min(best, time.monotonic() - start)
    return best


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _fell_after(app_url: str, killed_at: float) -> float | None:
    """Seconds from the kill to the app's ladder leaving ``h100`` (its event's wall
    clock), or ``None`` when it did not."""
    import httpx

    events = httpx.get(app_url + "/-/ladder").json()["events"]
    falls = [e["time"] for e in events if e["from"] == "h100" and e["time"] >= killed_at]
    return round(min(falls) - killed_at, 3) if falls else None


def _whole(r: dict[str, Any]) -> bool:
    if r["status"] != 200:
        return False
    if r["kind"] != "stream":
        return True
    return [int(t) for _, t in r["pieces"]] == list(range(r["start"] + 1,
                                                          r["start"] + TOKENS + 1))


def run(stage: dict[str, Any]) -> dict[str, Any]:
    url = stage["url"]
    wait_until(lambda: {g for g, _ in counter_stream(url + "/llm", 0, 3, "onprem")["pieces"]}
               == {"h100"}, 60, 0.2, "a stream from the on-prem top rung")
    rtt = _rtt(stage["cloud_url"])
    killed: list[float] = []

    killed_wall: list[float] = []

    def kill() -> None:
        killed.append(time.monotonic())
        killed_wall.append(time.time())
        stage["onprem"].remove_node(stage["onprem"].nodes("h100")[0])

    timer = threading.Timer(KILL_AT, kill)
    timer.start()
    results = mixed_load(url + "/llm", url + "/json", RATE, SECONDS, TOKENS, "onprem")
    timer.join()
    remote = [r for r in results if r["kind"] == "json" and r["by"] == "cloud-cpu"
              and r["sent"] >= killed[0]]
    streams = [r for r in results if r["kind"] == "stream"]
    moved = [r for r in streams if {g for g, _ in r["pieces"]} == {"h100", "cloud"}]
    first = min(remote, key=lambda r: r["sent"]) if remote else None
    before = [r["latency_s"] for r in results if r["kind"] == "json" and r["by"] == "h100"
              and r["sent"] < killed[0]]
    settled = [r["latency_s"] for r in remote if r["sent"] >= killed[0] + SETTLED_AFTER_S]
    failures = Counter(f"{r['kind']}:{r['status']}:{(r.get('error') or {}).get('code')}"
                       for r in results if not _whole(r))
    return {
        "requests": len(results),
        "streams": len(streams),
        "serving_failed_requests": sum(1 for r in results if not _whole(r)),
        "moved_streams": len(moved),
        "serving_first_remote_answer_s": round(first["latency_s"], 3) if first else None,
        "first_remote_answer_sent_after_kill_s": round(first["sent"] - killed[0], 3)
        if first else None,
        "fall_event_after_kill_s": {app: _fell_after(url + app, killed_wall[0])
                                    for app in ("/llm", "/json")},
        "onprem_json_median_s": _median(before),
        "remote_json_median_s_once_settled": _median(settled),
        "failures_by_kind": dict(failures),
        "rtt_s": round(rtt, 4),
        "goal_first_remote_answer_s": round(0.5 + rtt, 3),
    }


def main() -> None:
    out = json_stdout()
    probe = MachineProbe()
    t0 = time.monotonic()
    with serving_stage() as stage:
        log(f"both clusters serving at {time.monotonic() - t0:.1f} s")
        ladder = run(stage)
    result = {
        "bench": "clusters_serving",
        "load": {"rate_per_s": RATE, "seconds": SECONDS, "tokens_per_stream": TOKENS,
                 "kill_at_s": KILL_AT},
        **ladder,
        "goals_met": {"failed_zero": ladder["serving_failed_requests"] == 0,
                      "first_remote_answer": ladder["serving_first_remote_answer_s"]
                      is not None and ladder["serving_first_remote_answer_s"]
                      <= ladder["goal_first_remote_answer_s"]},
        "wall_s": round(time.monotonic() - t0, 1),
        "machine": probe.report(),
    }
    print(json.dumps(result), file=out, flush=True)


if __name__ == "__main__":
    main()
