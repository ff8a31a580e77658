"""The fault section of bench/peers_llm.py (issue 43): every fault of a backend, met by the
ladder and by LiteLLM's Router on the same two :class:`~ray_ladder.testing.faults.FaultyBackend`
servers (threads of the bench's process, ``counter-primary`` and ``counter-fallback``,
``--fault-tokens-per-s`` each, 50 by default):

* ``ladder``: a second ladder app on the bench's cluster (the first one is deleted before),
  ``primary -> fallback -> shed`` of ``OpenAIBackendRung``s configured as the fault suite
  does (tests/serve/test_backend_faults_ray.py, as docs/llm.md and docs/serve.md
  recommend): ``policy.targets`` ``ttft_s: 2``, ``inter_token_s: 1``; rung params
  ``timeout_s: 60``, ``connect_timeout_s: 2``; ``health_check_period_s: 1``, a standby on
  the fallback, ``max_ongoing_requests: 64``. Read through its ``/v1`` with the official
  ``openai`` client (``AsyncOpenAI``, ``max_retries=0``), the requests of
  :func:`ray_ladder.testing.fault_rounds.ask`.
* ``litellm`` and ``litellm_httpx_transport``: the Router of bench/peers_llm.py, built by
  its ``LiteLLMSystem`` (the same settings; the second with
  ``litellm.disable_aiohttp_transport = True``, set before each of its rounds and unset
  before each of the first's, so each Router's clients are built on its own transport).
  The same requests through ``router.acompletion``.

For each fault of the primary in ``FAULTS`` but ``healthy`` (``--fault-list`` picks some),
for each system in turn: the fault switched on (options as the fault suite's:
``late_s`` 8, ``trickle_s`` 3, ``Retry-After`` 2 s on 429 and 503), then one round of
``--fault-streams`` streamed and ``--fault-wholes`` whole requests at once, each counting
from its own number, ``--fault-tokens`` tokens. Every request has the same client-side
limit, ``--fault-timeout-s`` (60 s: a client with a 60 s timeout; LiteLLM's own default is
6000 s), after which it counts as ``error:client_timeout``. After the last system's round,
the primary is switched healthy and the bench waits (untimed) until the ladder's
``GET /-/ladder`` says ``current: primary`` and no LiteLLM deployment is in cooldown
(``router.cooldown_cache``).

Per system per fault: ``outcome`` (``exact``: every client got the exact count; else the
distinct failures, ``+``-joined: ``error:<exception class>``, ``truncated`` (fewer tokens,
no error), ``wrong`` (a gap, a repeat or extra text)), the same per kind (``stream``,
``whole``), ``exact`` of ``n``, ``client_s_max`` (the slowest client's time to its whole
answer or its error), ``answered_by`` (which backend produced each answer's last piece).
For ``status_400`` (the request's own fault) the expected outcome is every client's
``error:BadRequestError``. The ladder's goal (issue 43, item 5): its healthy round's
``client_s_max`` + the deadline that fires (2 s ``silent``, ``late_first_token``; 1 s
``hang_mid``, ``trickle``; 0 otherwise) + the fallback's first-token time (the slowest of
``n`` concurrent streams straight to it) + 0.5 s; ``met`` when the outcome is the expected
one and ``client_s_max`` is within it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from ray_ladder.testing.fault_rounds import Outcome, ask, expected_text
from ray_ladder.testing.faults import FAULTS, Fault, FaultyBackend

FAULT_LADDER = "peers-faults"  # health_check_period_s 1, a standby on the fallback
#: The fault suite's options (tests/serve/test_backend_faults_ray.py).
FAULT_OPTIONS: dict[str, dict[str, Any]] = {
    "late_first_token": {"late_s": 8.0}, "trickle": {"trickle_s": 3.0},
    "status_429": {"retry_after_s": 2}, "status_503": {"retry_after_s": 2}}
#: The ladder's deadline that fires on each fault (``policy.targets``); 0: a fault seen at once.
DEADLINE_S = {"silent": 2.0, "late_first_token": 2.0, "hang_mid": 1.0, "trickle": 1.0}
TARGETS = {"ttft_s": 2, "inter_token_s": 1}
RUNG_PARAMS = {"timeout_s": 60, "connect_timeout_s": 2}
SETTLE_TIMEOUT_S = 120.0
Ask = Callable[[int, int, bool], Awaitable[Outcome]]


def say(what: str) -> None:
    print(f"[peers_faults {time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The fault section's options, on bench/peers_llm.py's parser."""
    parser.add_argument("--faults", action=argparse.BooleanOptionalAction, default=True,
                        help="the per-fault table (--no-faults skips it)")
    parser.add_argument("--faults-only", action="store_true",
                        help="the fault section alone (no overhead, no kill and restart)")
    parser.add_argument("--fault-list", default=None,
                        help="comma-separated faults (default: every fault but healthy)")
    parser.add_argument("--fault-streams", type=int, default=3)
    parser.add_argument("--fault-wholes", type=int, default=3)
    parser.add_argument("--fault-tokens", type=int, default=20)
    parser.add_argument("--fault-tokens-per-s", type=float, default=50.0)
    parser.add_argument("--fault-timeout-s", type=float, default=60.0,
                        help="every request's client-side limit")


