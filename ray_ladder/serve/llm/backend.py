"""An LLM rung whose model runs behind an OpenAI-compatible URL: an on-prem vLLM server, a
Ray Serve LLM app, a hosted (e.g. EU) provider for the burst rung of a sovereign ladder."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

from ray_ladder._lazy import requires_extra
from ray_ladder.core.context import RungContext
from ray_ladder.core.exceptions import RungUnavailableError
from ray_ladder.serve.llm.openai_server import chunk_text
from ray_ladder.serve.llm.protocol import GenerationRequest

with requires_extra("llm", "OpenAIBackendRung"):
    import httpx

CONTINUE_MODES = ("completions", "vllm")


def cluster_url(rung: RungContext, suffix: str) -> str:
    """The URL of another cluster's ladder app for ``rung``: its cluster's Serve address,
    the app's ``params.route_prefix`` and ``suffix`` (``""`` when the rung names no
    cluster with a ``serve`` address).

    Example:
        >>> rung = RungContext("cloud", 1, "llm", serve="http://10.8.0.1:8000",
        ...                    params={"route_prefix": "/llm"})
        >>> cluster_url(rung, "/v1")
        'http://10.8.0.1:8000/llm/v1'
    """
    if not rung.serve:
        return ""
    prefix = str(rung.params.get("route_prefix", "")).rstrip("/")
    return f"{rung.serve.rstrip('/')}{prefix}{suffix}"


class OpenAIBackendRung:
    """Streams from an OpenAI-compatible server; the rung's ``params`` say where.

    ``params`` (or keyword arguments): ``base_url`` (e.g. ``http://10.0.0.5:8000/v1``; a
    rung with ``cluster:`` defaults to that cluster's ``serve`` address, its
    ``params.route_prefix`` and ``/v1``: another cluster's ladder app),
    ``model`` (the server's model name), ``api_key_env`` (the NAME of the environment
    variable holding the key: the key itself is never in the ladder, never logged),
    ``timeout_s`` (read timeout between two pieces, default 60), ``connect_timeout_s``
    (default 2), ``continue_with``: how a stream that moved here continues the text already
    sent: ``completions`` (default: ``POST /completions`` with the rendered context, which
    vLLM, SGLang and Ray Serve LLM serve) or ``vllm`` (chat with the partial assistant
    message and vLLM's ``continue_final_message``).

    The rung is obtainable while Serve's health check passes (``check_health`` asks
    ``GET /models``) and the router sees no failure: a refused connection, a timeout or a
    5xx raises :class:`~ray_ladder.RungUnavailableError` (the ladder falls; a stream
    continues on the next rung); a 4xx is the request's fault (``ValueError``: 400).

    Example:
        >>> # rungs: - {name: eu-burst, tags: {jurisdiction: eu}, num_cpus: 0.1,
        >>> #           params: {base_url: "https://llm.example.eu/v1", model: "mistral-7b",
        >>> #                    api_key_env: EU_LLM_KEY}}
        >>> build_app(ladder, {"eu-burst": OpenAIBackendRung, ...})  # doctest: +SKIP
    """

    def __init__(self, rung: RungContext, base_url: str | None = None,
                 model: str | None = None, api_key_env: str | None = None,
                 timeout_s: float | None = None, connect_timeout_s: float | None = None,
                 continue_with: str | None = None) -> None:
        params = rung.params
        self.rung = rung
        self.base_url = str(base_url or params.get("base_url") or cluster_url(rung, "/v1")
                            ).rstrip("/")
        if not self.base_url:
            raise ValueError(f"rung {rung.name}: params.base_url is required "
                             "(e.g. http://10.0.0.5:8000/v1), or a cluster with a serve "
                             "address (rungs[].cluster)")
        self.model = str(model or params.get("model") or rung.name)
        self.continue_with = str(continue_with or params.get("continue_with", "completions"))
        if self.continue_with not in CONTINUE_MODES:
            raise ValueError(f"rung {rung.name}: params.continue_with must be one of "
                             f"{CONTINUE_MODES}, got {self.continue_with!r}")
        env = api_key_env or params.get("api_key_env")
        headers = {}
        if env:
            key = os.environ.get(str(env))
            if not key:
                raise ValueError(f"rung {rung.name}: environment variable {env} (api_key_env) "
                                 "is not set on this node")
            headers["Authorization"] = f"Bearer {key}"
        timeout = httpx.Timeout(float(timeout_s or params.get("timeout_s", 60.0)),
                                connect=float(connect_timeout_s
                                              or params.get("connect_timeout_s", 2.0)))
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers,
                                         timeout=timeout)

    def _body(self, request: GenerationRequest) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"model": self.model, "stream": True,
                                "max_tokens": request.max_tokens,
                                "temperature": request.temperature, "top_p": request.top_p}
        if request.seed is not None:
            body["seed"] = request.seed
        if request.stop:
            body["stop"] = list(request.stop)
        if request.is_chat and not request.continuation:
            body["messages"] = [{"role": m.role, "content": m.content}
                                for m in request.messages]
            return "/chat/completions", body
        if request.is_chat and self.continue_with == "vllm":
            body["messages"] = [*({"role": m.role, "content": m.content}
                                  for m in request.messages),
                                {"role": "assistant", "content": request.continuation}]
            body.update(continue_final_message=True, add_generation_prompt=False)
            return "/chat/completions", body
        body["prompt"] = request.context_text()
        return "/completions", body

    async def generate(self, request: GenerationRequest) -> AsyncIterator[str]:
        """Stream the server's pieces (chat deltas or completion text)."""
        path, body = self._body(request)
        try:
            async with self._client.stream("POST", path, json=body) as response:
                if response.status_code >= 500 or response.status_code in (408, 429):
                    raise RungUnavailableError(
                        f"{self.base_url}{path} answered {response.status_code}")
                if response.status_code >= 400:
                    detail = (await response.aread()).decode(errors="replace")[:300]
                    raise ValueError(f"{self.base_url}{path} refused the request "
                                     f"({response.status_code}): {detail}")
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    text = chunk_text(json.loads(data))
                    if text:
                        yield text
        except httpx.HTTPError as err:  # refused, reset, timed out: the backend is gone
            raise RungUnavailableError(f"{self.base_url}: {type(err).__name__}: {err}"
                                       ) from None

    async def check_health(self) -> None:
        """Serve's health check: the server lists its models (raises when it does not)."""
        try:
            response = await self._client.get("/models", timeout=2.0)
        except httpx.HTTPError as err:
            raise RungUnavailableError(f"{self.base_url}/models: {err}") from None
        if response.status_code != 200:
            raise RungUnavailableError(f"{self.base_url}/models answered "
                                       f"{response.status_code}")

