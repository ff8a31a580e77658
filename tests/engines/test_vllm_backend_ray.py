"""Real vLLM engines on the rungs: two tiny models made here (another size, another
tokenizer, another chat template) under a ladder on a LocalCluster, through the official
``openai`` client.

The three ways an engine runs on a rung, one each: ``h100`` is a
:class:`~ray_ladder.serve.llm.VLLMRung` (its replica runs a vLLM server on the rung's
node), ``a100`` is Ray Serve LLM's own ``LLMServer`` (``build_llm_deployment``: the engine
inside the replica, on the node that advertises the rung), both on tiny-chatml; so
SIGKILLing a node kills its engine mid-generation, as a lost GPU machine does. ``cpu`` is
an ``OpenAIBackendRung`` in front of a vLLM server outside the cluster (an on-prem
engine), on the smaller model.

The headline on real engines: 8 streams on the top rung's engine, its node SIGKILLed
mid-generation; every stream finishes below, no character lost or repeated, the token
budget exact (tokens are the engines' own). With the same model below (a100) and greedy
decoding, the text across the cut equals the uninterrupted text; onto another tokenizer
(cpu), the text after the switch is exactly that engine's own continuation.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import openai
import pytest
from ray import serve

from ray_ladder import Ladder
from ray_ladder.cluster import ray_private
from ray_ladder.engines.server import reap_orphans
from ray_ladder.serve import build_app
from ray_ladder.serve.llm.backend import OpenAIBackendRung
from ray_ladder.serve.llm.engine_rung import VLLMRung
from ray_ladder.testing import free_port, wait_until
from tests.engines._engines import engines_or_skip

#: ``alone``: three engines on two cores beside another module's cluster starved each
#: other (CI's parallel pass: the h100 engine took none of 8 requests within 5 s, so the
#: router gave its rung up and the module's order of kills fell apart).
pytestmark = [pytest.mark.ray, pytest.mark.engine, pytest.mark.long, pytest.mark.alone,
              pytest.mark.timeout(900)]

STREAMS = 8
#: The engines' context is 1,024 tokens; a prompt here is about 25. Long answers, so that
#: the engine is still generating when its node dies (vLLM on a tiny model makes hundreds
#: of tokens a second, and what it has sent to the router before the kill is not lost).
MAX_TOKENS = 900
PROMPTS = [f"Question {i}: how does the ladder move stream {i}?" for i in range(STREAMS)]
#: Generous on a loaded 2-core machine: an engine slow to accept a connection or to
#: answer its health check is not gone (the suite runs another cluster beside this one).
TIMEOUTS = {"timeout_s": 30, "connect_timeout_s": 10, "health_timeout_s": 10}


def _ladder(low: Any) -> Ladder:
    # One tokenizer name on both tiny-chatml rungs: a stream that moves between them
    # continues from its token ids.
    same = {"model": "tiny-chatml", "tokenizer": "tiny-chatml"}
    return Ladder.from_dict({
        "name": "engines", "policy": {"probe_interval_s": 0.25, "promotion_hysteresis": 2},
        "rungs": [{"name": "h100", "resources": {"ladder/h100": 1}, "quality": 1.0,
                   "standby_replicas": 1,
                   "params": {"tiny_model": "tiny-chatml", **same, **TIMEOUTS}},
                  {"name": "a100", "resources": {"ladder/a100": 1}, "quality": 0.9,
                   "standby_replicas": 1, "params": same},
                  {"name": "cpu", "num_cpus": 0.1, "quality": 0.5, "standby_replicas": 1,
                   "params": {"base_url": low.base_url, "model": low.name, **TIMEOUTS}},
                  {"name": "shed", "kind": "shed"}]})


@pytest.fixture(scope="module")
def stack(local_cluster):
    servers = engines_or_skip({"low": "tiny-inst"}, also=("tiny-chatml",))
    ladder = _ladder(servers["low"])
    # Two CPUs a node: LLMServer's placement group asks for its replica's CPU and the
    # engine's bundle (1.25) on the rung's node.
    cluster = local_cluster(ladder=ladder, num_cpus=2)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    options = {"graceful_shutdown_timeout_s": 1.0, "max_ongoing_requests": 16,
               "health_check_period_s": 1.0, "health_check_timeout_s": 30.0}
    rungs = {"h100": VLLMRung, "a100": _llm_server(), "cpu": OpenAIBackendRung}
    # Not blocking: each engine's replica takes a minute to load; the ladder says when.
    serve._run(build_app(ladder, rungs, deployment_options={
        "h100": options, "cpu": options}), name="engines", route_prefix="/engines",
        _blocking=False)
    url = f"http://127.0.0.1:{port}/engines"
    wait_until(lambda: httpx.get(f"{url}/-/ladder").json()["current"] == "h100", 600, 0.5,
               "the ladder on h100 (its engine loaded)")
    try:
        yield {"url": url, "servers": servers, "cluster": cluster, "references": {}}
    finally:
        for server in servers.values():
            server.stop()
        serve.shutdown()
        cluster.shutdown()
        reap_orphans()  # an engine whose replica died before its guard could act


def _llm_server() -> Any:
    """Ray Serve LLM's ``LLMServer`` application on tiny-chatml, on a CPU (vLLM's CPU
    build): the engine arguments the external servers get (``engines/server.py``)."""
    from ray.serve.llm import LLMConfig, build_llm_deployment

    from ray_ladder.engines.tiny import model_path

    return build_llm_deployment(LLMConfig(
        model_loading_config={"model_id": "tiny-chatml",
                              "model_source": str(model_path("tiny-chatml"))},
        accelerator_config={"kind": "cpu"}, placement_group_config={"bundles": [{"CPU": 0.25}]},
        engine_kwargs={"max_model_len": 1024, "enforce_eager": True,
                       "kv_cache_memory_bytes": 64 * 2**20}))


def _client(stack: dict[str, Any]) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack['url']}/v1", api_key="x", max_retries=0,
                         timeout=180)


def _state(stack: dict[str, Any]) -> dict[str, Any]:
    return httpx.get(f"{stack['url']}/-/ladder").json()


def _engine(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=120)


def _answer(stack: dict[str, Any], prompt: str, max_tokens: int) -> tuple[str, str]:
    """The whole greedy answer to ``prompt`` and the rung that gave it."""
    answer = _client(stack).chat.completions.create(
        model="engines", messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens, temperature=0)
    return answer.choices[0].message.content or "", answer.model_extra["ladder"]["rung"]


def _greedy(stack: dict[str, Any], prompt: str, max_tokens: int = MAX_TOKENS) -> str:
    """The uninterrupted greedy answer of tiny-chatml (h100's engine; a100's, the same
    model). A busy machine's h100 and a100 may both be slow to take a request, which
    then starts on cpu (another model): asked again, up to three times."""
    seen = []
    for _ in range(3):
        text, rung = _answer(stack, prompt, max_tokens)
        if rung in ("h100", "a100"):
            return text
        seen.append(rung)
    raise AssertionError(f"tiny-chatml never answered {prompt!r}: {seen}")


def _references(stack: dict[str, Any]) -> list[str]:
    """Every prompt's uninterrupted greedy tiny-chatml answer (asked 8 at once, as the
    streams will be; one that another model gave is asked again)."""
    if stack["references"]:
        return stack["references"]
    answers: dict[int, tuple[str, str]] = {}
    asked = [threading.Thread(target=lambda i=i: answers.__setitem__(
        i, _answer(stack, PROMPTS[i], MAX_TOKENS))) for i in range(STREAMS)]
    for t in asked:
        t.start()
    for t in asked:
        t.join(300)
    stack["references"] = [
        answers[i][0] if answers.get(i, ("", ""))[1] in ("h100", "a100")
        else _greedy(stack, PROMPTS[i]) for i in range(STREAMS)]
    return stack["references"]


def _chat_prompt_tokens(prompt: str) -> int:
    """The prompt's tokens in tiny-chatml's own chat template, counted by its tokenizer."""
    from transformers import AutoTokenizer

    from ray_ladder.engines.tiny import model_path

    tok = AutoTokenizer.from_pretrained(str(model_path("tiny-chatml")))
    text = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                   add_generation_prompt=True, tokenize=False)
    return len(tok(text, add_special_tokens=False)["input_ids"])


def test_whole_and_streamed_answers_are_the_engine_s_own(stack):
    client = _client(stack)
    whole = client.chat.completions.create(
        model="engines", messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=32,
        temperature=0)
    assert whole.model == "tiny-chatml" and whole.model_extra["ladder"]["rung"] == "h100"
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 32
    assert whole.usage.prompt_tokens == _chat_prompt_tokens(PROMPTS[0])  # the engine's
    chunks = list(client.chat.completions.create(
        model="engines", messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=32,
        temperature=0, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content and text
    assert chunks[-1].usage.completion_tokens == 32
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_a_loading_llm_server_is_not_down_and_answers_once_loaded(stack):
    # The LLMServer on a100 loads its engine for a minute or more after h100's is up:
    # not obtainable meanwhile, never marked down (a load is not a failure).
    seen: list[Any] = []

    def loaded() -> bool:
        a100 = next(r for r in _state(stack)["rungs"] if r["name"] == "a100")
        seen.append(a100["down_reason"])
        return bool(a100["obtainable"])

    wait_until(loaded, 600, 0.5, "a100's LLMServer loaded")
    assert not any(seen), seen
    status = serve.status().applications["engines"].deployments["a100"]
    assert status.status == "HEALTHY", status
    assert status.replica_states == {"RUNNING": 1}, status


def test_stop_max_tokens_models_and_a_too_long_context(stack):
    client = _client(stack)
    reference = _greedy(stack, PROMPTS[1], 40)
    stop = reference[20:24]
    assert stop.strip(), reference
    answer = client.completions.create(model="engines", prompt=PROMPTS[1], max_tokens=5,
                                       temperature=0)
    assert answer.usage.completion_tokens == 5
    stopped = client.chat.completions.create(
        model="engines", messages=[{"role": "user", "content": PROMPTS[1]}], max_tokens=40,
        temperature=0, stop=[stop])
    assert stopped.choices[0].finish_reason == "stop"
    assert reference.startswith(stopped.choices[0].message.content or "")
    assert stop not in (stopped.choices[0].message.content or "")
    assert [m.id for m in client.models.list().data] == ["engines"]
    with pytest.raises(openai.BadRequestError) as err:  # the engine's 400, not a fall
        client.chat.completions.create(
            model="engines", messages=[{"role": "user", "content": "word " * 900}],
            max_tokens=8)
    assert err.value.status_code == 400
    assert _state(stack)["current"] == "h100"


Chunks = list[list[tuple[str, str, "str | None"]]]


def _stream_all(client: openai.OpenAI
                ) -> tuple[Chunks, list[Any], list[BaseException], list[threading.Thread]]:
    """8 concurrent greedy streams, started: per stream its (rung, text, switched_from)
    chunks and its last usage chunk; errors raised in any reader; the reader threads."""
    pieces: Chunks = [[] for _ in PROMPTS]
    usage: list[Any] = [None] * len(PROMPTS)
    errors: list[BaseException] = []

    def read(i: int) -> None:
        try:
            for chunk in client.chat.completions.create(
                    model="engines", messages=[{"role": "user", "content": PROMPTS[i]}],
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


def _on(rung: str, pieces: Chunks) -> int:
    """How many streams started on ``rung``."""
    return sum(1 for p in pieces if p and p[0][0] == rung)


def _round(stack: dict[str, Any], rung: str, enough: int = STREAMS // 2):
    """8 streams started with the ladder on ``rung``, once ``enough`` of them have text
    from it or every one has text."""
    wait_until(lambda: _state(stack)["current"] == rung, 300, 0.5, f"the ladder on {rung}")
    pieces, usage, errors, threads = _stream_all(_client(stack))
    wait_until(lambda: errors or _on(rung, pieces) >= enough or all(pieces), 180,
               0.01, f"{enough} of the streams under way on {rung}, or every one")
    assert not errors, errors
    return pieces, usage, errors, threads


def _started_on(stack: dict[str, Any], rung: str, enough: int = STREAMS // 2):
    """A :func:`_round` in which some streams started on ``rung``: a busy machine's
    ``rung`` may be slow to take them, and they start on the next rung instead (a hedge,
    no move), which proves nothing; so a round is run again, up to three times."""
    for _ in range(3):
        pieces, usage, errors, threads = _round(stack, rung, enough)
        if _on(rung, pieces):
            break
        for t in threads:  # every stream started below: again
            t.join(300)
    assert _on(rung, pieces), f"no stream started on {rung} in three rounds"
    return pieces, usage, errors, threads


def _kill_mid_generation(stack: dict[str, Any], rung: str):
    """8 streams on ``rung``; its node SIGKILLed once half of them have sent text from it
    (the engine and the replica die with it: what they held and had not sent is lost;
    what reached the router before the kill is not, so a stream may finish on ``rung``)."""
    pieces, usage, errors, threads = _started_on(stack, rung)
    cluster = stack["cluster"]
    for node in cluster.nodes(rung):
        cluster.remove_node(node)  # SIGKILL of the node: the engine dies mid-generation
    cut = [len(p) for p in pieces]
    for t in threads:
        t.join(300)
    assert not errors, errors
    return pieces, usage, cut


def _usage(usage: Any) -> tuple[int, dict[str, int], dict[str, Any]]:
    ladder = usage.model_extra["ladder"]
    by_rung = {b["rung"]: b["completion_tokens"] for b in ladder["tokens_by_rung"]}
    assert usage.usage.completion_tokens == sum(by_rung.values()), (usage, by_rung)
    return usage.usage.completion_tokens, by_rung, ladder


def test_same_model_below_continues_the_greedy_text_exactly(stack):
    references = _references(stack)
    pieces, usage, cut = _kill_mid_generation(stack, "h100")
    moved = 0
    for i in range(STREAMS):
        done, by_rung, ladder = _usage(usage[i])
        text = "".join(t for _, t, _ in pieces[i])
        if set(by_rung) <= {"h100", "a100"}:  # tiny-chatml all along: its greedy text
            assert done == MAX_TOKENS, (done, ladder)
            assert text == references[i], (i, cut[i], text, references[i])
        else:  # a busy machine's a100 was slow too: it went on to cpu (another model,
            # whose context may end it sooner); what tiny-chatml gave is still its own
            ours = "".join(t for r, t, _ in pieces[i][:next(
                (k for k, (r, _, _) in enumerate(pieces[i]) if r == "cpu"), None)])
            assert done <= MAX_TOKENS and references[i].startswith(ours), (i, ours)
            assert ladder["rung"] == "cpu", ladder
        moved += bool(ladder["switches"]) and ladder["switches"][0]["from"] == "h100"
    assert moved >= 1, cut  # streams that had sent text moved, and their text is whole


def _onto_cpu(stack: dict[str, Any], pieces: Chunks, usage: list[Any], rung: str) -> int:
    """Every stream finished; each that moved went from ``rung`` onto cpu (tiny-inst,
    another tokenizer) and its text after the switch is exactly that engine's own
    continuation of the text before it. Returns how many moved."""
    low = stack["servers"]["low"]
    moved = 0
    for i in range(STREAMS):
        done, by_rung, ladder = _usage(usage[i])
        if not ladder["switches"]:  # on one rung all along (hedged, or done before)
            assert len(by_rung) == 1 and done == MAX_TOKENS, ladder
            continue
        moved += 1
        assert ladder["rung"] == "cpu" and ladder["switches"][0]["from"] == rung, ladder
        # The budget left, or what the smaller model's context has room for (its engine
        # ends it with "length", as it ends an answer that fills its context).
        assert done <= MAX_TOKENS, done
        switch = next((k for k, (_, _, f) in enumerate(pieces[i]) if f == rung),
                      len(pieces[i]))  # no text from cpu: its context was full
        rungs = [r for r, _, _ in pieces[i]]
        assert set(rungs[:switch]) == {rung} and set(rungs[switch:]) <= {"cpu"}, (
            [(r, f) for r, _, f in pieces[i]], ladder)
        before = "".join(t for _, t, _ in pieces[i][:switch])
        after = "".join(t for _, t, _ in pieces[i][switch:])
        if not by_rung.get("cpu"):
            assert after == "", after
            continue
        # What the smaller engine says after exactly that text, in its own chat
        # template, for the tokens it gave: the stream's text after the switch, nothing
        # lost or repeated.
        rest = _engine(low).chat.completions.create(
            model=low.name, messages=[{"role": "user", "content": PROMPTS[i]},
                                      {"role": "assistant", "content": before}],
            max_tokens=by_rung["cpu"], temperature=0,
            extra_body={"continue_final_message": True, "add_generation_prompt": False})
        assert after == rest.choices[0].message.content, (i, before, after)
    return moved


def test_a_killed_engine_s_streams_finish_on_a_model_with_another_tokenizer(stack):
    pieces, usage, cut = _kill_mid_generation(stack, "a100")
    assert _onto_cpu(stack, pieces, usage, "a100") >= 1, cut


def test_a_new_engine_takes_the_top_rung_back(stack):
    stack["cluster"].add_node("h100")  # capacity returns: a new node, a new engine
    wait_until(lambda: _state(stack)["current"] == "h100", 600, 0.5,
               "the ladder back on h100 once its new engine has loaded")
    answer = _client(stack).chat.completions.create(
        model="engines", messages=[{"role": "user", "content": PROMPTS[2]}], max_tokens=16,
        temperature=0)
    assert answer.model_extra["ladder"]["rung"] == "h100"
    text = answer.choices[0].message.content or ""
    assert text and _references(stack)[2].startswith(text)  # the same model, greedy


def test_a_notice_moves_open_streams_before_the_kill(stack):
    # The new h100 node is drained (Ray's drain API: a spot reclaim notice, 30 s to go)
    # while 8 streams run on its engine: the ladder falls at once onto the warm rung
    # below (cpu: a100 is gone) and each open stream whose engine has not yet made the
    # rest moves there at a token boundary, the engine still alive. What h100's engine
    # had already sent the router is kept: a tiny model on a CPU makes its tokens faster
    # than the router passes them on, so here its streams may all finish on h100 before
    # the kill, which is the best outcome (the move itself: tests/serve/test_calls_leaving.py).
    cluster = stack["cluster"]
    pieces, usage, errors, threads = _started_on(stack, "h100", enough=1)
    [node] = cluster.nodes("h100")
    accepted, why = ray_private.drain_node(cluster.address, node.node_id, 30.0)
    assert accepted, why
    wait_until(lambda: _state(stack)["current"] == "cpu", 10, 0.05, "the fall on the notice")
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert node.alive  # every stream ended before the kill, none lost
    _onto_cpu(stack, pieces, usage, "h100")  # whole, exact across any move
    reasons = {u.model_extra["ladder"]["switches"][0]["reason"] for u in usage
               if u.model_extra["ladder"]["switches"]}
    assert all("preemption notice" in r for r in reasons), reasons
    answer = _client(stack).chat.completions.create(
        model="engines", messages=[{"role": "user", "content": PROMPTS[3]}], max_tokens=8,
        temperature=0)
    assert answer.model_extra["ladder"]["rung"] == "cpu"  # nothing new starts there
    cluster.remove_node(node)  # the kill at the deadline: nothing left there to lose