# --- one round of requests ------------------------------------------------------------


async def round_of(ask_one: Ask, args: argparse.Namespace, first: int) -> list[Outcome]:
    """``--fault-streams`` streamed and ``--fault-wholes`` whole requests at once, each
    counting from its own number and cut at ``--fault-timeout-s``."""

    async def one(i: int) -> Outcome:
        stream, start = i < args.fault_streams, first + 1000 * i
        began = time.monotonic()
        try:
            return await asyncio.wait_for(ask_one(start, args.fault_tokens, stream),
                                          args.fault_timeout_s)
        except asyncio.TimeoutError:
            return Outcome("stream" if stream else "whole", start, args.fault_tokens,
                           error="client_timeout", seconds=time.monotonic() - began)

    return list(await asyncio.gather(*(one(i) for i in range(args.fault_streams
                                                              + args.fault_wholes))))


def _seen(out: Outcome, backend: str) -> None:
    if backend not in out.rungs:
        out.rungs.append(backend)


async def litellm_ask(router: Any, names: dict[str, str], start: int, tokens: int,
                      stream: bool) -> Outcome:
    """:func:`ray_ladder.testing.fault_rounds.ask` through ``router.acompletion``;
    ``names`` maps a chunk's ``model`` to the backend that produced it."""
    out = Outcome("stream" if stream else "whole", start, tokens)
    began = time.monotonic()
    messages = [{"role": "user", "content": str(start)}]
    try:
        if stream:
            chunks = await router.acompletion(model="primary", messages=messages,
                                              max_tokens=tokens, stream=True)
            async for chunk in chunks:
                choice = chunk.choices[0] if chunk.choices else None
                if choice is not None and choice.delta and choice.delta.content:
                    out.text += choice.delta.content
                    _seen(out, names.get(str(chunk.model), str(chunk.model)))
                if choice is not None and choice.finish_reason:
                    out.finish_reason = choice.finish_reason
        else:
            answer = await router.acompletion(model="primary", messages=messages,
                                              max_tokens=tokens)
            out.text = answer.choices[0].message.content or ""
            out.finish_reason = answer.choices[0].finish_reason
            _seen(out, names.get(str(answer.model), str(answer.model)))
    except Exception as err:  # the client's outcome is the measure: keep it as data
        out.error = type(err).__name__
        out.status = getattr(err, "status_code", None)
    out.seconds = time.monotonic() - began
    return out


# --- what a round came to -------------------------------------------------------------


def classify(o: Outcome) -> str:
    """``exact``, ``error:<class>``, ``truncated`` (a short count, no error) or ``wrong``."""
    if o.error:
        return f"error:{o.error}"
    want = expected_text(o.start, o.tokens)
    if o.text == want:
        return "exact"
    return "truncated" if want.startswith(o.text) else "wrong"


def _outcome(kinds: list[str]) -> str:
    bad = sorted(set(kinds) - {"exact"})
    return "+".join(bad) if bad else "exact" if kinds else "none"


def summarize(outcomes: list[Outcome]) -> dict[str, Any]:
    kinds = [classify(o) for o in outcomes]
    return {
        "outcome": _outcome(kinds),
        "stream": _outcome([k for k, o in zip(kinds, outcomes, strict=True)
                            if o.kind == "stream"]),
        "whole": _outcome([k for k, o in zip(kinds, outcomes, strict=True)
                           if o.kind == "whole"]),
        "exact": kinds.count("exact"), "n": len(outcomes),
        "client_s_max": round(max(o.seconds for o in outcomes), 3),
        "answered_by": dict(Counter(o.rungs[-1] if o.rungs and not o.error else "none"
                                    for o in outcomes)),
        "statuses": sorted({o.status for o in outcomes if o.status is not None})}


def as_expected(fault: str, row: dict[str, Any]) -> bool:
    """The request's own 400 is everyone's 400; every other fault, the exact count."""
    if fault == "status_400":
        return bool(row["outcome"] == "error:BadRequestError")
    return bool(row["exact"] == row["n"])


