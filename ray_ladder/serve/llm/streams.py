"""One client stream across rungs: when the rung producing it is lost mid-generation, the
stream continues on the best obtainable eligible rung from the text already sent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from ray_ladder.cluster.event_log import log_event
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.events import TransitionEvent
from ray_ladder.core.exceptions import Attempt, LadderExhaustedError
from ray_ladder.core.selector import Selector
from ray_ladder.core.spec import Ladder
from ray_ladder.serve.errors import RungFailed
from ray_ladder.serve.llm.protocol import GenerationRequest, first_stop
from ray_ladder.serve.llm.responses import StreamRecord
from ray_ladder.serve.retry import next_rung


@dataclass(frozen=True, slots=True)
class Piece:
    """Text sent to the client, and the rung that produced it.

    ``switched_from`` is set on the first piece after the stream moved to this rung.
    """

    rung: str
    text: str
    switched_from: str | None = None
    reason: str | None = None


class StreamFailed(Exception):
    """A stream that already sent text cannot go on (every eligible rung is gone)."""


class Router(Protocol):
    """What the driver needs of the router (``LadderRouter`` provides it)."""

    ladder: Ladder
    llm_rungs: frozenset[str]
    bindings: Any

    @property
    def router_state(self) -> Any: ...
    @property
    def caller(self) -> Any: ...
    @property
    def cache(self) -> Any: ...
    def rung_failed(self, rung: str, reason: str) -> None: ...
    def count_answer(self, rung: str) -> None: ...
    async def wait_for_rung(self, selector: Selector, give_up_at: float) -> bool: ...


class StreamDriver:
    """Runs one generation for the router, moving it between rungs when one is lost.

    The rung of a new stream is the request's selector's current rung. If that rung's
    replica does not take the stream within ``assign_timeout_s`` while another compute
    rung could, the stream starts there instead (nothing was generated; the ladder does
    not move for it). If the rung fails (node or replica gone, the probe saw it go), it is
    marked down, the selectors move at once, and the stream continues on the rung they
    pick with the text already sent as the new rung's ``continuation``. When only the shed
    rung or nothing is left but a compute rung can come back (its replica restarts on an
    alive node), the stream waits for it as a JSON request does (``LadderRouter.answer``),
    up to ``pending_timeout_s``.

    Args:
        router: The router's parts.
    """

    def __init__(self, router: Router) -> None:
        self.router = router

    async def run(self, request: GenerationRequest, constraints: Constraints | None,
                  record: StreamRecord, cache_key: Any = None) -> AsyncIterator[Piece]:
        """The pieces of the answer, from as many rungs as it takes.

        Raises:
            LadderExhaustedError: before the first piece, when no eligible rung can start
                the stream (shed, or all gone): the caller answers 503 with Retry-After.
            StreamFailed: after some text was sent, when no rung can continue it.
        """
        router = self.router
        ladder = router.ladder
        selector = router.router_state.selector(constraints, time.time())
        attempts: list[Attempt] = []
        # Compute rungs whose class does not generate text never take a stream.
        never = {r.name for r in ladder.rungs if r.is_compute} - set(router.llm_rungs)
        tried = set(never)
        previous: str | None = None
        reason: str | None = None
        caller = router.caller
        give_up_at = asyncio.get_running_loop().time() + ladder.policy.pending_timeout_s
        while True:
            name = next_rung(router.router_state, selector, tried)
            if name is None or ladder.rung(name).kind == "shed":
                if await router.wait_for_rung(selector, give_up_at):
                    tried = set(never)  # what failed before may be back: ask again
                    continue
                if name is None:
                    break
            tried.add(name)
            rung = ladder.rung(name)
            if rung.kind == "cache":
                hit = router.cache.get(cache_key, constraints, time.time()) \
                    if router.cache is not None and cache_key is not None else None
                text = hit.value if hit is not None and isinstance(hit.value, str) else None
                if text is not None and text.startswith(record.text):
                    rest = text[len(record.text):]
                    record.tokens[name] = record.tokens.get(name, 0) + 1
                    record.finish_reason = "stop"
                    router.count_answer(name)
                    if rest:
                        yield Piece(name, rest, previous, reason)
                    return
                attempts.append(Attempt(name, "no fresh cached answer for this request",
                                        time.time()))
                continue
            if rung.kind == "shed":
                attempts.append(Attempt(name, "shed: no capacity for this request, try later",
                                        time.time()))
                break
            warm = router.router_state.is_warm(name)
            first_try = not record.text
            next_request = request.continuing(record.text, record.completion_tokens)
            if next_request.max_tokens <= 0:
                record.finish_reason = "length"
                return
            try:
                stream = caller.stream(
                    name, next_request.to_dict(), warm=warm,
                    give_up_s=caller.assign_timeout_s if first_try else None,
                    elsewhere=lambda n=name: router.router_state.has_other_compute(selector, n))
                async for text in stream:
                    record.tokens[name] = record.tokens.get(name, 0) + 1
                    cut = first_stop(record.text + text, request.stop, len(record.text))
                    if cut is not None:
                        text = (record.text + text)[len(record.text):cut]
                        record.text += text
                        record.finish_reason = "stop"
                        if text:
                            yield Piece(name, text, previous, reason)
                        await stream.aclose()
                        break
                    record.text += text
                    yield Piece(name, text, previous, reason)
                    previous = reason = None
                else:
                    record.finish_reason = ("length" if record.completion_tokens
                                            >= request.max_tokens else "stop")
            except RungFailed as failed:
                attempts.append(Attempt(name, failed.reason, time.time()))
                if not failed.timeout:
                    router.rung_failed(name, failed.reason)
                if record.text:  # a move the client sees; before any text there is none
                    record.switches.append({"from": name, "at_token": record.completion_tokens,
                                            "reason": failed.reason})
                    previous, reason = name, failed.reason
                continue
            self._finished(name, record, cache_key, constraints)
            return
        if not record.text:
            if not attempts:
                attempts.append(Attempt(None, "no eligible rung is obtainable", time.time()))
            raise LadderExhaustedError(ladder.name, attempts, ladder.policy.retry_after_s)
        raise StreamFailed(f"the stream lost its rung after {record.completion_tokens} "
                           f"token(s) and no eligible rung could continue it")

    def _finished(self, rung: str, record: StreamRecord, cache_key: Any,
                  constraints: Constraints | None) -> None:
        router = self.router
        router.count_answer(rung)
        for switch in record.switches:
            switch.setdefault("to", rung)
        if record.switches:
            first = record.switches[0]
            log_event(TransitionEvent(time.time(), router.ladder.name, first["from"], rung,
                                      "down", f"stream continued: {first['reason']}",
                                      kind="call"))
        # Cache single-rung answers only: a mixed one has no one producer to check
        # residency against.
        if router.cache is not None and cache_key is not None and len(record.tokens) == 1:
            router.cache.put(cache_key, constraints, record.text, router.ladder.rung(rung),
                             time.time())
