"""Serve deployments and applications as rungs, and error bodies that name the problem, on a
real LocalCluster over real HTTP (one cluster and one app for the module)."""

from __future__ import annotations

import json
import re
import sys

import cloudpickle
import httpx
import openai
import pytest
import ray
from pydantic import BaseModel, ConfigDict
from ray import serve

from ray_ladder import Ladder
from ray_ladder.serve import build_app
from ray_ladder.testing import free_port, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

LADDER = Ladder.from_yaml("""
name: apps-it
policy: {probe_interval_s: 0.25, retry_after_s: 3, pending_timeout_s: 60}
rungs:
  - {name: app, resources: {ladder/gpu: 1}, num_cpus: 0, tags: {jurisdiction: us}}
  - {name: dep, num_cpus: 0.05, tags: {jurisdiction: eu}, standby_replicas: 1,
     params: {model: dep-model}}
  - {name: server, num_cpus: 0.05, tags: {jurisdiction: ch}, standby_replicas: 1,
     params: {model: served-name}}
  - {name: plain, num_cpus: 0.05, tags: {jurisdiction: de}, standby_replicas: 1}
  - {name: shed, kind: shed}
""")
SLOW = 180  # generous: the CI machine is small and shared
#: What an error body must never carry: ANSI codes, pid, node IP, tracebacks, actor ids.
INTERNALS = re.compile(r"\x1b\[|pid=|ip=|Traceback|[0-9a-f]{32,}|object at 0x")


@serve.deployment(max_ongoing_requests=7, user_config={"greeting": "hej"},
                  ray_actor_options={"num_cpus": 0})
