"""The LLM ladder against a plain Serve streaming app, and a mid-stream fall.

One LocalCluster (an h100 node with room for two replicas, an a100 node), two Serve apps
on one HTTP proxy: the ladder (``/ladder``: h100 -> a100 -> cpu, CounterRung) and a plain
streaming app (``/plain``: a pass-through ingress in front of a deployment of the same
model class on the same h100 node). Both answer ``POST .../v1/chat/completions`` with the
same SSE chunks.

1. Overhead: rounds of concurrent unpaced streams, ladder and plain side by side; p50 time
   to first token and tokens/s per stream. ``ttft_ratio`` (goal <= 1.10) and
   ``stream_tokens_per_s_ratio`` (goal >= 0.9) are ladder / plain: the median of the
   rounds' own ratios (``tokens_per_s_ratio_per_round``), since the core's speed drifts
   between rounds.
2. Mid-stream fall: paced streams on the ladder, the h100 node SIGKILLed while they run:
   ``midstream_fall_broken_streams`` (goal 0), ``midstream_fall_max_gap_s`` (the longest
   pause between two tokens of a stream across the kill; goal <= 1.0),
   ``midstream_repeated_or_lost_chars`` (goal 0: the count each stream received, checked
   piece by piece).

Prints one JSON object on stdout. Under 2 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from typing import Any

from _json_out import json_stdout

OUT = json_stdout()

import httpx  # noqa: E402
from ray import serve  # noqa: E402

from ray_ladder import Ladder  # noqa: E402
from ray_ladder.serve import build_app  # noqa: E402
from ray_ladder.serve.llm.models import CounterRung  # noqa: E402
from ray_ladder.testing import LocalCluster, free_port, wait_until  # noqa: E402

LADDER = Ladder.from_yaml("""
name: llm-bench
policy: {promotion_hysteresis: 2, probe_interval_s: 0.25}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, params: {model: big-70b}}
  - {name: a100, resources: {ladder/a100: 1}, standby_replicas: 1, params: {model: mid-8b}}
  - {name: cpu, num_cpus: 0.1, params: {model: tiny-1b}}
  - {name: shed, kind: shed}
