"""Head-to-head: the ladder's OpenAI route against LiteLLM's ``Router``, live, same backends.

Two OpenAI-compatible backends on loopback, one per rung: ``CounterRung`` served by the
project's standalone server (:func:`ray_ladder.serve.llm.standalone.openai_app`, no Ray),
``counter-primary`` and ``counter-fallback``, each paced at ``--tokens-per-s``. In front
of the same two servers:

* ``ladder``: a ladder ``primary -> fallback -> shed`` whose two compute rungs are
  :class:`~ray_ladder.serve.llm.OpenAIBackendRung` (one per URL), ``serve.run(build_app(...))``
  on a :class:`~ray_ladder.testing.LocalCluster`, read through its ``/v1`` route. Policy
  defaults (docs/spec.md); what docs/llm.md and docs/serve.md recommend for the deployments
  and nothing more: ``health_check_period_s: 1`` (docs/llm.md, external backends),
  ``standby_replicas: 1`` on the rung below the top (docs/serve.md), and
  ``max_ongoing_requests: 64`` so the 20 streams fit (Serve's default is 5).
* ``litellm``: ``litellm.Router(model_list=[primary, fallback], fallbacks=[{"primary":
  ["fallback"]}])`` with every other setting at its default. Docs:
  https://docs.litellm.ai/docs/proxy/reliability (fallbacks, after ``num_retries``) and
  https://docs.litellm.ai/docs/router/api_reference/configuration (the defaults, for the
  current release); for the pinned one (1.82.6) they were read from its source
  (``litellm/router.py`` ``Router.__init__``, ``litellm/constants.py``, ``litellm/router_utils/
  cooldown_handlers.py``) and the bench prints them (``litellm_settings``):
  ``num_retries`` = ``openai.DEFAULT_MAX_RETRIES`` (2), ``allowed_fails`` 3,
  ``cooldown_time`` 5 s (``DEFAULT_COOLDOWN_TIME_SECONDS``), ``max_fallbacks`` 5, and the
  v2 cooldown rule: a model group with a single deployment is not cooled down for
  connection errors below 1000 failed requests a minute
  (``SINGLE_DEPLOYMENT_TRAFFIC_FAILURE_THRESHOLD``), so every request tries the primary
  first. Its HTTP transport is its default, aiohttp (``disable_aiohttp_transport=False``).
* ``litellm_httpx_transport`` (``--no-variant`` skips it): the same Router with one
  non-default switch, ``litellm.disable_aiohttp_transport = True``. It is there because
  the default transport ends a stream whose server died as if it had finished
  (``AiohttpResponseStream`` returns quietly on an incomplete chunked body), so LiteLLM's
  mid-stream fallback (``MidStreamFallbackError``: the fallback model gets the messages, a
  system prompt and the text so far as an assistant ``prefix`` message) never starts;
  over httpx the broken read raises and the mid-stream fallback runs.

The backends drop the ``prefix`` key of a chat message before the project's strict
request schema sees it (vLLM and Mistral's API accept it; the standalone server refuses any
unknown field with a 400). Nothing else about them is changed, and every system talks to
the same two processes.

Client side, the same for every system: one asyncio loop in this process; the ``openai``
client (``AsyncOpenAI``, ``max_retries=0``: retries would hide what the system under test
did) for the ladder and for the backend directly, LiteLLM's own async generator
(``await router.acompletion(..., stream=True)``) for LiteLLM; each piece is stamped with
``time.monotonic()`` when the loop gets it and with the chunk's ``model``, which is the
backend that produced it (the ladder reports the rung's model, LiteLLM the deployment's).

1. **Overhead, everything healthy.** ``--rounds`` x ``--requests`` turns; in each turn
   one streamed request of ``--overhead-tokens`` tokens to ``direct`` (the primary
   backend), ``ladder`` and ``litellm``, one after the other, in an order that rotates
   every turn. A request's overhead = its latency (request to last piece) less direct's
   in the same turn; reported: the median over every turn (``overhead_p50_s``) and each
   round's median with their min and max; the same for time to first token.
2. **Kill and restart, per system in turn (ladder, litellm, litellm_httpx_transport).**
   ``--streams`` concurrent streams of ``--tokens`` tokens start together; ``--kill-after-s``
   later the primary backend's process gets SIGKILL; ``--down-s`` after the kill it is
   started again on the same port. From the kill on, a probe request (streamed,
   ``--overhead-tokens`` tokens) starts every 0.2 s, not waiting for the previous one,
   until one is answered by the primary after its restart (or ``--back-timeout-s``).

   * ``broken_streams``: streams that ended with an error or whose text does not start
     with the full expected count (`` 1 2 ... N``): truncated, a gap or a repeat.
     ``wrong_text_streams`` also counts streams that got more than the ``max_tokens``
     asked (text beyond the expected count); ``repeated_or_lost_chars`` compares the text
     with the exact count character by character (plus the length difference).
   * ``failover_first_token_s``: kill -> the first piece from the fallback backend on a
     stream that was under way at the kill, median over the streams that moved
     (``failover_first_token_max_s``: the slowest); ``null`` when no stream moved.
   * ``max_gap_s``: the longest pause between two pieces of any stream that is not
     broken (``null`` if all broke); ``max_gap_starts_after_kill_s`` says when it began
     (negative: before the kill).
   * ``primary_down_s``: kill -> the restarted primary listening again (the server
     writes the moment, on the machine's monotonic clock, when uvicorn has started).
   * ``requests_failed_while_down``: probes started in that window that ended with an
     error or a wrong text (``requests_while_down``: how many started;
     ``request_latency_while_down_p50_s``: how long the ones that succeeded took).
   * ``back_on_primary_s``: restarted primary listening -> the first piece of the first
     probe the primary answered.

3. **Every fault of a backend** (issue 43; ``--no-faults`` skips it, ``--faults-only`` runs
   it alone): bench/peers_faults.py, on a pair of its own (``FaultyBackend`` threads, whose
   faults include a refused connection; the processes above stay, so the SIGKILL figures
   keep their meaning) and a ladder configured as the fault suite's. Per fault and system:
   the outcome, the slowest client's time, and the ladder's goal met or not (``faults``,
   ``faults_summary``, ``faults_setup``).

Prints one JSON object on stdout (``machine``: bench/_machine.py; ``sections``: which of the
three ran). Sections 1 and 2 take about 2 minutes on the 2-core development machine, the
fault section several more (``faults_setup.wall_s``): it waits out the faults that hold a
client until its 60 s limit. ``python bench/peers_llm.py --backend ...`` is the backend
server the bench starts (not for use by hand).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from _json_out import json_stdout
from peers_faults import add_arguments as add_fault_arguments
from peers_faults import run_faults

PROBE_EVERY_S = 0.2
PRIMARY_MODEL = "counter-primary"
FALLBACK_MODEL = "counter-fallback"
LADDER_NAME = "peers"
API_KEY = "unused-by-the-backends"


def say(what: str) -> None:
    """Progress on stderr (stdout carries the JSON alone)."""
    print(f"[peers_llm {time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


# --- the backend servers ----------------------------------------------------------------


def _tolerant(app: Any) -> Any:
    """ASGI wrapper: drop ``prefix`` from chat messages (LiteLLM's mid-stream fallback sends
    it; vLLM accepts it, the standalone server's strict schema would answer 400)."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        try:
            data = json.loads(body)
            for m in data.get("messages") or []:
                if isinstance(m, dict):
                    m.pop("prefix", None)
            body = json.dumps(data).encode()
        except (ValueError, AttributeError):
            pass  # the server answers it with its own 400
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return wrapped


def serve_backend(port: int, model: str, tokens_per_s: float, ready_file: str) -> None:
    """One backend: CounterRung behind the project's standalone OpenAI server. Writes
    ``time.monotonic()`` to ``ready_file`` once it listens (the clock is the machine's, so
    the bench reads when the server came up without polling it from its own busy loop)."""
    import uvicorn

    from ray_ladder.serve.llm.models import CounterRung
    from ray_ladder.serve.llm.standalone import openai_app

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            with open(ready_file + ".tmp", "w") as f:
                f.write(repr(time.monotonic()))
            os.replace(ready_file + ".tmp", ready_file)

    app = openai_app(CounterRung, model, init_kwargs={"tokens_per_s": tokens_per_s})
    Server(uvicorn.Config(_tolerant(app), host="127.0.0.1", port=port,
                          log_level="warning")).run()


class Backend:
    """A backend server process on a fixed port: start, SIGKILL, start again."""

    def __init__(self, port: int, model: str, tokens_per_s: float, workdir: str) -> None:
        self.port, self.model, self.tokens_per_s = port, model, tokens_per_s
        self.url = f"http://127.0.0.1:{port}/v1"
        self.ready_file = os.path.join(workdir, f"{model}.ready")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if os.path.exists(self.ready_file):
            os.remove(self.ready_file)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--backend", str(self.port),
             self.model, str(self.tokens_per_s), self.ready_file], stdout=sys.stderr)

    def up(self) -> bool:
        import httpx

        try:
            return httpx.get(self.url + "/models", timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    async def wait_up(self, timeout_s: float = 30.0) -> float:
        """Wait until it answers ``GET /v1/models``; return when it started listening
        (monotonic, as the server wrote it)."""
        deadline = time.monotonic() + timeout_s
        while not await asyncio.to_thread(self.up):
            if time.monotonic() > deadline:
                raise TimeoutError(f"backend {self.model} on {self.port} did not come up")
            await asyncio.sleep(0.02)
        with open(self.ready_file) as f:
            return float(f.read())

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()  # SIGKILL
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


# --- one streamed request, timed the same way for every system --------------------------


@dataclass
class Stream:
    """What the client saw of one streamed answer."""

    started: float = 0.0
    pieces: list[tuple[float, str, str]] = field(default_factory=list)  # (t, model, text)
    error: str | None = None
    ended: float = 0.0

    @property
    def text(self) -> str:
        return "".join(p[2] for p in self.pieces)


def expected(tokens: int) -> str:
    return "".join(f" {i}" for i in range(1, tokens + 1))


class System:
    """A way to send one streamed chat request and iterate its chunks."""

    name = ""

    async def open(self, max_tokens: int) -> Any:
        raise NotImplementedError

    async def stream(self, max_tokens: int) -> Stream:
        out = Stream(started=time.monotonic())
        try:
            chunks = await self.open(max_tokens)
            async for chunk in chunks:
                if chunk.choices and chunk.choices[0].delta.content:
                    out.pieces.append((time.monotonic(), str(chunk.model),
                                       chunk.choices[0].delta.content))
        except Exception as err:  # what the client gets: counted, never raised
            out.error = f"{type(err).__name__}: {str(err)[:200]}"
        out.ended = time.monotonic()
        return out


class OpenAISystem(System):
    """The ``openai`` client against a ``/v1`` URL (the ladder, or a backend directly)."""

    def __init__(self, name: str, base_url: str, model: str) -> None:
        import openai

        self.name, self.model = name, model
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0,
                                         timeout=60.0)

    async def open(self, max_tokens: int) -> Any:
        return await self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": "count"}],
            max_tokens=max_tokens, stream=True)


