"""The ladder app's own HTTP routes: ``POST /`` (a JSON payload, one JSON answer) and
``GET /-/ladder`` (the ladder's state)."""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Protocol

from ray_ladder.core.constraints import Constraints
from ray_ladder.core.exceptions import LadderExhaustedError
from ray_ladder.serve import http
from ray_ladder.serve.bindings import relative_path
from ray_ladder.serve.errors import public_error
from ray_ladder.serve.result import LadderResult

logger = logging.getLogger("ray_ladder.serve")


class JsonRouter(Protocol):
    """What the route needs of the router (``LadderRouter`` provides it)."""

    ladder: Any
    bindings: Any

    @property
    def router_state(self) -> Any: ...
    def state(self) -> dict[str, Any]: ...
    def targets_for(self, request: Any) -> Any: ...
    async def answer(self, payload: Any, constraints: Constraints | None,
                     targets: Any = None) -> LadderResult: ...


async def handle(router: JsonRouter, request: Any, max_body_bytes: int) -> Any:
    """Answer ``GET /-/ladder`` or ``POST /`` (4xx for a malformed request)."""
    from starlette.responses import JSONResponse, Response

    path = request.url.path.rstrip("/")
    if path.endswith("/-/ladder"):
        if request.method != "GET":
            return JSONResponse({"error": "use GET"}, 405, headers={"Allow": "GET"})
        return JSONResponse(router.state())
    if request.method != "POST":
        return JSONResponse({"error": f"{request.method} not allowed: POST a JSON body"},
                            405, headers={"Allow": "POST"})
    arrived = time.monotonic()
    try:
        constraints = router.bindings.from_headers(request.headers, relative_path(request))
        targets = router.targets_for(request)
        http.check_length(request.headers.get("content-length"), max_body_bytes)
        payload = http.parse_body(await request.body(), max_body_bytes)
    except http.HttpError as err:
        return JSONResponse(err.body(), err.status, headers=err.headers)
    degraded = router.router_state.degraded_s(constraints)
    try:
        # The targets count from the request's arrival: reading its body took some.
        result = await router.answer(payload, constraints,
                                     targets.spent(time.monotonic() - arrived))
    except LadderExhaustedError as err:
        body, headers = http.unavailable(err, degraded)
        return JSONResponse(body, http.refusal_status(err), headers=headers)
    except ValueError as err:  # the rung class refused the payload
        logger.debug("rung refused the payload", exc_info=True)
        return JSONResponse({"error": f"rejected by the rung: {public_error(err)[1]}"}, 400)
    except Exception as err:  # a bug in a rung class: its class and message, no internals
        logger.exception("rung raised")  # the whole traceback: the router's log only
        kind, message = public_error(err)
        return JSONResponse({"error": f"rung error: {kind}: {message}"}, 500)
    try:
        body_bytes = json.dumps(result.value).encode()
    except (TypeError, ValueError):
        return JSONResponse({"error": f"rung {result.rung} returned a value that is "
                                      "not JSON"}, 500)
    headers = http.answer_headers(result.rung, result.degraded_s, stale=result.stale,
                                  source_rung=result.source_rung)
    headers[http.ELAPSED_HEADER] = f"{time.monotonic() - arrived:.3f}"
    return Response(body_bytes, 200, headers=headers, media_type="application/json")
