"""The backend that fails on purpose: what each fault sends, read with httpx (sync and
async), the openai client and the ladder's ChunkReader; switching while it runs, on the same
port. No Ray."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from ray_ladder.core.exceptions import RungUnavailableError
from ray_ladder.serve.llm.chunks import ChunkReader, TruncatedStream
from ray_ladder.testing import free_port, wait_until
from ray_ladder.testing.faults import FAULTS, FaultyBackend, parse_command

pytestmark = pytest.mark.timeout(120)

MODEL = "primary"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> Iterator[FaultyBackend]:
    with FaultyBackend(MODEL, tokens_per_s=200) as backend:
        yield backend


@pytest.fixture
def backend(server: FaultyBackend) -> Iterator[FaultyBackend]:
    """The module's backend, healthy with an empty log for each test (and after it: the
    switch releases whatever a test left held)."""
    server.set_fault("healthy")
    server.reset_log()
    yield server
    server.set_fault("healthy")


@pytest.fixture
def client(backend: FaultyBackend) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=backend.url, timeout=10.0) as c:
        yield c


def completion(stream: bool, max_tokens: int = 6) -> dict[str, Any]:
    return {"model": MODEL, "prompt": "1", "max_tokens": max_tokens, "stream": stream}


def count(first: int, n: int) -> str:
    """The counter's text: `` first first+1 ...`` (n numbers)."""
    return "".join(f" {i}" for i in range(first, first + n))


def data_lines(client: httpx.Client, body: dict[str, Any]) -> tuple[httpx.Response, list[str]]:
    with client.stream("POST", "/completions", json=body) as response:
        return response, [line for line in response.iter_lines() if line]


def texts(lines: list[str]) -> str:
    """The text of the lines that are chunks (the others are skipped)."""
    out = ""
    for line in lines:
        try:
            choices = json.loads(line[len("data: "):]).get("choices") or []
        except ValueError:
            continue
        out += "".join(c.get("text") or "" for c in choices)
    return out


def read(lines: list[str]) -> str:
    """The stream as the ladder's OpenAIBackendRung reads it (raises as it would)."""
    reader, text = ChunkReader("faulty"), ""
    for line in lines:
        tokens = reader.line(line)
        text += tokens.text if tokens is not None else ""
    reader.end()
    return text


def test_every_fault_has_one_name_and_the_docs_list_each() -> None:
    assert len(set(FAULTS)) == len(FAULTS) == 20
    page = (ROOT / "docs" / "testing.md").read_text()
    section = page.split("## A backend that fails on purpose", 1)[1].split("\n## ", 1)[0]
    assert [f for f in FAULTS if f"`{f}`" not in section] == []


def test_healthy_is_the_plain_server_the_clients_read(backend: FaultyBackend,
                                                     client: httpx.Client) -> None:
    assert client.get("/models").json()["data"][0]["id"] == MODEL
    oai = openai.OpenAI(base_url=backend.url, api_key="unused", max_retries=0)
    stream = oai.chat.completions.create(model=MODEL, max_tokens=6, stream=True, messages=[
        {"role": "user", "content": "1 2 3"}])
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == count(4, 6)
    response, lines = data_lines(client, completion(True))
    assert response.headers["content-type"].startswith("text/event-stream")
    assert read(lines) == count(2, 6) and lines[-1] == "data: [DONE]"
    whole = client.post("/completions", json=completion(False)).json()["choices"][0]
    assert (whole["text"], whole["finish_reason"]) == (count(2, 6), "length")


def test_a_chat_message_may_carry_litellms_prefix_key(client: httpx.Client) -> None:
    answer = client.post("/chat/completions", json={"model": MODEL, "max_tokens": 2,
                         "messages": [{"role": "user", "content": "1"},
                                      {"role": "assistant", "content": " 2", "prefix": True}]})
    assert answer.json()["choices"][0]["message"]["content"] == count(3, 2)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 408, 429, 500, 503])
def test_a_status_fault_answers_an_openai_error_and_the_health_check_passes(
        backend: FaultyBackend, client: httpx.Client, status: int) -> None:
    backend.set_fault(f"status_{status}", retry_after_s=2.5)  # type: ignore[arg-type]
    for stream in (False, True):
        response = client.post("/completions", json=completion(stream))
        assert response.status_code == status
        assert response.headers["content-type"] == "application/json"
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
        assert response.headers.get("retry-after") == ("3" if status in (429, 503) else None)
    assert client.get("/models").status_code == 200
    if status == 400:
        assert "context too long" in response.json()["error"]["message"]
    backend.set_fault(f"status_{status}")  # type: ignore[arg-type]
    assert "retry-after" not in client.post("/completions", json=completion(False)).headers


def test_refused_refuses_then_listens_again_on_the_same_port(backend: FaultyBackend,
                                                            client: httpx.Client) -> None:
    url = backend.url
    assert client.get("/models").status_code == 200  # a kept-alive connection now
    backend.set_fault("refused")
    for call in (lambda: client.get("/models"),
                 lambda: httpx.post(url + "/completions", json=completion(False))):
        with pytest.raises(httpx.TransportError):
            call()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/models")
    backend.set_fault("healthy")
    assert backend.url == url
    assert client.post("/completions", json=completion(False)).status_code == 200


