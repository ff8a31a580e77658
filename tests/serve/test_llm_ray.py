"""The LLM ladder on a real LocalCluster over real HTTP: the official openai client, curl,
20 streams through a SIGKILL of their rung's node, residency across a fall, bad input."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray import serve

from ray_ladder import Ladder
from ray_ladder.serve import build_app
from ray_ladder.serve.llm.models import CounterRung
from ray_ladder.testing import LocalCluster, free_port, wait_until
from tests._other_work import OtherWork

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

LADDER = Ladder.from_yaml("""
name: llm-it
policy: {promotion_hysteresis: 2, probe_interval_s: 0.25, retry_after_s: 3}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, tags: {jurisdiction: us},
     params: {model: big-70b, tokens_per_s: 25}}
  - {name: a100, resources: {ladder/a100: 1}, tags: {jurisdiction: eu}, standby_replicas: 1,
     params: {model: big-70b-int8, tokens_per_s: 25}}
  - {name: cpu, num_cpus: 0.1, tags: {jurisdiction: eu}, standby_replicas: 1,
     params: {model: tiny-1b, tokens_per_s: 25}}
  - {name: shed, kind: shed}
""")
SLOW = 120
MAX_BODY = 100_000
LATE_S = 0.3  # the inter-token target of the /late route
CHAT = "/v1/chat/completions"


def chat(content: str = "count from 0", max_tokens: int = 60, **extra: object) -> dict:
    return {"model": "llm-it", "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, **extra}


@dataclass
class Stream:
    """One streamed answer as a client saw it."""

    chunks: list[tuple[float, str, str, str | None, str | None]] = field(default_factory=list)
    status: int = 0
    error: str | None = None
    done: bool = False
    finish: str | None = None

    @property
    def text(self) -> str:
        return "".join(c[2] for c in self.chunks)

    def numbers(self) -> list[int]:
        return [int(x) for x in self.text.split()]


def read_stream(url: str, body: dict, headers: dict | None = None,
                out: Stream | None = None) -> Stream:
    """Stream ``body`` with httpx, recording every chunk (time, rung, text, switched_from)."""
    out = out or Stream()
    try:
        with httpx.stream("POST", url + CHAT, json={**body, "stream": True},
                          headers=headers or {}, timeout=60) as response:
            out.status = response.status_code
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    out.done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    out.error = chunk["error"]["message"]
                    continue
                choice = chunk["choices"][0] if chunk["choices"] else None
                if choice and choice["delta"].get("content"):
                    ext = chunk["ladder"]
                    out.chunks.append((time.monotonic(), ext["rung"],
                                       choice["delta"]["content"], ext.get("switched_from"),
                                       ext.get("switch_reason")))
                if choice and choice["finish_reason"]:
                    out.finish = choice["finish_reason"]
    except Exception as err:  # the test asserts on it
        out.error = f"{type(err).__name__}: {err}"
    return out


class App:
    def __init__(self, cluster: LocalCluster, port: int) -> None:
        self.cluster = cluster
        self.url = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(timeout=30)

    def state(self) -> dict:
        return self.http.get(self.url + "/-/ladder").json()

    def running(self, rung: str) -> int:
        return next(r for r in self.state()["rungs"] if r["name"] == rung)["running_replicas"]

    def kill(self, node_type: str) -> None:
        for node in self.cluster.nodes(node_type):
            self.cluster.remove_node(node)  # SIGKILL: a preemption

    def ensure(self, node_type: str) -> None:
        if not self.cluster.nodes(node_type):
            self.cluster.add_node(node_type)


@pytest.fixture(scope="module")
def app(local_cluster):
    cluster = local_cluster(ladder=LADDER, initial={"h100": 1, "a100": 1})
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    quick = {"graceful_shutdown_timeout_s": 1.0, "max_ongoing_requests": 64}
    serve.run(build_app(LADDER, {"h100": CounterRung, "a100": CounterRung, "cpu": CounterRung},
                        max_body_bytes=MAX_BODY,
                        deployment_options=dict.fromkeys(["h100", "a100", "cpu"], quick),
                        route_targets={"/late": {"inter_token_s": LATE_S}}),
              name="llm")
    try:
        yield App(cluster, port)
    finally:
        serve.shutdown()


@pytest.fixture
def healthy(app):
    """Both GPU nodes up; the ladder on h100 with a100's standby replica running."""
    app.ensure("h100")
    app.ensure("a100")
    wait_until(lambda: app.state()["current"] == "h100" and app.running("a100") >= 1
               and app.running("cpu") >= 1, SLOW, 0.1, "ladder on h100, a100 and cpu warm")
    return app


