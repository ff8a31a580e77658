"""The OpenAI-compatible routes of a ladder app: ``/v1/chat/completions``,
``/v1/completions`` (whole or streamed as server-sent events), ``/v1/models`` and
``/v1/models/{id}``."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ray_ladder.core.exceptions import LadderExhaustedError
from ray_ladder.core.spec import Ladder
from ray_ladder.serve import http
from ray_ladder.serve.bindings import relative_path
from ray_ladder.serve.cache import payload_key
from ray_ladder.serve.errors import public_error
from ray_ladder.serve.llm.responses import (
    DONE,
    Answer,
    StreamRecord,
    model_object,
    models_list,
)
from ray_ladder.serve.llm.schema import OpenAIError, parse_request, wants_usage
from ray_ladder.serve.llm.streams import Piece, StreamDriver, StreamFailed

if TYPE_CHECKING:
    from ray_ladder.serve.walker import Walker

logger = logging.getLogger("ray_ladder.serve")
ROUTES: dict[str, tuple[str, Literal["chat", "completion"] | None]] = {
    "/v1/chat/completions": ("POST", "chat"),
    "/v1/completions": ("POST", "completion"),
    "/v1/models": ("GET", None),
}
MODEL_ROUTE = "/v1/models/"  # + the model's id: GET one model


class Router(Protocol):
    """What the routes need of the router (``LadderRouter`` provides it)."""

    ladder: Ladder
    llm_rungs: frozenset[str]
    bindings: Any
    walker: Walker

    @property
    def router_state(self) -> Any: ...
    @property
    def cache(self) -> Any: ...
    def targets_for(self, request: Any) -> Any: ...


def route_of(path: str) -> str | None:
    """The OpenAI route a request path ends with (any route prefix before it), or None.

    Example:
        >>> route_of("/llm/v1/chat/completions"), route_of("/predict")
        ('/v1/chat/completions', None)
    """
    path = path.rstrip("/")
    at = path.find("/v1/")
    return path[at:] if at >= 0 else None


def _error(err: OpenAIError) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(err.body(), err.status, headers=err.headers)


def exhausted_error(err: LadderExhaustedError, degraded_s: float) -> OpenAIError:
    """503 with ``Retry-After`` (the OpenAI clients retry it after that long); its code
    and ``X-Ladder-Rung`` say whether the shed rung answered (``http.refused_by``). A
    spent team budget that rejects is a 429 ``insufficient_quota`` (OpenAI's type for
    a spent quota), code ``budget_exhausted``, ``Retry-After`` the window's end."""
    rung = http.refused_by(err)
    if http.refusal_status(err) == 429:  # the team's spent budget rejects it
        return OpenAIError(429, f"{err}", type="insufficient_quota", code="budget_exhausted",
                           headers=http.unavailable_headers(err, degraded_s))
    return OpenAIError(503, f"{err}", type="ladder_exhausted",
                       code="exhausted" if rung == http.EXHAUSTED else "shed",
                       headers=http.unavailable_headers(err, degraded_s))


def rung_error(err: BaseException) -> str:
    """The message of a 500: ``rung error: <Type>: <first line>`` (``public_error``)."""
    kind, message = public_error(err)
    return f"rung error: {kind}: {message}"


def _route(router: Router, request: Any) -> tuple[Any, Literal["chat", "completion"] | None]:
    """``(error response or None, kind)`` for the request's route and method."""
    route = route_of(request.url.path)
    if route is not None and route.startswith(MODEL_ROUTE):
        return _model(router.ladder, request.method, route[len(MODEL_ROUTE):]), None
    if route not in ROUTES:
        return _error(OpenAIError(404, f"no route {request.url.path!r}; the ladder serves "
                                       f"{', '.join(sorted(ROUTES))}", code="not_found")), None
    method, kind = ROUTES[route]
    if request.method != method:
        return _error(OpenAIError(405, f"{request.method} not allowed on {route}: use "
                                       f"{method}", headers={"Allow": method})), None
    if not router.llm_rungs:
        return _error(OpenAIError(404, f"ladder {router.ladder.name!r} has no LLM rung: give "
                                       "its compute rungs classes with an async generate() "
                                       "(docs/llm.md)", code="not_found")), None
    return None, kind


def _model(ladder: Ladder, method: str, model_id: str) -> Any:
    """``GET /v1/models/{id}``: the model object, or OpenAI's 404 ``model_not_found``."""
    from starlette.responses import JSONResponse

    if method != "GET":
        return _error(OpenAIError(405, f"{method} not allowed on {MODEL_ROUTE}{{id}}: use "
                                       "GET", headers={"Allow": "GET"}))
    if model_id != ladder.name:
        return _error(OpenAIError(404, f"the model {model_id!r} does not exist; this ladder "
                                       f"serves {ladder.name!r}", param="model",
                                  code="model_not_found"))
    return JSONResponse(model_object(ladder))