class LiteLLMSystem(System):
    """LiteLLM's Router: primary with a fallback, defaults otherwise."""

    def __init__(self, name: str, primary: Backend, fallback: Backend, key: str) -> None:
        import litellm

        self.name = name
        # ``key`` differs per system only so each gets its own cached OpenAI client (LiteLLM
        # keys its client cache on the API key): the backends do not check it.
        self.router = litellm.Router(
            model_list=[
                {"model_name": "primary", "litellm_params": {
                    "model": f"openai/{primary.model}", "api_base": primary.url,
                    "api_key": key}},
                {"model_name": "fallback", "litellm_params": {
                    "model": f"openai/{fallback.model}", "api_base": fallback.url,
                    "api_key": key}}],
            fallbacks=[{"primary": ["fallback"]}])

    def settings(self) -> dict[str, Any]:
        r = self.router
        return {"num_retries": r.num_retries, "allowed_fails": r.allowed_fails,
                "cooldown_time_s": r.cooldown_time, "max_fallbacks": r.max_fallbacks,
                "disable_cooldowns": r.disable_cooldowns, "retry_after_s": r.retry_after}

    async def open(self, max_tokens: int) -> Any:
        return await self.router.acompletion(
            model="primary", messages=[{"role": "user", "content": "count"}],
            max_tokens=max_tokens, stream=True)


