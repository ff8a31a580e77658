"""Rounds of requests through the official ``openai`` client against an OpenAI endpoint
whose backends count (:class:`~ray_ladder.testing.faults.FaultyBackend`): each request
asks the count on from its own number, so the exact text it must get is known, and a
piece lost or repeated across a move shows as a gap or a repeat.

The fault suite (``tests/serve/test_backend_faults_ray.py``) and ``bench/peers_llm.py``
send the same rounds.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from ray_ladder._lazy import requires_extra


@dataclass
class Outcome:
    """What the client got for one request.

    Attributes:
        kind: ``stream`` or ``whole``.
        start: The number the request counts on from.
        tokens: Its ``max_tokens``.
        text: The text the client received.
        finish_reason: As the client read it.
        error: The client's exception class name (``None``: answered).
        status: The HTTP status of an error the client raised, when it has one.
        detail: The start of that error's message.
        seconds: From the request to its last byte (or its error).
        rungs: The rungs that produced pieces, in order of first appearance (the
            ladder's ``ladder.rung`` field; empty for another server).
    """

    kind: str
    start: int
    tokens: int
    text: str = ""
    finish_reason: str | None = None
    error: str | None = None
    status: int | None = None
    detail: str = ""
    seconds: float = 0.0
    rungs: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        """Whether the text is the whole count, nothing lost or repeated."""
        return self.error is None and self.text == expected_text(self.start, self.tokens)


def expected_text(start: int, tokens: int) -> str:
    """What a counting backend answers to ``start`` with ``tokens`` tokens.

    Example:
        >>> expected_text(5000, 3)
        ' 5001 5002 5003'
    """
    return "".join(f" {start + i}" for i in range(1, tokens + 1))


def _ladder(obj: Any) -> dict[str, Any]:
    extra = getattr(obj, "model_extra", None) or {}
    ladder = extra.get("ladder") if isinstance(extra, dict) else None
    return ladder if isinstance(ladder, dict) else {}


def _rung(obj: Any) -> str | None:
    rung = _ladder(obj).get("rung")
    return str(rung) if rung else None


async def ask(client: Any, model: str, start: int, tokens: int, stream: bool) -> Outcome:
    """One chat request counting on from ``start`` through ``client`` (an
    ``openai.AsyncOpenAI``), streamed or whole."""
    out = Outcome("stream" if stream else "whole", start, tokens)
    began = time.monotonic()
    messages = [{"role": "user", "content": str(start)}]
    try:
        if stream:
            chunks = await client.chat.completions.create(
                model=model, messages=messages, max_tokens=tokens, stream=True)
            async for chunk in chunks:
                choice = chunk.choices[0] if chunk.choices else None
                if choice is not None and choice.delta and choice.delta.content:
                    out.text += choice.delta.content
                    rung = _rung(chunk)
                    if rung is not None and rung not in out.rungs:
                        out.rungs.append(rung)
                if choice is not None and choice.finish_reason:
                    out.finish_reason = choice.finish_reason
        else:
            answer = await client.chat.completions.create(
                model=model, messages=messages, max_tokens=tokens)
            out.text = answer.choices[0].message.content or ""
            out.finish_reason = answer.choices[0].finish_reason
            out.rungs = [str(t["rung"]) for t in _ladder(answer).get("tokens_by_rung", [])
                         if t.get("completion_tokens")]
    except Exception as err:  # the client's outcome is the measure: keep it as data
        out.error = type(err).__name__
        out.status = getattr(err, "status_code", None)
        out.detail = str(err)[:300]
    out.seconds = time.monotonic() - began
    return out


async def send_round(base_url: str, model: str, *, streams: int, wholes: int, tokens: int,
                     first: int, timeout_s: float = 60.0) -> list[Outcome]:
    """``streams`` streamed and ``wholes`` whole requests at once through a fresh
    ``AsyncOpenAI(max_retries=0)`` (retries would hide what the server did), each
    counting from its own number (``first``, ``first + 1000``, ...)."""
    with requires_extra("test", "send_round (the official openai client)"):
        import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0,
                                timeout=timeout_s)
    try:
        return list(await asyncio.gather(*(
            ask(client, model, first + 1000 * i, tokens, i < streams)
            for i in range(streams + wholes))))
    finally:
        await client.close()


def run_round(base_url: str, model: str, **kwargs: Any) -> list[Outcome]:
    """:func:`send_round` from synchronous code (its own event loop)."""
    return asyncio.run(send_round(base_url, model, **kwargs))