def test_silent_accepts_and_never_answers(backend: FaultyBackend) -> None:
    backend.set_fault("silent")
    with httpx.Client(base_url=backend.url, timeout=1.0) as quick:
        for call in (lambda: quick.post("/completions", json=completion(True)),
                     lambda: quick.get("/models")):
            with pytest.raises(httpx.ReadTimeout):
                call()
    assert [r.fault for r in backend.log] == ["silent"]


@pytest.mark.parametrize(("fault", "stream"),
                         [("silent", False), ("hang_mid", True), ("hang_mid", False)])
def test_a_switch_closes_the_requests_a_fault_holds(backend: FaultyBackend, fault: str,
                                                    stream: bool) -> None:
    backend.set_fault(fault, after_tokens=2)  # type: ignore[arg-type]
    got: list[str] = []

    def ask() -> None:
        with httpx.stream("POST", backend.url + "/completions", json=completion(stream),
                          timeout=30.0) as response:
            for line in response.iter_lines():  # one at a time: the test watches them come
                if line:
                    got.append(line)

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(ask)
        wait_until(lambda: backend.requests == 1 and len(got) == (2 if stream else 0),
                   10, 0.02, "the request is held")
        backend.set_fault("healthy")
        with pytest.raises(httpx.RemoteProtocolError):
            future.result(timeout=5)
    assert texts(got) == (count(2, 2) if stream else "")
    assert httpx.post(backend.url + "/completions", json=completion(False)).status_code == 200


def test_hang_mid_stops_after_its_tokens_and_holds_the_connection(
        backend: FaultyBackend) -> None:
    backend.set_fault("hang_mid", after_tokens=3)
    got: list[str] = []
    with httpx.Client(base_url=backend.url, timeout=1.0) as quick:
        with pytest.raises(httpx.ReadTimeout), \
                quick.stream("POST", "/completions", json=completion(True)) as response:
            assert response.status_code == 200
            got.extend(line for line in response.iter_lines() if line)
        assert texts(got) == count(2, 3)
        with pytest.raises(httpx.ReadTimeout):  # a whole answer: nothing before the hang
            quick.post("/completions", json=completion(False))


def test_late_first_token_sends_the_headers_at_once(backend: FaultyBackend,
                                                    client: httpx.Client) -> None:
    backend.set_fault("late_first_token", late_s=0.8)
    start = time.monotonic()
    with client.stream("POST", "/completions", json=completion(True)) as response:
        headers_s = time.monotonic() - start
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
        first_token_s = time.monotonic() - start  # no sooner than the last one
    assert headers_s < 0.4 and first_token_s >= 0.8
    assert read(lines) == count(2, 6)
    start = time.monotonic()
    assert client.post("/completions", json=completion(False)).status_code == 200
    assert time.monotonic() - start >= 0.8


def test_trickle_slows_the_tokens_past_its_start(backend: FaultyBackend,
                                                 client: httpx.Client) -> None:
    backend.set_fault("trickle", after_tokens=2, trickle_s=0.25)
    start = time.monotonic()
    _, lines = data_lines(client, completion(True, 4))
    assert time.monotonic() - start >= 2 * 0.25  # tokens 3 and 4 waited
    assert read(lines) == count(2, 4)
    start = time.monotonic()
    answer = client.post("/completions", json=completion(False, 4)).json()
    assert answer["choices"][0]["text"] == count(2, 4)
    assert time.monotonic() - start >= 2 * 0.25