# --- 1. overhead with everything healthy ------------------------------------------------


async def overhead(systems: list[System], direct: System, rounds: int, requests: int,
                   tokens: int) -> dict[str, Any]:
    """``rounds`` x ``requests`` turns; in each turn one request per system, one after the
    other, in an order that rotates every turn. A request's overhead = its latency less
    direct's in the same turn: the pair is a fraction of a second apart, so the machine's
    drift (other work, CPU frequency) hits both alike. Reported: the median over every
    turn, and the median of each round's turns (its spread)."""
    order = [direct, *systems]
    total: dict[str, list[float]] = {s.name: [] for s in order}
    first: dict[str, list[float]] = {s.name: [] for s in order}
    paired: dict[str, list[tuple[float, float]]] = {s.name: [] for s in systems}
    want = expected(tokens)
    for turn_no in range(rounds * requests):
        k = turn_no % len(order)
        turn: dict[str, tuple[float, float]] = {}
        for system in order[k:] + order[:k]:
            s = await system.stream(tokens)
            if s.error or s.text != want:
                raise SystemExit(f"{system.name} failed while healthy: {s.error} {s.text!r}")
            turn[system.name] = (s.pieces[-1][0] - s.started, s.pieces[0][0] - s.started)
            total[system.name].append(turn[system.name][0])
            first[system.name].append(turn[system.name][1])
        for system in systems:
            paired[system.name].append((turn[system.name][0] - turn[direct.name][0],
                                        turn[system.name][1] - turn[direct.name][1]))
    out: dict[str, Any] = {direct.name: {
        "latency_p50_s": round(statistics.median(total[direct.name]), 4),
        "ttft_p50_s": round(statistics.median(first[direct.name]), 4)}}
    for system in systems:
        lat_o = [p[0] for p in paired[system.name]]
        ttft_o = [p[1] for p in paired[system.name]]
        per_round = [statistics.median(lat_o[i:i + requests])
                     for i in range(0, len(lat_o), requests)]
        ttft_round = [statistics.median(ttft_o[i:i + requests])
                      for i in range(0, len(ttft_o), requests)]
        out[system.name] = {
            "overhead_p50_s": round(statistics.median(lat_o), 4),
            "overhead_spread_s": [round(min(per_round), 4), round(max(per_round), 4)],
            "overhead_per_round_s": [round(x, 4) for x in per_round],
            "ttft_overhead_p50_s": round(statistics.median(ttft_o), 4),
            "ttft_overhead_spread_s": [round(min(ttft_round), 4), round(max(ttft_round), 4)],
            "latency_p50_s": round(statistics.median(total[system.name]), 4),
            "ttft_p50_s": round(statistics.median(first[system.name]), 4),
            "overhead_requests": len(total[system.name])}
    return out


