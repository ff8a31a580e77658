"""The deployment class of an LLM rung: streams the user's ``generate`` to the router."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

from ray_ladder.core.context import RungContext
from ray_ladder.serve.llm.coalesce import joined, ready_batches
from ray_ladder.serve.llm.protocol import GenerationRequest, Tokens


async def stream_pieces(generate: Callable[[GenerationRequest], AsyncIterator[Any]],
                        request: dict[str, Any]) -> AsyncIterator[str | dict[str, Any]]:
    """The pieces of one generation, at most ``max_tokens`` tokens: a ``str`` piece as
    text (one token), a :class:`Tokens` as its :meth:`~Tokens.wire` dict; ``Tokens`` that
    queued while the one before was sent go together (:mod:`.coalesce`)."""
    req = GenerationRequest.from_dict(request)
    if req.max_tokens <= 0:
        return
    produced = 0
    batches = ready_batches(generate(req))
    async with contextlib.aclosing(batches):
        async for batch in batches:
            taken = _within(batch, req.max_tokens - produced)
            for piece in joined(taken):
                if isinstance(piece, Tokens):
                    yield piece.wire()
                    produced += piece.count
                else:
                    yield str(piece)
                    produced += 1
            if produced >= req.max_tokens or len(taken) < len(batch):
                return


def _within(batch: list[Any], left: int) -> list[Any]:
    """The first pieces of ``batch`` up to the one that reaches ``left`` tokens."""
    out = []
    for piece in batch:
        out.append(piece)
        left -= piece.count if isinstance(piece, Tokens) else 1
        if left <= 0:
            break
    return out


async def whole_answer(generate: Callable[[GenerationRequest], AsyncIterator[Any]],
                       rung: RungContext, payload: Any) -> dict[str, Any]:
    """The JSON route's answer of an LLM rung: ``{"prompt"|"messages", "max_tokens"}``
    -> the whole text, the model and the pieces it took."""
    req = GenerationRequest.from_payload(payload)
    pieces = [Tokens.of(p) async for p in stream_pieces(generate, req.to_dict())]
    return {"text": "".join(p.text for p in pieces),
            "model": rung.params.get("model", rung.name),
            "completion_tokens": sum(p.count for p in pieces)}


class LLMRungReplica:
    """Serve replica of one LLM rung.

    ``ladder_generate`` streams the pieces of ``user_cls.generate`` (at most
    ``max_tokens``) to the router; ``__call__`` answers the JSON route with the whole text;
    ``check_health`` defers to the rung class's own, when it has one (an external backend
    probes its server there, so Serve stops routing to it when the server is down).

    Example:
        >>> LLMRungReplica(CounterRung, RungContext(name="cpu", index=0, ladder="x"), {})
        ... # doctest: +SKIP
    """

    def __init__(self, user_cls: type, rung: RungContext, init_kwargs: dict[str, Any]):
        self.rung = rung
        self.model = user_cls(rung, **init_kwargs)

    async def ladder_generate(self, request: dict[str, Any]
                              ) -> AsyncIterator[str | dict[str, Any]]:
        """The pieces of one generation (the router's streaming call)."""
        async for piece in stream_pieces(self.model.generate, request):
            yield piece

    async def __call__(self, payload: Any) -> dict[str, Any]:
        """The JSON route: ``{"prompt"|"messages", "max_tokens"}`` -> the whole text."""
        return await whole_answer(self.model.generate, self.rung, payload)

    async def ladder_ping(self) -> str:
        """The router's ping (it primes cold rungs and checks idle warm ones): the rung
        class's health check first, so a backend that is down fails the ping."""
        await self.check_health()
        return self.rung.name

    async def check_health(self) -> None:
        """Serve's health check: the rung class's ``check_health`` (sync or async)."""
        check = getattr(self.model, "check_health", None)
        if check is not None:
            result = check()
            if inspect.isawaitable(result):
                await result
