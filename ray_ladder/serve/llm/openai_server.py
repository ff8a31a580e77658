"""The LLM rung protocol over a deployment that speaks OpenAI in-process: Ray Serve LLM's
``LLMServer`` (``chat(request)`` / ``completions(request)`` yielding OpenAI SSE lines)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, Literal

from ray_ladder.core.context import RungContext
from ray_ladder.core.exceptions import RungUnavailableError
from ray_ladder.serve.llm.chunks import ChunkReader
from ray_ladder.serve.llm.continuation import (
    completion_of,
    same_tokenizer,
    stream_body,
    tokenize_body,
)
from ray_ladder.serve.llm.model_tokens import ModelTokenizer, served_model
from ray_ladder.serve.llm.protocol import GenerationRequest, Tokens

Kind = Literal["chat", "completion"]


def is_openai_server(cls: type) -> bool:
    """Whether ``cls`` serves OpenAI in-process: ``chat`` and ``completions`` methods and
    no ``generate`` of its own (Ray Serve LLM's ``LLMServer`` and its subclasses).

    Example:
        >>> class Server:
        ...     async def chat(self, request): ...
        ...     async def completions(self, request): ...
        >>> is_openai_server(Server), is_openai_server(dict)
        (True, False)
    """
    return (callable(getattr(cls, "chat", None)) and callable(getattr(cls, "completions", None))
            and not callable(getattr(cls, "generate", None)))


def openai_body(request: GenerationRequest, model: str,
                engine: bool = False) -> tuple[Kind, dict[str, Any]]:
    """The streamed OpenAI request for ``request``: chat for a fresh chat, else a
    completion of the rendered context (a stream that moved here continues its text; an
    ``engine`` that tokenizes continues from its own tokens instead: :class:`OpenAIServerRung`).
    An ``engine`` (vLLM's request models: ``LLMServer``) is asked for its token counts.

    Example:
        >>> openai_body(GenerationRequest(prompt="Once", max_tokens=3), "m")[1]["prompt"]
        'Once'
    """
    body = stream_body(request, model, engine)
    if request.is_chat and not request.continuation:
        body["messages"] = [{"role": m.role, "content": m.content} for m in request.messages]
        return "chat", body
    body["prompt"] = request.context_text()
    return "completion", body


def item_tokens(item: Any, reader: ChunkReader) -> list[Tokens]:
    """The tokens of one item of ``LLMServer.chat``'s stream: a batch (list), one
    ``data: {...}`` string, or an ``ErrorResponse`` (4xx: ``ValueError``, the request's
    fault; else :class:`~ray_ladder.RungUnavailableError`, the ladder falls)."""
    if isinstance(item, list | tuple):
        return [t for part in item for t in item_tokens(part, reader)]
    if isinstance(item, bytes):
        item = item.decode()
    if isinstance(item, str):
        pieces = (reader.line(line) for line in item.splitlines())
        return [p for p in pieces if p is not None]
    error = getattr(item, "error", None)
    if error is not None:
        code = getattr(error, "code", None)
        message = str(getattr(error, "message", error))
        if isinstance(code, int) and 400 <= code < 500:
            raise ValueError(message)
        raise RungUnavailableError(f"the engine answered an error: {message}")
    raise TypeError(f"unexpected item {type(item).__name__} in an OpenAI stream")


def item_texts(item: Any) -> list[str]:
    """The texts of one item of an OpenAI stream (:func:`item_tokens`, text only)."""
    return [t.text for t in item_tokens(item, ChunkReader("engine")) if t.text]


def openai_request(kind: Kind | Literal["tokenize"], body: dict[str, Any]) -> Any:
    """The request object ``chat`` / ``completions`` / ``tokenize`` take: Ray Serve LLM's
    ``ChatCompletionRequest`` / ``CompletionRequest`` / ``TokenizeChatRequest`` or
    ``TokenizeCompletionRequest`` where it is installed (it needs vLLM or SGLang), else
    the fields as attributes."""
    try:
        from ray.serve.llm.openai_api_models import ChatCompletionRequest, CompletionRequest
    except ImportError:
        return SimpleNamespace(**body)
    if kind == "tokenize":
        return _tokenize_request(body)
    model = ChatCompletionRequest if kind == "chat" else CompletionRequest
    return model(**body)


def _tokenize_request(body: dict[str, Any]) -> Any:
    """Ray Serve LLM's tokenize request of ``body`` (``messages``: the chat one); its
    models live beside the public ones (``ray.llm``'s serve configs)."""
    from ray_ladder.cluster.ray_private import serve_llm_tokenize_models

    chat, completion = serve_llm_tokenize_models()
    return (chat if "messages" in body else completion)(**body)


class OpenAIServerRung:
    """Mixin: ``generate`` (the LLM rung protocol) over the class's ``chat`` and
    ``completions``; the ladder adds it to an OpenAI-server rung's class.

    Override ``ladder_openai_request(kind, body)`` to build other request objects.
    """

    ladder_rung: RungContext
    #: The served model's tokenizer, once the server's own ``tokenize`` failed.
    _ladder_local: tuple[ModelTokenizer, int | None] | None = None

    def ladder_openai_request(self, kind: Kind | Literal["tokenize"],
                              body: dict[str, Any]) -> Any:
        """The request object of one call (:func:`openai_request`)."""
        return openai_request(kind, body)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Tokens]:
        """Stream the server's pieces for ``request`` as engine tokens (a stream that
        ends before its answer did is the rung's failure).

        A server with ``tokenize`` (``LLMServer``: a vLLM engine) counts its own tokens,
        and continues a stream that moved here from its own chat template and, where its
        tokenizer (``params.tokenizer``, else ``params.model``) made the text sent, from
        those token ids (``serve/llm/continuation.py``); another server continues from
        the text rendered as ``role: content`` lines.
        """
        rung = self.ladder_rung
        model = str(rung.params.get("model", rung.name))
        tokenizer = str(rung.params.get("tokenizer") or model)
        engine = callable(getattr(self, "tokenize", None))
        kind, body = openai_body(request, model, engine)
        if engine and request.continuation:
            ask, tail = tokenize_body(request, same_tokenizer(request, tokenizer))
            ids, context = await self._ladder_tokens({"model": model, **ask})
            completion = completion_of(body, [*ids, *tail], context)
            if completion is None:  # the answer already fills this engine's context
                yield Tokens("", 0, finish_reason="length")
                return
            kind, body = "completion", completion
        method = getattr(self, "chat" if kind == "chat" else "completions")
        stream = method(self.ladder_openai_request(kind, body))
        if inspect.isawaitable(stream):  # LLMServer.chat is async and returns the stream
            stream = await stream
        reader = ChunkReader(f"rung {rung.name}", tokenizer, usage_counts=engine)
        async for item in stream:
            for piece in item_tokens(item, reader):
                yield piece
            if reader.done:
                return
        reader.end()

    async def _ladder_tokens(self, body: dict[str, Any]) -> tuple[list[int], int | None]:
        """The token ids of ``body`` and the engine's context length: the server's own
        ``tokenize``, else the served model's tokenizer in this replica
        (``serve/llm/model_tokens.py``). A rung that can do neither cannot continue
        the stream: the rung's failure (the next rung continues it), not the request's."""
        local = self._ladder_local
        if local is None:
            try:
                return await self._ladder_engine_tokens(body)
            except (ValueError, RungUnavailableError) as err:
                local = self._ladder_local = await served_model(self)
                if local is None:
                    raise RungUnavailableError(f"rung {self.ladder_rung.name} cannot "
                                               f"tokenize a continuation: {err}") from None
        tokenizer, context = local
        return await asyncio.to_thread(tokenizer.ids, body), context

    async def _ladder_engine_tokens(self, body: dict[str, Any]
                                    ) -> tuple[list[int], int | None]:
        """The server's ``tokenize`` of ``body``: the token ids and its context length."""
        tokenize: Any = getattr(self, "tokenize")  # noqa: B009 - the server's, not ours
        answer = tokenize(self.ladder_openai_request("tokenize", body))
        if inspect.isawaitable(answer):
            answer = await answer
        items = [i async for i in answer] if hasattr(answer, "__aiter__") else [answer]
        for item in items:
            if getattr(item, "error", None) is not None:
                item_tokens(item, ChunkReader("tokenize"))  # raises: 4xx or the rung's
            tokens = getattr(item, "tokens", None)
            if tokens is not None:
                context = getattr(item, "max_model_len", None)
                return [int(t) for t in tokens], context if isinstance(context, int) else None
        raise RungUnavailableError("the engine's tokenize answered no tokens")
