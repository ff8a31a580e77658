"""One LLM rung class as a plain OpenAI-compatible server (no Ray): a stand-in for a vLLM
server in tests and examples, and a way to serve one model outside a ladder.

    python -m ray_ladder.serve.llm.standalone ray_ladder.serve.llm.models:CounterRung \\
        --model counter --port 8001 [--api-key-env KEY_VAR]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from ray_ladder.core.context import RungContext
from ray_ladder.core.spec import Ladder
from ray_ladder.serve import http
from ray_ladder.serve.llm.responses import DONE, Answer, StreamRecord, models_list
from ray_ladder.serve.llm.schema import OpenAIError, parse_request, wants_usage

RUNG = "model"


def openai_app(rung_cls: type, model: str, *, api_key: str | None = None,
               init_kwargs: dict[str, Any] | None = None, max_body_bytes: int = 1_000_000
               ) -> Any:
    """A Starlette app serving ``rung_cls`` on ``/v1/chat/completions``, ``/v1/completions``
    and ``/v1/models`` under the model name ``model``.

    Example:
        >>> app = openai_app(CounterRung, "counter")  # doctest: +SKIP
        >>> uvicorn.run(app, host="127.0.0.1", port=8001)  # doctest: +SKIP
    """
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    ladder = Ladder.from_dict({"name": model, "rungs": [
        {"name": RUNG, "num_cpus": 0, "params": {"model": model}}]})
    rung = rung_cls(RungContext.of(ladder, RUNG), **(init_kwargs or {}))

    def error(err: OpenAIError) -> JSONResponse:
        return JSONResponse(err.body(), err.status, headers=err.headers)

    def authorized(request: Request) -> bool:
        return api_key is None or request.headers.get("authorization") == f"Bearer {api_key}"

    async def models(request: Request) -> Any:
        if not authorized(request):
            return error(OpenAIError(401, "invalid API key", type="authentication_error"))
        return JSONResponse(models_list(ladder))

    async def generate(request: Request) -> Any:
        if not authorized(request):
            return error(OpenAIError(401, "invalid API key", type="authentication_error"))
        kind = "chat" if request.url.path.endswith("/chat/completions") else "completion"
        try:
            body = http.parse_body(await request.body(), max_body_bytes)
            req, gen = parse_request(kind, body, model)  # type: ignore[arg-type]
        except http.HttpError as err:
            return error(OpenAIError(err.status, err.message))
        except OpenAIError as err:
            return error(err)
        answer = Answer(kind, ladder, gen.prompt_tokens())  # type: ignore[arg-type]
        record = StreamRecord()

        async def pieces() -> AsyncIterator[str]:
            async for text in rung.generate(gen):
                record.tokens[RUNG] = record.tokens.get(RUNG, 0) + 1
                record.text += text
                yield text
                if record.completion_tokens >= gen.max_tokens:
                    break
            record.finish_reason = ("length" if record.completion_tokens >= gen.max_tokens
                                    else "stop")

        if not req.stream:
            async for _ in pieces():
                pass
            return JSONResponse(answer.whole(RUNG, record, degraded_s=0.0))

        async def events() -> AsyncIterator[bytes]:
            async for text in pieces():
                yield answer.chunk(RUNG, text, degraded_s=0.0)
            yield answer.final(RUNG, record, degraded_s=0.0)
            if wants_usage(req):
                yield answer.usage_chunk(RUNG, record)
            yield DONE

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", generate, methods=["POST"]),
        Route("/v1/completions", generate, methods=["POST"]),
    ])


def _load(path: str) -> type:
    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not isinstance(cls, type):
        raise SystemExit(f"{path} is not a class")
    return cls


def main(argv: list[str] | None = None) -> None:
    """Serve one rung class over the OpenAI API with uvicorn."""
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rung_class", help="module:Class of an LLM rung")
    parser.add_argument("--model", required=True, help="model name the server answers to")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--api-key-env", help="require this variable's value as the API key")
    parser.add_argument("--init-kwargs", default="{}", help="JSON keyword arguments")
    args = parser.parse_args(argv)
    key = os.environ[args.api_key_env] if args.api_key_env else None
    app = openai_app(_load(args.rung_class), args.model, api_key=key,
                     init_kwargs=json.loads(args.init_kwargs))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