# --- the systems ------------------------------------------------------------------------


class LadderSide:
    """The fault ladder's ``/v1``, through the ``openai`` client."""

    name = "ladder"

    def __init__(self, url: str) -> None:
        self.url = url

    async def round(self, args: argparse.Namespace, first: int) -> list[Outcome]:
        import openai

        client = openai.AsyncOpenAI(base_url=self.url + "/v1", api_key="unused",
                                    max_retries=0, timeout=args.fault_timeout_s)
        try:
            return await round_of(lambda s, t, st: ask(client, FAULT_LADDER, s, t, st),
                                  args, first)
        finally:
            await client.close()

    async def current(self) -> str | None:
        import httpx

        async with httpx.AsyncClient(timeout=10) as client:
            return (await client.get(self.url + "/-/ladder")).json().get("current")

    async def settle(self) -> bool:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while time.monotonic() < deadline:
            if await self.current() == "primary":
                return True
            await asyncio.sleep(0.2)
        return False


class LiteLLMSide:
    """One of bench/peers_llm.py's Routers on the fault backends."""

    def __init__(self, name: str, router: Any, httpx_transport: bool,
                 names: dict[str, str]) -> None:
        self.name, self.router, self.httpx, self.names = name, router, httpx_transport, names

    async def round(self, args: argparse.Namespace, first: int) -> list[Outcome]:
        import litellm

        litellm.disable_aiohttp_transport = self.httpx  # for any client built now
        return await round_of(lambda s, t, st: litellm_ask(self.router, self.names, s, t, st),
                              args, first)

    async def settle(self) -> bool:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self.router.cooldown_cache.get_active_cooldowns(
                    self.router.get_model_ids(), None):
                return True
            await asyncio.sleep(0.2)
        return False


def deploy_ladder(port: int, primary: FaultyBackend, fallback: FaultyBackend) -> str:
    """The fault suite's ladder on the running Serve instance; its URL once on the primary."""
    import httpx
    from ray import serve

    from ray_ladder import Ladder
    from ray_ladder.serve import build_app
    from ray_ladder.serve.llm.backend import OpenAIBackendRung
    from ray_ladder.testing import wait_until

    ladder = Ladder.from_dict({
        "name": FAULT_LADDER, "policy": {"targets": TARGETS},
        "rungs": [
            {"name": "primary", "num_cpus": 0.1,
             "params": {"base_url": primary.url, "model": primary.model, **RUNG_PARAMS}},
            {"name": "fallback", "num_cpus": 0.1, "standby_replicas": 1,
             "params": {"base_url": fallback.url, "model": fallback.model, **RUNG_PARAMS}},
            {"name": "shed", "kind": "shed"}]})
    options = {"max_ongoing_requests": 64, "health_check_period_s": 1.0}
    serve.run(build_app(ladder, dict.fromkeys(["primary", "fallback"], OpenAIBackendRung),
                        deployment_options=dict.fromkeys(["primary", "fallback"], options)),
              name=FAULT_LADDER, route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: httpx.get(url + "/-/ladder").json()["current"] == "primary", 60, 0.1,
               "the fault ladder on the primary")
    return url


# --- the section ------------------------------------------------------------------------


async def first_token_s(backend: FaultyBackend, n: int, tokens: int) -> float:
    """The slowest first token of ``n`` streams at once straight to ``backend``."""
    import openai

    client = openai.AsyncOpenAI(base_url=backend.url, api_key="unused", max_retries=0,
                                timeout=30)

    async def one(i: int) -> float:
        began = time.monotonic()
        chunks = await client.chat.completions.create(
            model=backend.model, messages=[{"role": "user", "content": str(1000 * i)}],
            max_tokens=tokens, stream=True)
        first = None
        async for chunk in chunks:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.monotonic() - began
        assert first is not None, "the fallback answered nothing"
        return first

    try:
        await asyncio.gather(*(one(i) for i in range(n)))  # warm
        return max(await asyncio.gather(*(one(i) for i in range(n))))
    finally:
        await client.close()