async def _read(router: Router, request: Any,
                max_body_bytes: int) -> tuple[Any, Any, Any, Any]:
    """``(error response or None, constraints, latency targets, body)`` of a POST."""
    try:
        constraints = router.bindings.from_headers(request.headers, relative_path(request))
        targets = router.targets_for(request)
        http.check_length(request.headers.get("content-length"), max_body_bytes)
        body = http.parse_body(await request.body(), max_body_bytes)
    except http.HttpError as err:
        return (_error(OpenAIError(err.status, err.message, headers=err.headers)), None,
                None, None)
    return None, constraints, targets, body


async def _first(pieces: AsyncIterator[Piece], degraded: float) -> tuple[Any, Piece | None]:
    """``(error response or None, the first piece)``: refusals and rung errors come here."""
    try:
        return None, await pieces.__anext__()
    except StopAsyncIteration:
        return None, None
    except LadderExhaustedError as err:
        return _error(exhausted_error(err, degraded)), None
    except ValueError as err:  # the rung class refused the request
        logger.debug("rung refused the request", exc_info=True)
        return _error(OpenAIError(400, f"rejected by the rung: {public_error(err)[1]}")), None
    except Exception as err:  # a bug in a rung class: a server error, said as such
        logger.exception("rung raised")  # the whole traceback: the router's log only
        return _error(OpenAIError(500, rung_error(err), type="server_error")), None


async def handle(router: Router, request: Any, max_body_bytes: int) -> Any:
    """Answer one request on an OpenAI route (4xx for every malformed request)."""
    from starlette.responses import JSONResponse, StreamingResponse

    arrived = time.monotonic()
    refused, kind = _route(router, request)
    if refused is not None:
        return refused
    ladder = router.ladder
    if kind is None:
        return JSONResponse(models_list(ladder))
    refused, constraints, targets, body = await _read(router, request, max_body_bytes)
    if refused is not None:
        return refused
    try:
        req, gen = parse_request(kind, body, ladder.name)
    except OpenAIError as err:
        return _error(err)
    degraded = router.router_state.degraded_s(constraints)
    answer = Answer(kind, ladder, gen.prompt_tokens())
    record = StreamRecord()
    key = payload_key({"kind": kind, **body, "stream": False, "stream_options": None}) \
        if router.cache is not None else None
    # The targets count from the request's arrival: reading and checking it took some.
    pieces = StreamDriver(router.walker).run(gen, constraints, record, key,
                                             targets=targets.spent(time.monotonic() - arrived),
                                             stream=bool(req.stream))
    refused, first = await _first(pieces, degraded)
    if refused is not None:
        return refused
    # An answer with no text (the engine finished at once) is the finishing rung's.
    rung = first.rung if first is not None else (record.rung or ladder.names[0])
    headers = http.answer_headers(rung, degraded)
    if not req.stream:
        try:
            async for piece in pieces:
                rung = piece.rung
        except LadderExhaustedError as err:
            return _error(exhausted_error(err, degraded))
        except StreamFailed as err:
            return _error(OpenAIError(503, str(err), type="ladder_exhausted", code="exhausted",
                                      headers=http.failed_headers(
                                          ladder.policy.retry_after_s, degraded)))
        rung = record.rung or rung  # the rung that finished it (it may have sent no text)
        headers[http.RUNG_HEADER] = rung
        return JSONResponse(answer.whole(rung, record, degraded_s=degraded), headers=headers)
    return StreamingResponse(_sse(answer, first, pieces, record, degraded, wants_usage(req)),
                             media_type="text/event-stream",
                             headers={**headers, "Cache-Control": "no-cache"})


async def _sse(answer: Answer, first: Piece | None, pieces: AsyncIterator[Piece],
               record: StreamRecord, degraded: float, usage: bool) -> AsyncIterator[bytes]:
    """The event stream: one chunk per piece, the finish chunk, usage, ``[DONE]``."""
    rung = first.rung if first is not None else (record.rung or "")
    try:
        if first is not None:
            yield answer.chunk(first.rung, first.text, degraded_s=degraded,
                               switched_from=first.switched_from, reason=first.reason)
        async for piece in pieces:
            rung = piece.rung
            yield answer.chunk(piece.rung, piece.text, degraded_s=degraded,
                               switched_from=piece.switched_from, reason=piece.reason)
    except (StreamFailed, LadderExhaustedError) as err:
        yield answer.error_chunk(str(err))
        yield DONE
        return
    except Exception as err:  # a rung bug mid-stream: close the stream cleanly, say why
        logger.exception("rung raised mid-stream")
        yield answer.error_chunk(rung_error(err), type="server_error")
        yield DONE
        return
    rung = record.rung or rung  # the rung that finished it (it may have sent no text)
    yield answer.final(rung, record, degraded_s=degraded)
    if usage:
        yield answer.usage_chunk(rung, record)
    yield DONE