# --- 2. kill the primary mid-generation, restart it -------------------------------------


async def fall(system: System, primary: Backend, args: argparse.Namespace) -> dict[str, Any]:
    """Streams under way, the primary SIGKILLed, restarted; probes until back on it."""
    want = expected(args.tokens)
    probe_want = expected(args.overhead_tokens)
    t0 = time.monotonic()
    streams = [asyncio.create_task(system.stream(args.tokens)) for _ in range(args.streams)]
    await asyncio.sleep(max(0.0, t0 + args.kill_after_s - time.monotonic()))
    primary.kill()
    killed = time.monotonic()
    probes: list[asyncio.Task[Stream]] = []
    restarted_up: float | None = None
    back: float | None = None
    restart_at = killed + args.down_s
    restart: asyncio.Task[float] | None = None
    deadline = restart_at + args.back_timeout_s
    while time.monotonic() < deadline:
        probes.append(asyncio.create_task(system.stream(args.overhead_tokens)))
        if restart is None and time.monotonic() >= restart_at:
            primary.start()
            restart = asyncio.create_task(primary.wait_up())
        if restart is not None and restart.done():
            restarted_up = restart.result()
            answered = [p.result() for p in probes if p.done()]
            firsts = [s.pieces[0][0] for s in answered  # every probe started after the kill
                      if s.pieces and s.pieces[0][1] == PRIMARY_MODEL]
            if firsts:
                back = min(firsts)
                break
        await asyncio.sleep(PROBE_EVERY_S)
    if restart is not None:
        restarted_up = await restart
    results = await asyncio.gather(*streams)
    answered = await asyncio.gather(*probes)
    under_way = sum(any(p[0] <= killed for p in s.pieces) for s in results)
    broken = [s for s in results if s.error or not s.text.startswith(want)]
    moved = [s for s in results if any(p[0] > killed and p[1] != PRIMARY_MODEL
                                       for p in s.pieces)]
    to_fallback = sorted(next(p[0] for p in s.pieces if p[0] > killed and p[1] != PRIMARY_MODEL)
                         - killed for s in moved)
    gaps = [(b[0] - a[0], a[0] - killed) for s in results if s not in broken
            for a, b in zip(s.pieces, s.pieces[1:], strict=False)]
    widest = max(gaps) if gaps else None
    wrong_chars = sum(sum(a != b for a, b in zip(s.text, want, strict=False))
                      + abs(len(s.text) - len(want)) for s in results)
    up = restarted_up if restarted_up is not None else float("inf")
    down = [p for p in answered if killed <= p.started < up]
    down_failed = [p for p in down if p.error or p.text != probe_want]
    after = [p for p in answered if p.started >= up]
    errors = sorted({s.error.split(":")[0] for s in results + answered if s.error})
    return {
        "streams": len(results),
        "streams_under_way_at_kill": under_way,
        "streams_moved": len(moved),
        "broken_streams": len(broken),
        "broken_streams_with_error": sum(bool(s.error) for s in broken),
        "broken_streams_ended_quietly_short": sum(
            not s.error and want.startswith(s.text) for s in broken),
        "wrong_text_streams": sum(bool(s.error) or s.text != want for s in results),
        "longest_text_tokens": max(len(s.pieces) for s in results),
        "repeated_or_lost_chars": wrong_chars,
        "failover_first_token_s": (round(statistics.median(to_fallback), 3)
                                   if to_fallback else None),
        "failover_first_token_max_s": round(max(to_fallback), 3) if to_fallback else None,
        "max_gap_s": round(widest[0], 3) if widest else None,
        "max_gap_starts_after_kill_s": round(widest[1], 3) if widest else None,
        "primary_down_s": round(up - killed, 3),
        "requests_while_down": len(down),
        "requests_failed_while_down": len(down_failed),
        "request_latency_while_down_p50_s": (round(statistics.median(
            p.ended - p.started for p in down if not p.error), 3)
            if any(not p.error for p in down) else None),
        "requests_after_restart": len(after),
        "requests_failed_after_restart": sum(bool(p.error) or p.text != probe_want
                                             for p in after),
        # clamped at 0: a request may reach the socket just before uvicorn reports started
        "back_on_primary_s": round(max(0.0, back - up), 3) if back is not None else None,
        "errors_seen": errors,
    }


