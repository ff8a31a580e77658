"""An LLM rung whose model runs behind an OpenAI-compatible URL: an on-prem vLLM server, a
Ray Serve LLM app, a hosted (e.g. EU) provider for the burst rung of a sovereign ladder."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from ray_ladder._lazy import requires_extra
from ray_ladder.core.context import RungContext
from ray_ladder.core.exceptions import RungUnavailableError
from ray_ladder.serve.llm.chunks import ChunkReader, TruncatedStream
from ray_ladder.serve.llm.continuation import (
    completion_of,
    same_tokenizer,
    stream_body,
    tokenize_body,
)
from ray_ladder.serve.llm.protocol import GenerationRequest, Tokens

with requires_extra("llm", "OpenAIBackendRung"):
    import httpx

CONTINUE_MODES = ("completions", "vllm")
ENGINES = ("auto", "vllm", "openai")
#: Backend answers that are the rung's fault, not the request's: its key (401, 403), its
#: model or route (404), its time or its rate (408, 429). Every 5xx too.
RUNG_FAULTS = frozenset({401, 403, 404, 408, 429})


def _messages(request: GenerationRequest) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in request.messages]


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


def retry_after_s(response: httpx.Response) -> float | None:
    """The seconds a ``Retry-After`` header asks for (a number; an HTTP date is read as
    "no number": the rung's own cooldown holds).

    Example:
        >>> retry_after_s(httpx.Response(503, headers={"Retry-After": "5"}))
        5.0
    """
    raw = response.headers.get("retry-after")
    try:
        value = float(raw) if raw is not None else None
    except ValueError:
        return None
    return value if value is not None and 0 <= value < float("inf") else None


#: Content types no event stream is sent as: a proxy's error page, a JSON error body.
NOT_STREAMS = ("text/html", "application/json")


def not_sse(response: httpx.Response, source: str) -> None:
    """Raise :class:`TruncatedStream` (the rung's fault) when a 200 stream says it is an
    HTML page or a JSON body (a proxy's error page): seen before any piece. A stream with
    no or another content type is read, and must end as an answer does."""
    kind = response.headers.get("content-type", "")
    if kind.split(";")[0].strip().lower() in NOT_STREAMS:
        raise TruncatedStream(f"{source} answered {response.status_code} with {kind}, "
                              "not an event stream")


class OpenAIBackendRung:
    """Streams from an OpenAI-compatible server; the rung's ``params`` say where.

    ``params`` (or keyword arguments): ``base_url`` (e.g. ``http://10.0.0.5:8000/v1``; a
    rung with ``cluster:`` defaults to that cluster's ``serve`` address, its
    ``params.route_prefix`` and ``/v1``: another cluster's ladder app),
    ``model`` (the server's model name), ``api_key_env`` (the NAME of the environment
    variable holding the key: the key itself is never in the ladder, never logged),
    ``timeout_s`` (read timeout between two pieces, default 60), ``connect_timeout_s``
    (default 2), ``health_timeout_s`` (the health check's, default 10: a slow server
    that answers is alive), ``engine`` (``auto``: vLLM when ``/models`` says
    ``owned_by: vllm``; ``vllm``; ``openai``: no vLLM extension is sent), ``tokenizer``
    (a name shared by rungs whose engines share a tokenizer; default the served model's
    ``root``), ``continue_with``: how a stream that moved here continues the text already
    sent: ``completions`` (default: ``POST /completions`` with the rendered context, which
    vLLM, SGLang and Ray Serve LLM serve) or ``vllm`` (chat with the partial assistant
    message and vLLM's ``continue_final_message``).

    On vLLM, pieces are engine tokens (each chunk's ``token_ids`` and running usage), and
    a stream that moved here continues from the conversation rendered with this model's
    own chat template (``POST /tokenize``), from the sent text's token ids where the rung
    it came from shares this tokenizer.

    The rung is obtainable while Serve's health check passes (``check_health`` asks
    ``GET /models``) and the router sees no failure: a refused connection, a timeout, a
    5xx, 401/403/404/408/429 or a stream cut short raises
    :class:`~ray_ladder.RungUnavailableError` (the ladder falls; a stream continues on
    the next rung); another 4xx is the request's fault (``ValueError``: 400).

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
        engine = str(params.get("engine", "auto"))
        if engine not in ENGINES:
            raise ValueError(f"rung {rung.name}: params.engine must be one of {ENGINES}, "
                             f"got {engine!r}")
        self._vllm: bool | None = {"vllm": True, "openai": False}.get(engine)
        tokenizer = params.get("tokenizer")
        self.tokenizer: str | None = str(tokenizer) if tokenizer else None
        self.health_timeout_s = float(params.get("health_timeout_s", 10.0))
        #: The engine's context (vLLM says it in ``/models``): a continuation's budget is
        #: cut to what is left of it, as the engine cuts an answer that reaches it.
        self.max_model_len: int | None = None
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
        body = stream_body(request, self.model, bool(self._vllm))
        if request.is_chat and not request.continuation:
            body["messages"] = _messages(request)
            return "/chat/completions", body
        if request.prompt is not None and not request.continuation:
            body["prompt"] = request.prompt
            return "/completions", body
        if request.is_chat and self.continue_with == "vllm" and not self._same(request):
            body["messages"] = [*_messages(request),
                                {"role": "assistant", "content": request.continuation}]
            body.update(continue_final_message=True, add_generation_prompt=False)
            return "/chat/completions", body
        body["prompt"] = request.context_text()
        return "/completions", body

    def _same(self, request: GenerationRequest) -> bool:
        """Whether the text already sent is in this rung's own token ids."""
        return same_tokenizer(request, self.tokenizer)

    async def _learn(self) -> None:
        """What the server is (once): vLLM or not (``engine: auto``), and its tokenizer's
        name (``params.tokenizer``, else the served model's ``root``: its folder)."""
        response = await self._client.get("/models", timeout=self.health_timeout_s)
        data = (response.json().get("data") or [{}]) if response.status_code == 200 else [{}]
        model = next((m for m in data if m.get("id") == self.model), data[0])
        if self._vllm is None:
            self._vllm = model.get("owned_by") == "vllm"
        if self.tokenizer is None:
            self.tokenizer = str(model.get("root") or model.get("id") or self.model)
        if isinstance(model.get("max_model_len"), int):
            self.max_model_len = int(model["max_model_len"])

    async def _tokenize(self, body: dict[str, Any]) -> list[int]:
        """vLLM's ``POST /tokenize`` (at the server's root, beside ``/v1``)."""
        url = self.base_url.removesuffix("/v1") + "/tokenize"
        response = await self._client.post(url, json={"model": self.model, **body})
        if response.status_code >= 400:
            await self._refuse(response, "/tokenize")
        return [int(t) for t in response.json()["tokens"]]

    async def _continued_prompt(self, request: GenerationRequest) -> list[int]:
        """A moved stream's prompt in this engine's tokens (``serve/llm/continuation.py``)."""
        body, tail = tokenize_body(request, self._same(request))
        return [*await self._tokenize(body), *tail]

    async def _refuse(self, response: httpx.Response, path: str) -> None:
        """A 4xx or 5xx answer: the rung's fault (it falls, for its ``Retry-After`` when
        it says one) or the request's (400)."""
        status = response.status_code
        detail = (await response.aread()).decode(errors="replace")[:300]
        if status >= 500 or status in RUNG_FAULTS:
            raise RungUnavailableError(f"{self.base_url}{path} answered {status}: {detail}",
                                       retry_after_s=retry_after_s(response))
        raise ValueError(f"{self.base_url}{path} refused the request ({status}): {detail}")

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Tokens]:
        """Stream the server's pieces (chat deltas or completion text) as engine tokens.

        Raises:
            RungUnavailableError: the backend failed (refused, timed out, 5xx, 401/403/
                404/408/429, a body cut short or not an OpenAI stream).
            ValueError: the backend refused the request itself (another 4xx).
        """
        try:
            if self._vllm is not False and (self._vllm is None or self.tokenizer is None):
                await self._learn()
            path, body = self._body(request)
            if self._vllm and request.continuation:
                prompt = await self._continued_prompt(request)
                completion = completion_of(body, prompt, self.max_model_len)
                if completion is None:  # the answer already fills this context:
                    yield Tokens("", 0, finish_reason="length")  # as the engine ends one
                    return
                path, body = "/completions", completion
            reader = ChunkReader(f"{self.base_url}{path}", self.tokenizer,
                                 usage_counts=bool(self._vllm))
            response = await self._client.send(
                self._client.build_request("POST", path, json=body), stream=True)
            try:
                if response.status_code >= 400:
                    await self._refuse(response, path)
                not_sse(response, f"{self.base_url}{path}")
                async for line in response.aiter_lines():
                    piece = reader.line(line)
                    if piece is not None:
                        yield piece
                    if reader.done:
                        break
                reader.end()
            finally:
                # Shielded: a generation cancelled mid-read (the router had its tokens, or
                # moved the stream) must still give its connection back, or the pool runs
                # dry after a few hundred requests and every call waits (PoolTimeout).
                await asyncio.shield(response.aclose())
        except httpx.HTTPError as err:  # refused, reset, timed out: the backend is gone
            raise RungUnavailableError(f"{self.base_url}: {type(err).__name__}: {err}"
                                       ) from None
        except (json.JSONDecodeError, KeyError) as err:  # /models, /tokenize: not JSON
            raise RungUnavailableError(f"{self.base_url}: the answer is not an OpenAI "
                                       f"answer: {type(err).__name__}: {err}") from None

    async def check_health(self) -> None:
        """Serve's health check: the server lists its models (raises when it does not)."""
        try:
            response = await self._client.get("/models", timeout=self.health_timeout_s)
        except httpx.HTTPError as err:
            raise RungUnavailableError(f"{self.base_url}/models: {type(err).__name__}: {err}"
                                       ) from None
        if response.status_code != 200:
            raise RungUnavailableError(f"{self.base_url}/models answered "
                                       f"{response.status_code}")