""")
NODES = {"h100": {"num_cpus": 2, "resources": {"ladder/h100": 2}},  # ladder + plain replica
         "a100": {"num_cpus": 1, "resources": {"ladder/a100": 1}}}


def say(what: str) -> None:
    """Progress on stderr (stdout carries the JSON alone)."""
    print(f"[llm_ladder {time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    """What this machine is and how busy, measured."""
    from _machine import python_mops

    out: dict[str, Any] = {"cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2),
                           "python_mops": python_mops()}
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()[1:]
        ticks = [int(x) for x in fields]
        out["cpu_steal_share_since_boot"] = round(ticks[7] / max(1, sum(ticks)), 4)
    except (OSError, IndexError, ValueError):
        pass
    return out


def plain_app() -> Any:
    """A pass-through streaming ingress in front of one model deployment (plain Serve)."""
    from ray_ladder.core.context import RungContext
    from ray_ladder.serve.llm.replica import LLMRungReplica
    from ray_ladder.serve.llm.responses import DONE, Answer
    from ray_ladder.serve.llm.schema import parse_request

    @serve.deployment(max_ongoing_requests=1000,
                      ray_actor_options={"num_cpus": 0,
                                         "resources": {"node:__internal_head__": 0.001}})
    class PlainIngress:
        def __init__(self, model: Any) -> None:
            self.model = model.options(stream=True, method_name="ladder_generate")

        async def __call__(self, request: Any) -> Any:
            from starlette.responses import StreamingResponse

            _, gen = parse_request("chat", await request.json(), "llm-bench")
            answer = Answer("chat", LADDER, gen.prompt_tokens())

            async def events() -> Any:
                async for piece in self.model.remote(gen.to_dict()):
                    yield answer.chunk("h100", piece, degraded_s=0.0)
                yield DONE

            return StreamingResponse(events(), media_type="text/event-stream")

    model = serve.deployment(name="plain-h100", max_ongoing_requests=64,
                             ray_actor_options={"resources": {"ladder/h100": 1}})(
        LLMRungReplica).bind(CounterRung, RungContext.of(LADDER, "h100"), {})
    return PlainIngress.bind(model)


def stream(url: str, max_tokens: int, out: dict[str, Any]) -> None:
    """One streamed chat answer: arrival time, rung and text of every piece."""
    out.update(started=time.monotonic(), pieces=[], error=None, done=False)
    body = {"model": "llm-bench", "messages": [{"role": "user", "content": "count"}],
            "max_tokens": max_tokens, "stream": True}
    try:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line == "data: [DONE]":
                    out["done"] = True
                elif line.startswith("data: "):
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        out["error"] = chunk["error"]["message"]
                    elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                        out["pieces"].append((time.monotonic(), chunk["ladder"]["rung"],
                                              chunk["choices"][0]["delta"]["content"]))
    except Exception as err:
        out["error"] = f"{type(err).__name__}: {err}"


def run_streams(url: str, n: int, max_tokens: int) -> list[dict[str, Any]]:
    return run_paired({"": url}, n, max_tokens)[""]


def run_paired(urls: dict[str, str], n: int, max_tokens: int) -> dict[str, list[dict[str, Any]]]:
    """``n`` streams to each url, all at once, their starts interleaved across the urls
    (so every side sees the same machine at the same moment)."""
    results = {name: [{} for _ in range(n)] for name in urls}
    threads = [threading.Thread(target=stream, args=(urls[name], max_tokens, results[name][i]))
               for i in range(n) for name in urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def _firsts_and_rates(name: str, runs: list[dict[str, Any]],
                      tokens: int) -> tuple[list[float], list[float]]:
    firsts, rates = [], []
    for r in runs:
        pieces = r["pieces"]
        if r["error"] or len(pieces) != tokens:
            raise SystemExit(f"{name} stream failed: {r['error']} ({len(pieces)} pieces)")
        firsts.append(pieces[0][0] - r["started"])
        rates.append((len(pieces) - 1) / max(1e-6, pieces[-1][0] - pieces[0][0]))
    return firsts, rates


def overhead(base: str, rounds: int, n: int, tokens: int) -> dict[str, Any]:
    """Rounds of ``n`` streams per side, the ladder's and plain Serve's at the same time,
    their starts interleaved (who starts first alternates by round). A round's ratio is
    ladder / plain of its medians; the figures are the median of the rounds' ratios and
    their spread: this machine's core speed drifts 2x within a minute, so only streams
    that ran side by side saw the same machine."""
    ttft: dict[str, list[float]] = {"ladder": [], "plain": []}
    rate: dict[str, list[float]] = {"ladder": [], "plain": []}
    per_round: list[tuple[float, float]] = []
    for i in range(rounds):
        sides = ("ladder", "plain") if i % 2 == 0 else ("plain", "ladder")
        runs = run_paired({name: f"{base}/{name}" for name in sides}, n, tokens)
        seen = {name: _firsts_and_rates(name, runs[name], tokens) for name in sides}
        for name, (firsts, rates) in seen.items():
            ttft[name] += firsts
            rate[name] += rates
        med = {k: (statistics.median(v[0]), statistics.median(v[1])) for k, v in seen.items()}
        per_round.append((med["ladder"][0] / med["plain"][0], med["ladder"][1] / med["plain"][1]))
    p50 = {k: statistics.median(v) for k, v in ttft.items()}
    tps = {k: statistics.median(v) for k, v in rate.items()}
    return {"ttft_p50_s": {k: round(v, 4) for k, v in p50.items()},
            "tokens_per_s_p50": {k: round(v, 1) for k, v in tps.items()},
            "ttft_ratio": round(statistics.median(r[0] for r in per_round), 3),
            "stream_tokens_per_s_ratio": round(statistics.median(r[1] for r in per_round), 3),
            "tokens_per_s_ratio_per_round": [round(r[1], 3) for r in per_round],
            "ttft_ratio_per_round": [round(r[0], 3) for r in per_round],
            "ratio_spread": {"ttft": [round(min(r[0] for r in per_round), 3),
                                      round(max(r[0] for r in per_round), 3)],
                             "tokens_per_s": [round(min(r[1] for r in per_round), 3),
                                              round(max(r[1] for r in per_round), 3)]},
            "streams_per_side": len(ttft["ladder"])}


def fall(cluster: LocalCluster, base: str, n: int, tokens: int) -> dict[str, Any]:
    results: list[dict[str, Any]] = [{} for _ in range(n)]
    threads = [threading.Thread(target=stream, args=(f"{base}/ladder", tokens, r))
               for r in results]
    for t in threads:
        t.start()
    wait_until(lambda: all(len(r.get("pieces", ())) >= 10 for r in results), 60, 0.02,
               "every stream under way")
    killed = time.monotonic()
    cluster.remove_node(cluster.nodes("h100")[0])  # SIGKILL: a preemption
    for t in threads:
        t.join(timeout=90)
    broken = wrong = 0
    gaps: list[float] = []
    moved = 0
    for r in results:
        pieces = r["pieces"]
        expected = "".join(f" {i}" for i in range(1, tokens + 1))
        text = "".join(p[2] for p in pieces)
        broken += bool(r["error"] or not r["done"])
        # Characters repeated or lost: what the client got against the exact count.
        wrong += sum(a != b for a, b in zip(text, expected, strict=False)) \
            + abs(len(text) - len(expected))
        gaps += [b[0] - a[0] for a, b in zip(pieces, pieces[1:], strict=False)
                 if b[0] >= killed and a[0] <= killed + 5]
        moved += len({p[1] for p in pieces}) > 1
    return {"midstream_fall_streams": n, "midstream_fall_streams_moved": moved,
            "midstream_fall_broken_streams": broken,
            "midstream_fall_max_gap_s": round(max(gaps), 3) if gaps else None,
            "midstream_repeated_or_lost_chars": wrong}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--fall-streams", type=int, default=10)
    args = parser.parse_args()
    before = machine()
    started = time.monotonic()
    say("starting the cluster")
    with LocalCluster(NODES, log_to_driver=False) as cluster:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    proxy_location="HeadOnly")
        options = {"max_ongoing_requests": 64, "graceful_shutdown_timeout_s": 1.0}
        serve.run(build_app(LADDER, dict.fromkeys(["h100", "a100", "cpu"], CounterRung),
                            deployment_options=dict.fromkeys(["h100", "a100", "cpu"],
                                                             options)),
                  name="ladder", route_prefix="/ladder")
        serve.run(plain_app(), name="plain", route_prefix="/plain")
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: httpx.get(base + "/ladder/-/ladder").json()["current"] == "h100",
                   60, 0.1, "ladder on h100")
        say("apps up; warming")
        run_streams(f"{base}/ladder", 2, 5)  # warm both paths
        run_streams(f"{base}/plain", 2, 5)
        say("overhead rounds")
        result = overhead(base, args.rounds, args.streams, args.tokens)
        say(f"overhead done: {result}")
        # Paced streams for the fall: 40 tokens/s, like a loaded GPU's per-stream rate.
        serve.run(build_app(LADDER, dict.fromkeys(["h100", "a100", "cpu"], CounterRung),
                            init_kwargs=dict.fromkeys(["h100", "a100", "cpu"],
                                                      {"tokens_per_s": 40}),
                            deployment_options=dict.fromkeys(["h100", "a100", "cpu"],
                                                             options)),
                  name="ladder", route_prefix="/ladder")
        wait_until(lambda: httpx.get(base + "/ladder/-/ladder").json()["current"] == "h100"
                   and run_streams(f"{base}/ladder", 1, 3)[0]["pieces"][0][1] == "h100",
                   60, 0.2, "paced ladder on h100")
        say("fall")
        result.update(fall(cluster, base, args.fall_streams, 120))
        say("fall done")
        serve.shutdown()
    result["goals_met"] = {
        "ttft_ratio": result["ttft_ratio"] <= 1.10,
        "stream_tokens_per_s_ratio": result["stream_tokens_per_s_ratio"] >= 0.9,
        "midstream_fall_broken_streams": result["midstream_fall_broken_streams"] == 0,
        "midstream_fall_max_gap_s": (result["midstream_fall_max_gap_s"] or 0) <= 1.0,
        "midstream_repeated_or_lost_chars": result["midstream_repeated_or_lost_chars"] == 0,
    }
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["machine"] = {"before": before, "after": machine()}
    print(json.dumps(result), file=OUT, flush=True)


if __name__ == "__main__":
    main()