class Echo:
    """A user's Serve deployment, bound into an application with its own arguments."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix
        self.greeting = "unset"

    def reconfigure(self, config: dict) -> None:
        self.greeting = config["greeting"]

    def __call__(self, payload):
        if payload.get("reject"):
            raise ValueError("echo takes no 'reject'")
        if payload.get("boom"):
            raise RuntimeError("echo broke")
        return {"greeting": self.greeting, "suffix": self.suffix,
                "rung": self.ladder_rung.name}


@serve.deployment(max_ongoing_requests=5)
class Counter:
    """A Serve deployment whose class follows the LLM rung protocol (built like a class)."""

    def __init__(self, rung, start: int = 0) -> None:
        self.start = start

    async def generate(self, request):
        text = request.context_text()
        if "reject" in text:
            raise ValueError("counter refuses to count that")
        if "boom" in text:
            raise RuntimeError("counter broke")
        for i in range(self.start, self.start + request.max_tokens):
            yield f" {i}"
            if "late" in text:
                raise RuntimeError("counter broke mid-way")


@serve.deployment(ray_actor_options={"num_cpus": 0})
class FakeLLMServer:
    """Shaped like Ray Serve LLM's LLMServer: async __init__(config), async chat and
    completions that return a stream of batches of OpenAI SSE lines."""

    async def __init__(self, config: dict) -> None:
        self.words = config["words"]

    async def chat(self, request):
        return self._stream(request, chat=True)

    async def completions(self, request):
        return self._stream(request, chat=False)

    async def _stream(self, request, chat: bool):
        assert request.model == "served-name" and request.stream is True
        for word in self.words[:request.max_tokens]:
            choice = {"delta": {"content": word}} if chat else {"text": word}
            yield [f"data: {json.dumps({'choices': [choice]})}\n\n"]
        yield ["data: [DONE]\n\n"]


class Prompt(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt: str = ""


class Plain:
    """A plain rung class with an input model (examples/serve_app.py's TinyModel)."""

    input_model = Prompt

    def __init__(self, rung) -> None:
        self.rung = rung

    def __call__(self, payload: Prompt):
        if payload.prompt == "boom":
            raise RuntimeError("plain broke on " + payload.prompt)
        return {"ok": payload.prompt}


cloudpickle.register_pickle_by_value(sys.modules[__name__])


class App:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.http = httpx.Client(timeout=60)

    def post(self, payload, where: str | None = None) -> httpx.Response:
        headers = {"X-Ladder-Jurisdiction": where} if where else {}
        return self.http.post(self.url + "/", json=payload, headers=headers)

    def current(self) -> str | None:
        return self.http.get(self.url + "/-/ladder").json()["current"]

    def running(self, rung: str) -> int:
        state = self.http.get(self.url + "/-/ladder").json()
        return next(r for r in state["rungs"] if r["name"] == rung)["running_replicas"]

    def openai(self, where: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0,
                             default_headers={"X-Ladder-Jurisdiction": where})


@pytest.fixture(scope="module")
def app(local_cluster):
    local_cluster({}, head={"num_cpus": 2, "resources": {"ladder/gpu": 1}})
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    quick = {"graceful_shutdown_timeout_s": 1.0}
    serve.run(build_app(LADDER, {"app": Echo.bind("!"), "dep": Counter,
                                 "server": FakeLLMServer.bind({"words": ["a", "b", "c"]}),
                                 "plain": Plain},
                        init_kwargs={"dep": {"start": 10}},
                        deployment_options=dict.fromkeys(["app", "dep", "server", "plain"],
                                                         quick)),
              name="apps")
    running = App(port)
    try:
        wait_until(lambda: all(running.running(r) >= 1 for r in ("app", "dep", "server",
                                                                "plain")),
                   SLOW, 0.2, "a replica of every rung running")
        # The router climbs to app (the top rung) on its own probes, after the replicas run:
        # a loaded run's first request found it still on dep (a 400 from dep's schema).
        wait_until(lambda: running.current() == "app", SLOW, 0.2, "the router on app")
        yield running
    finally:
        serve.shutdown()


def clean(response: httpx.Response) -> str:
    assert not INTERNALS.search(response.text), response.text
    return response.text


def test_an_application_rung_keeps_its_own_args_and_options_on_the_rungs_placement(app):
    answer = app.post({"hi": 1})
    assert answer.status_code == 200 and answer.headers["x-ladder-rung"] == "app"
    assert answer.json() == {"greeting": "hej", "suffix": "!", "rung": "app"}
    # The replica holds the rung's resource (the ladder's placement), not only its own.
    assert ray.cluster_resources()["ladder/gpu"] == 1
    wait_until(lambda: ray.available_resources().get("ladder/gpu", 0) == 0, SLOW, 0.2,
               "the app rung's replica holds ladder/gpu")


def test_a_deployment_rung_and_an_llmserver_shaped_app_answer_the_openai_routes(app):
    chat = app.openai("eu").chat.completions.with_raw_response.create(
        model="apps-it", messages=[{"role": "user", "content": "count"}], max_tokens=3)
    assert chat.headers["x-ladder-rung"] == "dep"
    assert chat.parse().choices[0].message.content == " 10 11 12"
    served = app.openai("ch")
    raw = served.chat.completions.with_raw_response.create(
        model="apps-it", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert raw.headers["x-ladder-rung"] == "server"
    assert raw.parse().choices[0].message.content == "ab"
    streamed = served.completions.create(model="apps-it", prompt="x", max_tokens=3,
                                         stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == "abc"
    whole = app.post({"prompt": "hi", "max_tokens": 2}, "ch")
    assert whole.status_code == 200 and whole.json()["text"] == "ab"


@pytest.mark.parametrize(("payload", "where", "says"), [
    ([1, 2, 3], "de", "the rung takes Prompt"),
    ({"prompt": 5}, "de", "prompt: Input should be a valid string"),
    ({"reject": True}, "us", "echo takes no 'reject'"),
])
def test_a_rejected_payload_is_a_400_that_names_the_problem_only(app, payload, where, says):
    response = app.post(payload, where)
    assert response.status_code == 400, response.text
    assert says in clean(response)


@pytest.mark.parametrize(("payload", "where", "says"), [
    ({"prompt": "boom"}, "de", "rung error: RuntimeError: plain broke on boom"),
    ({"boom": True}, "us", "rung error: RuntimeError: echo broke"),
])
def test_a_rung_that_raises_is_a_500_with_its_type_and_message_only(app, payload, where,
                                                                    says):
    response = app.post(payload, where)
    assert response.status_code == 500, response.text
    assert response.json() == {"error": says}
    clean(response)


@pytest.mark.parametrize(("content", "status", "kind", "says"), [
    ("reject", 400, "invalid_request_error", "rejected by the rung: counter refuses"),
    ("boom", 500, "server_error", "rung error: RuntimeError: counter broke"),
])
def test_the_openai_routes_error_objects_carry_no_internals(app, content, status, kind, says):
    body = {"model": "apps-it", "messages": [{"role": "user", "content": content}],
            "max_tokens": 3}
    response = app.http.post(app.url + "/v1/chat/completions", json=body,
                             headers={"X-Ladder-Jurisdiction": "eu"})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == kind and error["message"].startswith(says)
    clean(response)


def test_a_rung_error_mid_stream_ends_the_stream_with_its_type_and_message_only(app):
    body = {"model": "apps-it", "messages": [{"role": "user", "content": "late"}],
            "max_tokens": 3, "stream": True}
    streamed = app.http.post(app.url + "/v1/chat/completions", json=body,
                             headers={"X-Ladder-Jurisdiction": "eu"})
    assert streamed.status_code == 200
    assert "rung error: RuntimeError: counter broke mid-way" in clean(streamed)


FULL = Ladder.from_yaml("""
name: full-it
policy: {probe_interval_s: 0.25, retry_after_s: 3, pending_timeout_s: 1.5}
rungs:
  - {name: one, num_cpus: 0.05}
  - {name: shed, kind: shed}
""")


class Hold:
    """A rung of one slot that holds it for the asked seconds, after marking it started."""

    def __init__(self, rung) -> None:
        self.rung = rung

    def __call__(self, payload: dict) -> dict:
        import pathlib
        import time

        pathlib.Path(payload["started"]).touch()
        time.sleep(payload["hold_s"])
        return {"held": payload["hold_s"]}


def test_a_request_the_full_ladder_cannot_take_by_its_deadline_is_shed_not_queued(
        app, tmp_path):
    """The only compute rung is full (one replica, one request at a time): a second request
    waits pending_timeout_s (1.5 s) in its queue, then gets the shed rung's 503 with
    Retry-After, long before the slot frees; the first request is answered in full."""
    import concurrent.futures
    import time

    serve.run(build_app(FULL, {"one": Hold}, deployment_options={"one": {
        "max_ongoing_requests": 1, "graceful_shutdown_timeout_s": 1.0}}),
        name="full", route_prefix="/full")
    url = app.url + "/full/"
    wait_until(lambda: app.http.get(url + "-/ladder").json()["current"] == "one", SLOW, 0.2,
               "the full-it ladder on its rung")
    started = tmp_path / "started"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(app.http.post, url, json={"hold_s": 12, "started": str(started)})
        wait_until(started.exists, SLOW, 0.05, "the first request holds the slot")
        t0 = time.monotonic()
        second = app.http.post(url, json={"hold_s": 0, "started": str(tmp_path / "2")})
        waited = time.monotonic() - t0
        assert not first.done()  # shed while the slot is still held, not after it
        assert (second.status_code, second.headers["retry-after"],
                second.headers["x-ladder-rung"]) == (503, "3", "shed"), second.text
        assert 1.5 <= waited < 12, waited
        assert not (tmp_path / "2").exists()  # it never ran on the rung
        done = first.result(timeout=SLOW)
    assert done.status_code == 200 and done.json() == {"held": 12}
    serve.delete("full")