def test_the_official_client_sync_and_async_streamed_and_whole(healthy):
    client = openai.OpenAI(base_url=healthy.url + "/v1", api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list().data] == ["llm-it"]
    raw = client.chat.completions.with_raw_response.create(**chat(max_tokens=5))
    answer = raw.parse()
    assert raw.headers["x-ladder-rung"] == "h100" and "x-ladder-degraded-s" in raw.headers
    assert answer.model == "big-70b" and answer.choices[0].message.content == " 1 2 3 4 5"
    assert answer.usage.completion_tokens == 5 and answer.choices[0].finish_reason == "length"
    assert answer.model_extra["ladder"]["rung"] == "h100"
    done = client.completions.create(model="llm-it", prompt="7 8", max_tokens=2)
    assert done.choices[0].text == " 9 10" and done.model == "big-70b"
    chunks = list(client.chat.completions.create(**chat(max_tokens=3), stream=True,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == " 1 2 3"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
    assert {c.model for c in chunks if c.choices} == {"big-70b"}

    async def stream_async() -> str:
        aclient = openai.AsyncOpenAI(base_url=healthy.url + "/v1", api_key="x", max_retries=0)
        text = ""
        async for chunk in await aclient.completions.create(
                model="llm-it", prompt="41", max_tokens=2, stream=True):
            text += chunk.choices[0].text if chunk.choices else ""
        await aclient.close()
        return text

    assert asyncio.run(stream_async()) == " 42 43"


def test_the_official_client_retrieves_the_model_and_gets_400s_for_wrong_types(healthy):
    client = openai.OpenAI(base_url=healthy.url + "/v1", api_key="unused", max_retries=0)
    model = client.models.retrieve("llm-it")  # before: a 404 (the route was not served)
    assert model.id == "llm-it" and model.model_extra["ladder"]["rungs"][0]["rung"] == "h100"
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-4")
    assert missing.value.body["code"] == "model_not_found"
    for wrong in ({"temperature": "0.7"}, {"max_tokens": "5"}):  # before: 200, coerced
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(**{**chat(max_tokens=2), **wrong})
        assert refused.value.body["param"] == next(iter(wrong))
    # The no-op defaults a framework sends with every request are answered (before: 400).
    answer = client.chat.completions.create(
        **chat(max_tokens=2), response_format={"type": "text"}, tools=[],
        tool_choice="none", logit_bias={})
    assert answer.choices[0].message.content == " 1 2"


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_streams_server_sent_events(healthy):
    out = subprocess.run(
        ["curl", "-sN", "-D", "-", healthy.url + CHAT, "-H", "Content-Type: application/json",
         "-d", json.dumps({**chat(max_tokens=3), "stream": True})],
        capture_output=True, text=True, timeout=60, check=True).stdout
    assert "x-ladder-rung: h100" in out.lower() and "text/event-stream" in out
    events = [line[6:] for line in out.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    pieces = [json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-1]]
    assert "".join(p for p in pieces if p) == " 1 2 3"


def test_bad_requests_get_4xx_in_openai_shape_and_the_router_keeps_serving(healthy):
    post = healthy.http.post
    url = healthy.url
    cases = [
        (post(url + CHAT, content=b"{not json", headers={"content-type": "application/json"}),
         400),
        (post(url + CHAT, json=[1, 2, 3]), 400),
        (post(url + CHAT, json={**chat(), "max_tokens": "many"}), 400),
        (post(url + CHAT, json={**chat(), "bogus": True}), 400),
        (post(url + CHAT, json={**chat(), "n": 3}), 400),
        (post(url + CHAT, json={**chat(), "model": "gpt-4o"}), 404),
        (post(url + CHAT, content=b"x" * (MAX_BODY + 1)), 413),
        (post(url + CHAT, json=chat(), headers={"X-Ladder-Jurisdiction": "mars"}), 400),
        (post(url + CHAT, json=chat(), headers={"X-Ladder-Max-Cost": "cheap"}), 400),
        (healthy.http.get(url + CHAT), 405),
        (post(url + "/v1/embeddings", json={}), 404),
    ]
    for response, status in cases:
        assert response.status_code == status, response.text
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    # A client that goes away mid-stream: a clean close, and the router serves on.
    with httpx.stream("POST", url + CHAT, json={**chat(max_tokens=50), "stream": True},
                      timeout=30) as response:
        for i, _ in enumerate(response.iter_lines()):
            if i > 4:
                break
    assert post(url + CHAT, json=chat(max_tokens=2)).json()["choices"][0]["message"][
        "content"] == " 1 2"
    state = healthy.state()
    assert state["current"] == "h100" and state["probe_errors"] == 0


def run_streams(url: str, n: int, body: dict,
                headers: dict | None = None) -> tuple[list[Stream], list[threading.Thread]]:
    streams = [Stream() for _ in range(n)]
    threads = [threading.Thread(target=read_stream, args=(url, body, headers),
                                kwargs={"out": s}) for s in streams]
    for thread in threads:
        thread.start()
    return streams, threads


def test_twenty_streams_survive_the_kill_of_their_node_then_climb_back(healthy):
    streams, threads = run_streams(healthy.url, 20, chat(max_tokens=80))
    wait_until(lambda: all(len(s.chunks) >= 10 for s in streams), SLOW, 0.05,
               "every stream under way on h100")
    killed_at = time.monotonic()
    healthy.kill("h100")
    for thread in threads:
        thread.join(timeout=SLOW)
    for s in streams:
        assert s.status == 200 and s.error is None and s.done, (s.error, s.text[-80:])
        assert s.numbers() == list(range(1, 81)), s.text  # no repeated, no missing piece
        after = [c for c in s.chunks if c[0] > killed_at + 2.0]
        # Below h100, on an eligible rung: a100, or cpu when a busy machine found a100
        # slow or slow to take it (the walk's spill; the rung is the ladder's, never wrong).
        assert after and {c[1] for c in after} <= {"a100", "cpu"}
        # Told once, where it moved. A stream a busy machine's h100 was slow to take
        # started on a100 (a hedge: nothing moved, so nothing to tell).
        moved = ["h100"] if s.chunks[0][1] == "h100" else []
        assert [c[3] for c in s.chunks if c[3]] == moved
    gaps = [b[0] - a[0] for s in streams for a, b in zip(s.chunks, s.chunks[1:], strict=False)]
    print(json.dumps({"max_gap_s": round(max(gaps), 3)}))
    # Capacity returns: new streams climb back after the hysteresis.
    healthy.ensure("h100")
    wait_until(lambda: healthy.state()["current"] == "h100", SLOW, 0.1, "climbed back")
    # The first streams after the climb may start on a100 while h100's new replica takes
    # its first request (a stream does not wait for a silent replica); then h100 serves.
    wait_until(lambda: {c[1] for c in read_stream(healthy.url, chat(max_tokens=3)).chunks}
               == {"h100"}, 30, 0.1, "new streams on h100")


@pytest.mark.alone  # a latency bound across a kill: CI's parallel pass stretched it
def test_a_late_piece_moves_streams_before_ray_reports_their_node_dead(healthy):
    """The /late route's inter-token target (0.3 s): across a SIGKILL of h100's node the
    longest pause of any stream is at most the target + a100's time to first token for
    20 streams starting at once (0.8-1.2 s before, waiting for Ray's report)."""
    for _ in range(2):  # the second round is a100's warm time to first token
        started = time.monotonic()
        firsts, threads = run_streams(healthy.url, 20, chat(max_tokens=1),
                                      {"X-Ladder-Jurisdiction": "eu"})  # eu: on a100
        for thread in threads:
            thread.join(timeout=SLOW)
    ttft = max(s.chunks[0][0] - started for s in firsts)
    streams, threads = run_streams(healthy.url + "/late", 20, chat(max_tokens=80))
    wait_until(lambda: all(len(s.chunks) >= 10 for s in streams), SLOW, 0.05,
               "every stream under way on h100")
    with OtherWork() as other:
        healthy.kill("h100")
        for thread in threads:
            thread.join(timeout=SLOW)
    for s in streams:
        assert s.status == 200 and s.error is None and s.done, (s.error, s.text[-80:])
        assert s.numbers() == list(range(1, 81)), s.text  # no repeated, no missing piece
        moves = [(c[3], c[4] or "") for c in s.chunks if c[3]]
        assert moves[0][0] == "h100", moves  # off the killed rung first
        # At most one move for lateness (the route's late_moves); a stream Ray's report
        # moved first may still make that one (a100 late under 20 moved streams).
        assert sum("inter-token" in why for _, why in moves) <= 1, moves
    # They moved because their next piece was late, before Ray reported the node dead. On
    # a loaded machine Ray's report can win the race for some (a fresh-clone CI run): the
    # late-piece move must have moved streams (each stream moved once, checked above).
    reasons = [c[4] for s in streams for c in s.chunks if c[4]]
    gaps = [b[0] - a[0] for s in streams for a, b in zip(s.chunks, s.chunks[1:], strict=False)]
    print(json.dumps({"max_gap_s": round(max(gaps), 3), "a100_ttft_s": round(ttft, 3)}))
    late_moved = any("inter-token" in r for r in reasons)
    if other.too_busy() and not (late_moved and max(gaps) <= LATE_S + ttft):
        healthy.ensure("h100")  # every stream whole above; the race and the bound not judged
        pytest.skip(f"the late-piece bound not judged: {other}; longest pause "
                    f"{max(gaps):.2f} s, a100's first token {ttft:.2f} s")
    assert late_moved, reasons
    assert max(gaps) <= LATE_S + ttft, (max(gaps), ttft)
    healthy.ensure("h100")


def test_an_eu_stream_never_gets_a_token_from_a_non_eu_rung_across_a_fall(healthy):
    eu = {"X-Ladder-Jurisdiction": "eu"}
    wait_until(lambda: {c[1] for c in read_stream(healthy.url, chat(max_tokens=1),
                                                  eu).chunks} == {"a100"},
               SLOW, 0.2, "the eu selector on a100")
    streams = [Stream() for _ in range(4)]
    threads = [threading.Thread(target=read_stream, args=(healthy.url, chat(max_tokens=60), eu),
                                kwargs={"out": s}) for s in streams]
    for thread in threads:
        thread.start()
    wait_until(lambda: all(len(s.chunks) >= 8 for s in streams), SLOW, 0.05, "eu streams")
    healthy.kill("a100")
    for thread in threads:
        thread.join(timeout=SLOW)
    for s in streams:
        assert s.error is None and s.numbers() == list(range(1, 61)), (s.error, s.text)
        assert {c[1] for c in s.chunks} <= {"a100", "cpu"}
        assert "cpu" in {c[1] for c in s.chunks}
    healthy.ensure("a100")


# Framing headers (Content-Length, Transfer-Encoding) that contradict the body cannot be
# sent by a real client library; the raw-socket test below covers broken framing.
HEADER_NAMES = ["X-Ladder-Jurisdiction", "X-Ladder-Max-Cost", "X-Ladder-Min-Quality",
                "X-Ladder-Sites", "Content-Type", "Content-Encoding", "Accept",
                "Accept-Encoding", "X-Ladder-Unknown"]
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=10), kids,
                                                              max_size=3), max_leaves=10)