# --- the run ----------------------------------------------------------------------------


async def run(args: argparse.Namespace, primary: Backend, fallback: Backend,
              ladder_url: str | None) -> dict[str, Any]:
    import litellm

    direct = OpenAISystem("direct", primary.url, PRIMARY_MODEL)
    systems: list[System] = []
    if ladder_url is not None:
        systems.append(OpenAISystem("ladder", ladder_url + "/v1", LADDER_NAME))
    lite = LiteLLMSystem("litellm", primary, fallback, API_KEY)
    systems.append(lite)
    for system in [direct, *systems]:  # warm: connections, clients, the first request
        for _ in range(3):
            s = await system.stream(args.overhead_tokens)
            if s.error:
                raise SystemExit(f"{system.name} does not answer: {s.error}")
    say("overhead rounds")
    result = await overhead(systems, direct, args.rounds, args.requests,
                            args.overhead_tokens)
    result["litellm_settings"] = lite.settings()
    for system in systems:
        say(f"kill and restart: {system.name}")
        result[system.name].update(await fall(system, primary, args))
        say(f"{system.name}: {result[system.name]}")
    if not args.no_variant:
        litellm.disable_aiohttp_transport = True  # the next clients LiteLLM builds use httpx
        variant = LiteLLMSystem("litellm_httpx_transport", primary, fallback, "httpx-variant")
        for _ in range(3):
            await variant.stream(args.overhead_tokens)
        say("kill and restart: litellm_httpx_transport")
        result[variant.name] = await fall(variant, primary, args)
        say(f"{variant.name}: {result[variant.name]}")
    return result


