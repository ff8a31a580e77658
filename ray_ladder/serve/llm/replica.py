"""The deployment class of an LLM rung: streams the user's ``generate`` to the router."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any

from ray_ladder.core.context import RungContext
from ray_ladder.serve.llm.protocol import GenerationRequest


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

    async def ladder_generate(self, request: dict[str, Any]) -> AsyncIterator[str]:
        """The pieces of one generation (the router's streaming call)."""
        req = GenerationRequest.from_dict(request)
        if req.max_tokens <= 0:
            return
        produced = 0
        async for piece in self.model.generate(req):
            yield str(piece)
            produced += 1
            if produced >= req.max_tokens:
                break

    async def __call__(self, payload: Any) -> dict[str, Any]:
        """The JSON route: ``{"prompt"|"messages", "max_tokens"}`` -> the whole text."""
        req = GenerationRequest.from_payload(payload)
        pieces = [p async for p in self.ladder_generate(req.to_dict())]
        return {"text": "".join(pieces), "model": self.rung.params.get("model", self.rung.name),
                "completion_tokens": len(pieces)}

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