bodies = (st.binary(max_size=300)
          | json_values.map(lambda v: json.dumps(v).encode())
          | st.fixed_dictionaries({"model": st.just("llm-it"), "messages": json_values},
                                  optional={"max_tokens": json_values, "stream": json_values,
                                            "n": json_values, "stop": json_values,
                                            "temperature": json_values}
                                  ).map(lambda v: json.dumps(v).encode()))


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from(["POST", "POST", "POST", "GET", "PUT", "DELETE", "PATCH"]),
       path=st.sampled_from(["/", CHAT, "/v1/completions", "/v1/models", "/v1/x", "/-/ladder",
                             "/v1/chat/completions/extra"]),
       headers=st.dictionaries(st.sampled_from(HEADER_NAMES), header_text, max_size=4),
       body=bodies)
def test_hostile_http_gets_4xx_or_an_answer_never_a_5xx(healthy, method, path, headers,
                                                         body):
    try:
        response = healthy.http.request(method, healthy.url + path, content=body,
                                        headers=headers, timeout=30)
    except httpx.HTTPError:
        return  # the client refused to send it (a malformed header of its own): nothing sent
    assert response.status_code < 500 or response.status_code == 503, (
        method, path, headers, body[:80], response.status_code, response.text[:300])


def test_slow_and_vanishing_clients_leave_the_router_serving(healthy):
    import socket

    host, port = "127.0.0.1", int(healthy.url.rsplit(":", 1)[1])
    body = json.dumps({**chat(max_tokens=3), "stream": True}).encode()
    head = (f"POST {CHAT} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    for cut in (len(head) // 2, len(head), len(head) + len(body) // 2):  # hang up mid-way
        with socket.create_connection((host, port), timeout=10) as sock:
            data = head + body
            for i in range(0, cut, 7):  # a slow client, 7 bytes at a time
                sock.sendall(data[i:min(i + 7, cut)])
    reply = healthy.http.post(healthy.url + CHAT, json=chat(max_tokens=2)).json()
    assert reply["choices"][0]["message"]["content"] == " 1 2"
    assert healthy.state()["probe_errors"] == 0