def start_serve() -> tuple[Any, int]:
    """A LocalCluster (the head alone) and Serve's proxy; returns (cluster, port)."""
    from ray import serve

    from ray_ladder.testing import LocalCluster, free_port

    cluster = LocalCluster({}, log_to_driver=False).start()
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    return cluster, port


def start_ladder(port: int, primary: Backend, fallback: Backend) -> str:
    """The ladder's Serve app on the running Serve instance; returns its URL."""
    import httpx
    from ray import serve

    from ray_ladder import Ladder
    from ray_ladder.serve import build_app
    from ray_ladder.serve.llm.backend import OpenAIBackendRung
    from ray_ladder.testing import wait_until

    ladder = Ladder.from_dict({"name": LADDER_NAME, "rungs": [
        {"name": "primary", "num_cpus": 0.1,
         "params": {"base_url": primary.url, "model": primary.model}},
        {"name": "fallback", "num_cpus": 0.1, "standby_replicas": 1,
         "params": {"base_url": fallback.url, "model": fallback.model}},
        {"name": "shed", "kind": "shed"}]})
    options = {"max_ongoing_requests": 64, "health_check_period_s": 1.0,
               "health_check_timeout_s": 2.0, "graceful_shutdown_timeout_s": 1.0}
    serve.run(build_app(ladder, dict.fromkeys(["primary", "fallback"], OpenAIBackendRung),
                        deployment_options=dict.fromkeys(["primary", "fallback"], options)),
              name=LADDER_NAME, route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: httpx.get(url + "/-/ladder").json()["current"] == "primary", 60, 0.1,
               "the ladder on the primary")
    return url


