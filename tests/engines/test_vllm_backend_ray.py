"""Real vLLM engines behind ``OpenAIBackendRung``: two tiny models made here (another size,
another tokenizer, another chat template), served by vLLM's own OpenAI server on
loopback, under a ladder on a LocalCluster, through the official ``openai`` client.

The headline on a real engine: 8 streams on the top rung's engine, the engine SIGKILLed
mid-generation; every stream finishes on the rung below, whose model has another
tokenizer, with no character lost or repeated and the token budget exact (tokens are the
engines' own). With the same model on both rungs and greedy decoding, the text across
the cut equals the uninterrupted text.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import openai
import pytest
from ray import serve

from ray_ladder import Ladder
from ray_ladder.serve import build_app
from ray_ladder.serve.llm.backend import OpenAIBackendRung
from ray_ladder.testing import free_port, wait_until
from tests.engines._engines import engines_or_skip

pytestmark = [pytest.mark.ray, pytest.mark.engine, pytest.mark.timeout(900)]

STREAMS = 8
#: Long enough that the engine is still generating when the kill comes: vLLM on a tiny
#: model makes tokens faster than the HTTP path delivers them, so the engine is hundreds
#: of tokens ahead of its clients (the servers' context is 512 tokens).
MAX_TOKENS = 440
PROMPTS = [f"Question {i}: how does the ladder move stream {i}?" for i in range(STREAMS)]


def _ladder(name: str, top: Any, low: Any) -> Ladder:
    def rung(rname: str, server: Any, quality: float) -> dict[str, Any]:
        return {"name": rname, "num_cpus": 0.1, "quality": quality, "standby_replicas": 1,
                "params": {"base_url": server.base_url, "model": server.name,
                           "timeout_s": 30, "health_timeout_s": 10}}

    return Ladder.from_dict({"name": name, "policy": {"probe_interval_s": 0.25},
                             "rungs": [rung("h100", top, 1.0), rung("a100", low, 0.6),
                                       {"name": "shed", "kind": "shed"}]})


@pytest.fixture(scope="module")
def stack(local_cluster):
    servers = engines_or_skip({"top": "tiny-chatml", "low": "tiny-inst",
                               "twin": "tiny-chatml"})
    cross = _ladder("cross", servers["top"], servers["low"])
    same = _ladder("same", servers["twin"], servers["top"])
    local_cluster(ladder=cross)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    options = {"graceful_shutdown_timeout_s": 1.0, "max_ongoing_requests": 16,
               "health_check_period_s": 1.0, "health_check_timeout_s": 15.0}
    for ladder in (cross, same):
        rungs = {"h100": OpenAIBackendRung, "a100": OpenAIBackendRung}
        serve.run(build_app(ladder, rungs, deployment_options=dict.fromkeys(rungs, options)),
                  name=ladder.name, route_prefix=f"/{ladder.name}")
    url = f"http://127.0.0.1:{port}"
    for name in ("cross", "same"):
        wait_until(lambda n=name: httpx.get(f"{url}/{n}/-/ladder").json()["current"] == "h100",
                   120, 0.2, f"ladder {name} on h100")
    try:
        yield {"url": url, "servers": servers}
    finally:
        serve.shutdown()
        for server in servers.values():
            server.stop()


def _client(stack: dict[str, Any], app: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack['url']}/{app}/v1", api_key="x", max_retries=0,
                         timeout=120)


def _engine(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=120)


def _greedy(server: Any, prompt: str, max_tokens: int = MAX_TOKENS) -> str:
    answer = _engine(server).chat.completions.create(
        model=server.name, messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens, temperature=0)
    return answer.choices[0].message.content or ""


def test_whole_and_streamed_answers_are_the_engine_s_own(stack):
    top = stack["servers"]["top"]
    client = _client(stack, "cross")
    reference = _greedy(top, PROMPTS[0], 32)
    whole = client.chat.completions.create(
        model="cross", messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=32,
        temperature=0)
    assert whole.choices[0].message.content == reference
    assert whole.model == "tiny-chatml"
    assert whole.choices[0].finish_reason == "length"
    engine = _engine(top).chat.completions.create(
        model=top.name, messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=32,
        temperature=0)
    assert whole.usage.completion_tokens == 32
    assert whole.usage.prompt_tokens == engine.usage.prompt_tokens  # the engine's count
    chunks = list(client.chat.completions.create(
        model="cross", messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=32,
        temperature=0, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reference
    assert chunks[-1].usage.completion_tokens == 32
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_stop_max_tokens_models_and_a_too_long_context(stack):
    client = _client(stack, "cross")
    reference = _greedy(stack["servers"]["top"], PROMPTS[1], 40)
    stop = reference[20:24]
    assert stop.strip(), reference
    answer = client.completions.create(model="cross", prompt=PROMPTS[1], max_tokens=5,
                                       temperature=0)
    assert answer.usage.completion_tokens == 5
    stopped = client.chat.completions.create(
        model="cross", messages=[{"role": "user", "content": PROMPTS[1]}], max_tokens=40,
        temperature=0, stop=[stop])
    assert stopped.choices[0].finish_reason == "stop"
    assert reference.startswith(stopped.choices[0].message.content or "")
    assert stop not in (stopped.choices[0].message.content or "")
    assert [m.id for m in client.models.list().data] == ["cross"]
    with pytest.raises(openai.BadRequestError) as err:  # the engine's 400, not a fall
        client.chat.completions.create(
            model="cross", messages=[{"role": "user", "content": "word " * 900}],
            max_tokens=8)
    assert err.value.status_code == 400
    ladder = httpx.get(f"{stack['url']}/cross/-/ladder").json()
    assert ladder["current"] == "h100"


Chunks = list[list[tuple[str, str, "str | None"]]]


def _stream_all(client: openai.OpenAI, model: str
                ) -> tuple[Chunks, list[Any], list[BaseException], list[threading.Thread]]:
    """8 concurrent greedy streams, started: per stream its (rung, text, switched_from)
    chunks and its last usage chunk; errors raised in any reader; the reader threads."""
    pieces: Chunks = [[] for _ in PROMPTS]
    usage: list[Any] = [None] * len(PROMPTS)
    errors: list[BaseException] = []

    def read(i: int) -> None:
        try:
            for chunk in client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": PROMPTS[i]}],
                    max_tokens=MAX_TOKENS, temperature=0, stream=True,
                    stream_options={"include_usage": True}):
                if chunk.usage is not None:
                    usage[i] = chunk
                if chunk.choices and chunk.choices[0].delta.content:
                    ext = chunk.model_extra["ladder"]
                    pieces[i].append((ext["rung"], chunk.choices[0].delta.content,
                                      ext.get("switched_from")))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    return pieces, usage, errors, threads


def _kill_mid_generation(stack: dict[str, Any], app: str, victim: str):
    pieces, usage, errors, threads = _stream_all(_client(stack, app), app)
    wait_until(lambda: all(len(p) >= 2 for p in pieces) or errors, 120, 0.01,
               "every stream under way on h100")
    assert not errors, errors
    stack["servers"][victim].kill()  # the engine's machine is lost mid-generation
    cut = [len(p) for p in pieces]
    for t in threads:
        t.join(180)
    assert not errors, errors
    return pieces, usage, cut


def test_same_model_below_continues_the_greedy_text_exactly(stack):
    top = stack["servers"]["top"]
    references = [_greedy(top, p) for p in PROMPTS]
    pieces, usage, cut = _kill_mid_generation(stack, "same", "twin")
    moved = [i for i, p in enumerate(pieces) if any(r == "a100" for r, _, _ in p)]
    assert len(moved) >= STREAMS // 2, (cut, [len(p) for p in pieces])
    for i in range(STREAMS):
        text = "".join(t for _, t, _ in pieces[i])
        assert usage[i].usage.completion_tokens == MAX_TOKENS
        assert text == references[i], (i, cut[i], text, references[i])


def test_a_killed_engine_s_streams_finish_on_a_model_with_another_tokenizer(stack):
    low = stack["servers"]["low"]
    pieces, usage, cut = _kill_mid_generation(stack, "cross", "top")
    moved = 0
    for i in range(STREAMS):
        rungs = [r for r, _, _ in pieces[i]]
        switch = next((k for k, (_, _, f) in enumerate(pieces[i]) if f == "h100"), None)
        assert usage[i] is not None, i
        by_rung = {b["rung"]: b["completion_tokens"]
                   for b in usage[i].model_extra["ladder"]["tokens_by_rung"]}
        assert usage[i].usage.completion_tokens == MAX_TOKENS == sum(by_rung.values())
        if switch is None:  # finished before the kill reached it
            assert set(rungs) == {"h100"}
            continue
        moved += 1
        assert set(rungs[:switch]) == {"h100"} and set(rungs[switch:]) == {"a100"}
        before = "".join(t for _, t, _ in pieces[i][:switch])
        after = "".join(t for _, t, _ in pieces[i][switch:])
        # What the lower engine says after exactly that text, in its own chat template,
        # for the tokens left: the stream's text after the switch, nothing lost or repeated.
        rest = _engine(low).chat.completions.create(
            model=low.name, messages=[{"role": "user", "content": PROMPTS[i]},
                                      {"role": "assistant", "content": before}],
            max_tokens=by_rung["a100"], temperature=0,
            extra_body={"continue_final_message": True, "add_generation_prompt": False})
        assert after == rest.choices[0].message.content, (i, before, after)
    assert moved >= STREAMS // 2, cut


def test_a_new_engine_takes_the_top_rung_back(stack):
    servers = stack["servers"]
    servers["top"].start().wait_ready(300)  # capacity returns: a fresh engine
    wait_until(lambda: httpx.get(f"{stack['url']}/cross/-/ladder").json()["current"]
               == "h100", 120, 0.2, "the ladder back on h100")
    answer = _client(stack, "cross").chat.completions.create(
        model="cross", messages=[{"role": "user", "content": PROMPTS[2]}], max_tokens=16,
        temperature=0)
    assert answer.model_extra["ladder"]["rung"] == "h100"
    assert answer.choices[0].message.content == _greedy(servers["top"], PROMPTS[2], 16)
