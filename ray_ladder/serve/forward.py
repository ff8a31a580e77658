"""An HTTP request passed from a shared endpoint's front to a team's router, and its answer
back, through a streaming DeploymentHandle call (streams stay streams)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

#: Headers the front never passes on: the key stays at the door.
_DROPPED = frozenset({b"authorization", b"cookie", b"proxy-authorization"})


def message_of(request: Any, path: str, body: bytes) -> dict[str, Any]:
    """What the router needs of a Starlette ``request`` at ``path`` (inside the app):
    method, path, query, headers without the credentials, body."""
    headers = [(k, v) for k, v in request.scope.get("headers", ()) if k.lower() not in _DROPPED]
    return {"method": request.method, "path": path,
            "query_string": request.scope.get("query_string", b""),
            "headers": headers, "body": body}


def request_of(message: dict[str, Any]) -> Any:
    """The Starlette request a router's routes read, rebuilt from :func:`message_of`'s."""
    from starlette.requests import Request

    scope = {"type": "http", "http_version": "1.1", "scheme": "http", "root_path": "",
             "method": message["method"], "path": message["path"],
             "raw_path": message["path"].encode(), "query_string": message["query_string"],
             "headers": list(message["headers"]), "client": None, "server": None}
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": message["body"], "more_body": False}

    return Request(scope, receive)


async def answer_parts(respond: Callable[[Any], Awaitable[Any]],
                       message: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """The router's side: ``respond`` (its ``__call__``) to the rebuilt request, yielded
    as ``{"status", "headers", "body"}`` for a whole answer, or that head (no body)
    then one ``{"chunk"}`` per piece of a streamed one."""
    response = await respond(request_of(message))
    headers = [(k, v) for k, v in response.raw_headers if k.lower() != b"content-length"]
    iterator = getattr(response, "body_iterator", None)
    if iterator is None:
        yield {"status": response.status_code, "headers": headers, "body": response.body}
        return
    yield {"status": response.status_code, "headers": headers}
    async for chunk in iterator:
        yield {"chunk": chunk if isinstance(chunk, bytes) else str(chunk).encode()}


async def response_of(parts: AsyncIterator[dict[str, Any]]) -> Any:
    """The front's side: the Starlette response of :func:`answer_parts`' parts."""
    from starlette.responses import Response, StreamingResponse

    head = await parts.__anext__()
    if "body" in head:
        response = Response(head["body"], head["status"])
        response.raw_headers = [h for h in response.raw_headers
                                if h[0] == b"content-length"] + list(head["headers"])
        return response

    async def chunks() -> AsyncIterator[bytes]:
        async for part in parts:
            yield part["chunk"]

    response = StreamingResponse(chunks(), head["status"])
    response.raw_headers = list(head["headers"])
    return response