def head_to_head(args: argparse.Namespace, port: int | None) -> dict[str, Any]:
    """Sections 1 and 2 on their own two backend processes (and the ladder's app, when
    ``port`` is Serve's), all stopped before it returns."""
    from ray_ladder.testing import free_port

    workdir = tempfile.mkdtemp(prefix="peers_llm_")
    primary = Backend(free_port(), PRIMARY_MODEL, args.tokens_per_s, workdir)
    fallback = Backend(free_port(), FALLBACK_MODEL, args.tokens_per_s, workdir)
    url = None
    try:
        primary.start()
        fallback.start()
        asyncio.run(primary.wait_up())
        asyncio.run(fallback.wait_up())
        if port is not None:
            say("starting the ladder")
            url = start_ladder(port, primary, fallback)
        say("backends and systems up")
        return asyncio.run(run(args, primary, fallback, url))
    finally:
        if url is not None:
            from ray import serve

            serve.delete(LADDER_NAME)
        primary.stop()
        fallback.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def fault_router(name: str, primary: Any, fallback: Any, key: str) -> Any:
    """The Router of section 2, for the fault section's backends."""
    return LiteLLMSystem(name, primary, fallback, key).router  # type: ignore[arg-type]


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--backend":
        serve_backend(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=60, help="tokens per stream")
    parser.add_argument("--tokens-per-s", type=float, default=20.0, help="each backend's pace")
    parser.add_argument("--kill-after-s", type=float, default=1.0)
    parser.add_argument("--down-s", type=float, default=3.0)
    parser.add_argument("--back-timeout-s", type=float, default=40.0)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=20, help="per system per round")
    parser.add_argument("--overhead-tokens", type=int, default=1)
    parser.add_argument("--no-ladder", action="store_true", help="LiteLLM alone (no Ray)")
    parser.add_argument("--no-variant", action="store_true",
                        help="skip litellm_httpx_transport")
    add_fault_arguments(parser)
    args = parser.parse_args()
    args.faults = args.faults or args.faults_only

    out = json_stdout()
    from _machine import MachineProbe

    probe = MachineProbe()
    started = time.monotonic()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch
    import logging

    try:
        import litellm
    except ImportError:
        raise SystemExit("bench/peers_llm.py needs LiteLLM: pip install -e '.[peers]'") from None

    litellm.suppress_debug_info = True
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # its errors are counted here
    cluster: Any = None
    port: int | None = None
    result: dict[str, Any] = {}
    try:
        if not args.no_ladder:
            say("starting the cluster")
            cluster, port = start_serve()
        if not args.faults_only:
            result = head_to_head(args, port)
        if args.faults:
            say("the fault section")
            result.update(asyncio.run(run_faults(args, port, fault_router)))
    finally:
        if cluster is not None:
            from ray import serve

            serve.shutdown()
            cluster.shutdown()

    def per_system(key: str) -> dict[str, Any]:
        return {name: result[name].get(key) for name in ("ladder", "litellm",
                                                         "litellm_httpx_transport")
                if name in result}

    report: dict[str, Any] = {"bench": "peers_llm", "litellm_version": _version("litellm")}
    if "ladder" in result:
        lad, lite = result["ladder"]["overhead_p50_s"], result["litellm"]["overhead_p50_s"]
        report["ladder_over_litellm_overhead_p50"] = (round(lad / lite, 3) if lite > 0
                                                      else None)
        # LiteLLM's overhead is a few ms, as much as its spread from round to round: the
        # ratio of two such figures moves by half from run to run; the difference, within
        # each round, is the figure that holds.
        extra = [a - b for a, b in zip(result["ladder"]["overhead_per_round_s"],
                                       result["litellm"]["overhead_per_round_s"], strict=True)]
        report["ladder_minus_litellm_overhead_p50_s"] = round(statistics.median(extra), 4)
        report["ladder_minus_litellm_overhead_spread_s"] = [round(min(extra), 4),
                                                            round(max(extra), 4)]
    report["sections"] = ([] if args.faults_only else ["overhead", "kill_restart"]) + (
        ["faults"] if args.faults else [])
    if not args.faults_only:
        report.update({key: per_system(key) for key in (
            "broken_streams", "failover_first_token_s", "back_on_primary_s",
            "requests_failed_while_down", "max_gap_s")})
    if "faults_summary" in result:
        report["faults_summary"] = result.pop("faults_summary")
    report.update({
        **result,
        "config": {k: v for k, v in vars(args).items() if k not in ("no_ladder",)},
        "wall_s": round(time.monotonic() - started, 1),
        "machine": probe.report(),
    })
    report["config"]["probe_every_s"] = PROBE_EVERY_S
    print(json.dumps(report), file=out, flush=True)


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