def test_truncated_ends_cleanly_without_finish_or_done(backend: FaultyBackend,
                                                       client: httpx.Client) -> None:
    backend.set_fault("truncated", after_tokens=3)
    response, lines = data_lines(client, completion(True))  # read to its clean end
    assert texts(lines) == count(2, 3) and len(lines) == 3
    assert "[DONE]" not in lines[-1] and all('"finish_reason": null' in x for x in lines)
    with pytest.raises(TruncatedStream):
        read(lines)
    choice = client.post("/completions", json=completion(False)).json()["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == (count(2, 3), None)


def test_cut_closes_the_connection_mid_body(backend: FaultyBackend,
                                            client: httpx.Client) -> None:
    backend.set_fault("cut", after_tokens=3)
    got: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"), \
            client.stream("POST", "/completions", json=completion(True)) as response:
        got.extend(line for line in response.iter_lines() if line)
    assert texts(got) == count(2, 3)
    with pytest.raises(httpx.RemoteProtocolError):
        client.post("/completions", json=completion(False))


def test_error_event_comes_mid_stream(backend: FaultyBackend, client: httpx.Client) -> None:
    backend.set_fault("error_event", after_tokens=3)
    _, lines = data_lines(client, completion(True))
    assert texts(lines) == count(2, 3) and lines[-1] == "data: [DONE]"
    assert json.loads(lines[3][len("data: "):])["error"]["type"] == "server_error"
    with pytest.raises(RungUnavailableError, match="stream failed"):
        read(lines)
    oai = openai.OpenAI(base_url=backend.url, api_key="unused", max_retries=0)
    with pytest.raises(openai.APIError):
        for _ in oai.completions.create(model=MODEL, prompt="1", max_tokens=6, stream=True):
            pass
    whole = client.post("/completions", json=completion(False))
    assert whole.status_code == 200 and "choices" not in whole.json()


def test_malformed_puts_a_bad_line_in_a_tokens_place(backend: FaultyBackend,
                                                     client: httpx.Client) -> None:
    backend.set_fault("malformed", after_tokens=3)
    _, lines = data_lines(client, completion(True))
    assert lines[3] == "data: {not json" and lines[-1] == "data: [DONE]"
    assert texts(lines) == count(2, 3) + count(6, 2)  # a client that skips it has a gap
    with pytest.raises(TruncatedStream, match="not JSON"):
        read(lines)
    whole = client.post("/completions", json=completion(False))
    assert whole.status_code == 200
    with pytest.raises(ValueError):
        whole.json()


def test_html_200_and_empty(backend: FaultyBackend, client: httpx.Client) -> None:
    backend.set_fault("html_200")
    for stream in (True, False):
        response = client.post("/completions", json=completion(stream))
        assert response.status_code == 200 and response.text.startswith("<html>")
        assert response.headers["content-type"].startswith("text/html")
    backend.set_fault("empty")
    _, lines = data_lines(client, completion(True))
    assert lines == ["data: [DONE]"]
    whole = client.post("/chat/completions", json={
        "model": MODEL, "messages": [{"role": "user", "content": "1"}]})
    assert whole.status_code == 200 and whole.json()["choices"] == []


def test_the_async_client_sees_the_same(backend: FaultyBackend) -> None:
    async def main() -> list[Any]:
        seen: list[Any] = []
        async with httpx.AsyncClient(base_url=backend.url, timeout=10.0) as client:
            for fault in ("healthy", "truncated", "cut", "silent"):
                backend.set_fault(fault, after_tokens=2)  # type: ignore[arg-type]
                try:
                    async with client.stream("POST", "/completions", json=completion(True, 4),
                                             timeout=1.0 if fault == "silent" else 10.0
                                             ) as response:
                        seen.append(texts([x async for x in response.aiter_lines() if x]))
                except httpx.HTTPError as err:
                    seen.append(type(err))
        return seen

    assert asyncio.run(main()) == [count(2, 4), count(2, 2), httpx.RemoteProtocolError,
                                   httpx.ReadTimeout]


def test_the_log_has_each_post_with_its_time_and_fault(backend: FaultyBackend,
                                                       client: httpx.Client) -> None:
    before = time.monotonic()
    client.post("/completions", json=completion(False, 1))
    backend.set_fault("status_503", retry_after_s=5)
    client.post("/chat/completions", json={"model": MODEL, "messages": []})
    client.get("/models")  # not a POST: not logged
    assert backend.requests == 2
    assert [(r.path, r.fault) for r in backend.log] == [
        ("/v1/completions", "healthy"), ("/v1/chat/completions", "status_503")]
    assert before <= backend.log[0].t <= backend.log[1].t <= time.monotonic()
    assert backend.options.retry_after_s == 5
    backend.reset_log()
    assert backend.requests == 0 and backend.log == []


def test_unknown_faults_and_options_are_refused(backend: FaultyBackend) -> None:
    with pytest.raises(ValueError, match="unknown fault 'down'.*healthy, refused"):
        backend.set_fault("down")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="negative"):
        backend.set_fault("trickle", trickle_s=-1)
    assert backend.fault == "healthy"
    assert parse_command("hang_mid after_tokens=4") == ("hang_mid", {"after_tokens": 4})
    with pytest.raises(ValueError, match="unknown option 'late'"):
        parse_command("late_first_token late=3")


def test_a_backend_set_to_refused_before_its_start_refuses_from_the_start() -> None:
    backend = FaultyBackend("down", port=free_port())
    backend.set_fault("refused")
    with backend:
        with pytest.raises(httpx.ConnectError):
            httpx.get(backend.url + "/models")
        backend.set_fault("healthy")
        assert httpx.get(backend.url + "/models").status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(backend.url + "/models")


def test_the_command_line_backend_switches_on_stdin() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray_ladder.testing.faults", "--model", "cli", "--port",
         str(port), "--fault", "status_503", "--retry-after-s", "2"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().startswith(f"listening http://127.0.0.1:{port}/v1")
        url = f"http://127.0.0.1:{port}/v1/completions"
        answer = httpx.post(url, json={"model": "cli", "prompt": "1", "max_tokens": 2})
        assert (answer.status_code, answer.headers["retry-after"]) == (503, "2")
        proc.stdin.write("healthy\n")
        proc.stdin.flush()
        assert proc.stdout.readline().startswith("fault healthy")
        answer = httpx.post(url, json={"model": "cli", "prompt": "1", "max_tokens": 2})
        assert answer.json()["choices"][0]["text"] == count(2, 2)
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0