async def _table(sides: list[Any], primary: FaultyBackend, faults: list[Fault],
                 args: argparse.Namespace, goal_base: float) -> tuple[dict[str, Any], list]:
    table: dict[str, Any] = {}
    unsettled: list[str] = []
    for f_no, fault in enumerate(faults):
        table[fault] = {}
        for s_no, side in enumerate(sides):
            await asyncio.to_thread(primary.set_fault, fault, **FAULT_OPTIONS.get(fault, {}))
            row = summarize(await side.round(args, 100_000 * (f_no + 2) + 10_000 * s_no))
            if isinstance(side, LadderSide):
                row["current_after"] = await side.current()
                row["goal_s"] = round(goal_base + DEADLINE_S.get(fault, 0.0), 3)
                row["met"] = as_expected(fault, row) and row["client_s_max"] <= row["goal_s"]
            table[fault][side.name] = row
            say(f"{fault} {side.name}: {row}")
        await asyncio.to_thread(primary.set_fault, "healthy")
        for side in sides:
            if not await side.settle():
                unsettled.append(f"{fault}:{side.name}")
    return table, unsettled


def summary(table: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    systems = sorted({s for row in table.values() for s in row})
    for system in systems:
        rows = {f: r[system] for f, r in table.items() if system in r}
        missed = [f for f, r in rows.items() if not as_expected(f, r)]
        out[system] = {
            "as_expected": len(rows) - len(missed), "of": len(rows),
            "not_as_expected": {f: rows[f]["outcome"] for f in missed},
            "quiet_wrong_faults": [f for f, r in rows.items()
                                   if {"truncated", "wrong"} & set(r["outcome"].split("+"))],
            "client_s_max": max(r["client_s_max"] for r in rows.values())}
    ladder = {f: r["ladder"] for f, r in table.items() if "ladder" in r}
    if ladder:
        out["ladder_goals_met"] = sum(r["met"] for r in ladder.values())
        out["ladder_goals_of"] = len(ladder)
        out["ladder_goals_missed"] = {f: [r["outcome"], r["client_s_max"], r["goal_s"]]
                                      for f, r in ladder.items() if not r["met"]}
    return out


async def run_faults(args: argparse.Namespace, port: int | None,
                     make_router: Callable[[str, Any, Any, str], Any]) -> dict[str, Any]:
    """The section: the two fault backends, the systems on them, every fault in turn.
    ``port``: the running Serve proxy's (``None``: no ladder); ``make_router(name,
    primary, fallback, key)``: bench/peers_llm.py's LiteLLM Router."""
    import litellm

    faults: list[Fault] = (args.fault_list.split(",") if args.fault_list
                           else [f for f in FAULTS if f != "healthy"])
    started = time.monotonic()
    with FaultyBackend("counter-primary", args.fault_tokens_per_s) as primary, \
            FaultyBackend("counter-fallback", args.fault_tokens_per_s) as fallback:
        names = {primary.model: "primary", fallback.model: "fallback"}
        sides: list[Any] = []
        if port is not None:
            say("deploying the fault ladder")
            sides.append(LadderSide(await asyncio.to_thread(deploy_ladder, port, primary,
                                                            fallback)))
        for name, httpx_transport in (("litellm", False), ("litellm_httpx_transport", True)):
            if httpx_transport and args.no_variant:
                continue
            litellm.disable_aiohttp_transport = httpx_transport
            sides.append(LiteLLMSide(name, make_router(name, primary, fallback,
                                                       f"faults-{name}"),
                                     httpx_transport, names))
        try:
            healthy = {}
            for side in sides:  # warm (clients, connections), then the healthy figure
                await side.round(args, 10_000)
                healthy[side.name] = summarize(await side.round(args, 50_000))
                if healthy[side.name]["outcome"] != "exact":
                    raise SystemExit(f"{side.name} failed while healthy: {healthy[side.name]}")
            ttft = await first_token_s(fallback, args.fault_streams + args.fault_wholes,
                                       args.fault_tokens)
            base = (healthy["ladder"]["client_s_max"] + ttft + 0.5 if port is not None
                    else 0.0)
            say(f"healthy {healthy}; fallback first token {ttft:.3f} s")
            table, unsettled = await _table(sides, primary, faults, args, base)
        finally:
            litellm.disable_aiohttp_transport = False
            if port is not None:
                from ray import serve

                await asyncio.to_thread(serve.delete, FAULT_LADDER)
    return {"faults": table, "faults_summary": summary(table), "faults_setup": {
        "healthy": healthy, "fallback_first_token_s": round(ttft, 3),
        "ladder_goal_base_s": round(base, 3) if port is not None else None,
        "deadline_s": DEADLINE_S, "options": FAULT_OPTIONS,
        "ladder": {"targets": TARGETS, "rung_params": RUNG_PARAMS},
        "not_back_on_primary_within_s": {"limit_s": SETTLE_TIMEOUT_S, "after": unsettled},
        "wall_s": round(time.monotonic() - started, 1)}}
