"""bench/spill.py's stream part: time to first token under a ``ttft_s`` target, the ladder's
OpenAI route against plain Serve streaming the same model deployment."""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import httpx
from ray import serve

from ray_ladder import Ladder
from ray_ladder.core.context import RungContext
from ray_ladder.serve import build_app
from ray_ladder.serve.llm.models import CounterRung
from ray_ladder.testing import open_loop, wait_until

TOKENS = 10
TOKENS_PER_S = 25.0  # a stream holds its place 0.4 s
TTFT_S = 0.5
LADDER = Ladder.from_yaml(f"""
name: spill-streams
policy:
  probe_interval_s: 0.25
  promotion_hysteresis: 2
  targets: {{ttft_s: {TTFT_S}}}
rungs:
  - {{name: top, num_cpus: 0, resources: {{ladder/top: 1}},
     params: {{tokens_per_s: {TOKENS_PER_S}}}}}
  - {{name: low, num_cpus: 0, resources: {{ladder/low: 1}}, quality: 0.8,
     standby_replicas: 1, params: {{tokens_per_s: {TOKENS_PER_S}}}}}
  - {{name: shed, kind: shed}}
""")


def plain_app(places: int) -> Any:
    """Plain Serve: a streaming ingress in front of the same model deployment."""
    from ray_ladder.serve.llm.replica import LLMRungReplica
    from ray_ladder.serve.llm.responses import DONE, Answer
    from ray_ladder.serve.llm.schema import parse_request

    @serve.deployment(max_ongoing_requests=1000, ray_actor_options={"num_cpus": 0})
    class PlainIngress:
        def __init__(self, model: Any) -> None:
            self.model = model.options(stream=True, method_name="ladder_generate")

        async def __call__(self, request: Any) -> Any:
            from starlette.responses import StreamingResponse

            _, gen = parse_request("chat", await request.json(), "spill-streams")
            answer = Answer("chat", LADDER, gen.prompt_tokens())

            async def events() -> Any:
                async for piece in self.model.remote(gen.to_dict()):
                    yield answer.chunk("top", piece, degraded_s=0.0)
                yield DONE

            return StreamingResponse(events(), media_type="text/event-stream")

    model = serve.deployment(name="plain-top-llm", max_ongoing_requests=places,
                             ray_actor_options={"num_cpus": 0,
                                                "resources": {"ladder/top": 1}})(
        LLMRungReplica).bind(CounterRung, RungContext.of(LADDER, "top"), {})
    return PlainIngress.bind(model)


def start(places: int, low_places: int) -> None:
    quick = {"graceful_shutdown_timeout_s": 1.0}
    serve.run(build_app(LADDER, {"top": CounterRung, "low": CounterRung}, deployment_options={
        "top": {**quick, "max_ongoing_requests": places},
        "low": {**quick, "max_ongoing_requests": low_places}}),
        name="stream-ladder", route_prefix="/stream-ladder")
    serve.run(plain_app(places), name="stream-plain", route_prefix="/stream-plain")


def stream(client: httpx.Client, url: str) -> tuple[int, str | None, float, float]:
    """One streamed chat answer: status, the rung of its first piece, time to first
    token, whole time (``nan`` when no piece came)."""
    body = {"model": "spill-streams", "messages": [{"role": "user", "content": "count"}],
            "max_tokens": TOKENS, "stream": True}
    start, first, rung, pieces = time.monotonic(), float("nan"), None, 0
    try:
        with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
            status = r.status_code
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                    pieces += 1
                    if rung is None:
                        first, rung = time.monotonic() - start, chunk["ladder"]["rung"]
    except httpx.HTTPError:
        status = 0
    if status == 200 and pieces != TOKENS:
        status = -1  # a broken stream
    return status, rung, first, time.monotonic() - start


def figures(shots: list[tuple[int, str | None, float, float]], top: str) -> dict[str, Any]:
    """What one system's streams did under one load."""
    ok = [s for s in shots if s[0] == 200]
    ttfts = sorted(s[2] for s in ok) or [float("nan")]
    return {
        "streams": len(shots),
        "ttft_p50_s": round(statistics.median(ttfts), 3),
        "ttft_p99_s": round(ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))], 3),
        "within_ttft_target": round(sum(s[2] <= TTFT_S for s in ok) / len(shots), 4),
        "failed": len(shots) - len(ok),
        "top_share": round(sum(s[1] == top for s in ok) / len(shots), 4),
        # which rung answered the ones that missed the target, and when their first
        # token came: a miss on the rung below and one on the full top rung differ
        "late": [[s[1], round(s[2], 3)] for s in ok if not s[2] <= TTFT_S],
    }


def run(base: str, client: httpx.Client, loads: tuple[float, ...], burst_s: float,
        places: int, low_places: int) -> dict[str, Any]:
    """Both systems' streams at each load (a multiple of the top rung's capacity)."""
    start(places, low_places)
    ladder, plain = base + "/stream-ladder", base + "/stream-plain"
    wait_until(lambda: client.get(ladder + "/-/ladder").json()["current"] == "top"
               and stream(client, plain)[0] == 200, 120, 0.2, "both stream apps up")
    for _ in range(5):
        stream(client, ladder), stream(client, plain)
    capacity = places * TOKENS_PER_S / TOKENS
    out: dict[str, Any] = {"tokens": TOKENS, "tokens_per_s": TOKENS_PER_S,
                           "ttft_target_s": TTFT_S, "top_capacity_streams_per_s": capacity,
                           "loads": {}}
    for load in loads:
        rate = load * capacity
        row = {"ladder": figures(open_loop(lambda i: stream(client, ladder), rate, burst_s,
                                           workers=200), "top"),
               "plain_serve": figures(open_loop(lambda i: stream(client, plain), rate,
                                                burst_s, workers=200), "top")}
        out["loads"][f"{load:g}x"] = row
    return out
