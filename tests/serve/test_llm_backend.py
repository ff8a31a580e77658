"""An external OpenAI-compatible server as a rung: a real HTTP server on loopback (one LLM
rung class behind the OpenAI API, as a vLLM server would be), its key from the
environment, residency tags, and the fall when the server dies mid-stream."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest
from ray import serve

from ray_ladder import Ladder
from ray_ladder.serve import build_app
from ray_ladder.serve.llm.backend import OpenAIBackendRung
from ray_ladder.serve.llm.models import CounterRung
from ray_ladder.testing import free_port, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

KEY_ENV = "RAY_LADDER_TEST_BACKEND_KEY"
KEY = "test-key-not-a-secret"


def start_server(port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, KEY_ENV: KEY}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray_ladder.serve.llm.standalone",
         "ray_ladder.serve.llm.models:CounterRung", "--model", "eu-counter-7b",
         "--port", str(port), "--api-key-env", KEY_ENV, "--init-kwargs",
         json.dumps({"tokens_per_s": 25})], env=env)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)

    def up() -> bool:
        try:
            return client.models.list().data[0].id == "eu-counter-7b"
        except openai.APIConnectionError:
            return False

    wait_until(up, 30, 0.1, "the backend server answers")
    return proc


@pytest.fixture(scope="module")
def stack(local_cluster):
    backend_port = free_port()
    server = start_server(backend_port)
    os.environ[KEY_ENV] = KEY  # the ladder names the variable; workers inherit it
    ladder = Ladder.from_dict({"name": "ext", "policy": {"probe_interval_s": 0.25},
                               "rungs": [
        {"name": "eu-burst", "num_cpus": 0.1, "tags": {"jurisdiction": "eu"},
         "params": {"base_url": f"http://127.0.0.1:{backend_port}/v1",
                    "model": "eu-counter-7b", "api_key_env": KEY_ENV, "timeout_s": 5}},
        {"name": "cpu", "num_cpus": 0.1, "tags": {"jurisdiction": "eu"}, "standby_replicas": 1,
         "params": {"model": "tiny-1b", "tokens_per_s": 25}},
        {"name": "shed", "kind": "shed"}]})
    cluster = local_cluster(ladder=ladder)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    options = {"graceful_shutdown_timeout_s": 1.0, "max_ongoing_requests": 32,
               "health_check_period_s": 1.0, "health_check_timeout_s": 2.0}
    serve.run(build_app(ladder, {"eu-burst": OpenAIBackendRung, "cpu": CounterRung},
                        deployment_options={"eu-burst": options, "cpu": options}), name="ext")
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: httpx.get(url + "/-/ladder").json()["current"] == "eu-burst", 60, 0.1,
               "the ladder on the external rung")
    stack = {"url": url, "server": server, "backend_port": backend_port, "cluster": cluster}
    try:
        yield stack
    finally:
        stack["server"].kill()  # the one running now (a test may have restarted it)
        stack["server"].wait(timeout=10)
        serve.shutdown()
        os.environ.pop(KEY_ENV, None)


def test_the_external_rung_answers_with_its_model_and_sends_the_key(stack):
    client = openai.OpenAI(base_url=stack["url"] + "/v1", api_key="x", max_retries=0)
    answer = client.chat.completions.create(
        model="ext", messages=[{"role": "user", "content": "from 10"}], max_tokens=3,
        extra_headers={"X-Ladder-Jurisdiction": "eu"})
    assert answer.choices[0].message.content == " 11 12 13"
    assert answer.model == "eu-counter-7b"  # the rung's model, not the ladder's id
    assert answer.model_extra["ladder"]["rung"] == "eu-burst"
    # Without the key the server refuses: the 401 is a client error, not a fallback.
    refused = httpx.get(f"http://127.0.0.1:{stack['backend_port']}/v1/models")
    assert refused.status_code == 401


def test_a_stream_continues_on_the_next_rung_when_the_backend_dies(stack):
    chunks: list[tuple[str, str]] = []
    done = threading.Event()

    def read() -> None:
        with httpx.stream("POST", stack["url"] + "/v1/completions", timeout=60, json={
                "model": "ext", "prompt": "0", "max_tokens": 60, "stream": True}) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    assert "error" not in chunk, chunk
                    if chunk["choices"] and chunk["choices"][0]["text"]:
                        chunks.append((chunk["ladder"]["rung"], chunk["choices"][0]["text"]))
        done.set()

    thread = threading.Thread(target=read)
    thread.start()
    wait_until(lambda: len(chunks) >= 10, 60, 0.05, "the stream under way on the backend")
    stack["server"].kill()  # the vLLM server goes away mid-generation
    killed = len(chunks)
    assert done.wait(60)
    thread.join()
    # A chunk may carry several numbers (pieces that queued go together).
    numbers = [int(n) for _, t in chunks for n in t.split()]
    assert numbers == list(range(1, 61))  # one stream, no repeated or lost piece
    # One move, off the killed backend: eu-burst until the kill and after it while what
    # the backend had sent still arrives (how much is the machine's speed), then cpu.
    rungs = [r for r, _ in chunks]
    assert "cpu" in rungs, rungs
    moved = rungs.index("cpu")
    assert moved >= killed and set(rungs[:moved]) == {"eu-burst"} \
        and set(rungs[moved:]) == {"cpu"}, rungs
    # The ladder falls off the external rung and stays off while it is down: pings run
    # its health probe, each failure keeps it down longer.
    def current() -> str:
        return httpx.get(stack["url"] + "/-/ladder").json()["current"]

    wait_until(lambda: current() == "cpu", 30, 0.1, "the ladder off the dead backend")
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:  # an invariant over a window, not a wait
        assert current() == "cpu"
    # The server comes back: its health probe passes, the ladder climbs back to it.
    stack["server"] = start_server(stack["backend_port"])
    wait_until(lambda: current() == "eu-burst", 90, 0.2, "back on the external rung")
