"""The fault layer of :class:`~ray_ladder.testing.faults.FaultyBackend`: an ASGI middleware
in front of the project's own OpenAI-compatible app that answers each request the way the
current fault says (no server here: :mod:`ray_ladder.testing.faults` runs it).

A request takes the fault (and its options) current when it arrives, except that a switch
releases the requests waiting in a fault: ``silent`` and ``hang_mid`` lose their connection,
``late_first_token`` and ``trickle`` go on at the normal pace.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ray_ladder.serve.llm.schema import OpenAIError
from ray_ladder.testing.fault_state import ERRORS, HTML_PAGE, Fault, FaultOptions, FaultState

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The paths a fault applies to (POST); ``/v1/models`` answers unless the server is down.
GENERATE_PATHS = ("/v1/chat/completions", "/v1/completions")
DONE = b"data: [DONE]\n\n"
MALFORMED_LINE = b"data: {not json\n\n"


class FaultLayer:
    """ASGI middleware: applies the current fault of ``state`` to the POSTs of
    :data:`GENERATE_PATHS`; every other request goes to ``app`` unless the fault is
    ``refused`` or ``silent`` (a server that is down is down for its health check too).

    Chat messages lose a ``prefix`` key before ``app`` sees them (LiteLLM's mid-stream
    fallback sends one; vLLM accepts it, the project's strict request schema would not).

    Args:
        app: The healthy OpenAI-compatible app.
        state: The fault to apply, shared with the server's owner.
        model: The model name its own answers (``empty``) carry.
    """

    def __init__(self, app: ASGIApp, state: FaultState, model: str) -> None:
        self.app, self.state, self.model = app, state, model
        self.closing = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        fault, options, release = self.state.fault, self.state.options, self.state.release
        if scope["method"] == "POST":
            self.state.received(scope["path"], fault)
        try:
            await self._handle(scope, receive, send, fault, options, release)
        except asyncio.CancelledError:
            if not self.closing:  # the server is stopping: leave without a word
                raise

    async def _handle(self, scope: Scope, receive: Receive, send: Send, fault: Fault,
                      options: FaultOptions, release: asyncio.Event) -> None:
        if fault == "refused":  # a request that came on a connection opened before
            await drop(send)
            return
        if fault == "silent":
            await held(release, receive)
            await drop(send)
            return
        if scope["method"] != "POST" or scope["path"] not in GENERATE_PATHS:
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            return  # the client left
        request = parse_request(body)
        stream = bool(request.get("stream")) if request is not None else False
        if request is not None:
            body = json.dumps(request).encode()
        if fault == "healthy":
            await self.app(scope, replay(body, receive), send)
        elif fault.startswith("status_"):
            await respond_error(send, int(fault[len("status_"):]), options)
        elif fault in ("html_200", "empty"):
            await self._canned(send, fault, scope["path"], stream)
        elif stream:
            await self._stream(scope, receive, send, body, fault, options, release)
        else:
            await self._whole(scope, receive, send, request, body, fault, options, release)

    async def _canned(self, send: Send, fault: Fault, path: str, stream: bool) -> None:
        if fault == "html_200":
            await respond(send, 200, HTML_PAGE, b"text/html; charset=utf-8")
        elif stream:
            await respond(send, 200, DONE, b"text/event-stream; charset=utf-8")
        else:
            chat = path.endswith("/chat/completions")
            answer: dict[str, Any] = {"id": f"{'chatcmpl' if chat else 'cmpl'}-empty",
                      "object": "chat.completion" if chat else "text_completion",
                      "created": int(time.time()), "model": self.model, "choices": [],
                      "usage": {"prompt_tokens": 0, "completion_tokens": 0,
                                "total_tokens": 0}}
            await respond(send, 200, json.dumps(answer).encode(), b"application/json")

    async def _stream(self, scope: Scope, receive: Receive, send: Send, body: bytes,
                      fault: Fault, options: FaultOptions, release: asyncio.Event) -> None:
        tap = StreamTap(send, fault, options, release)
        inner = asyncio.ensure_future(self.app(scope, replay(body, receive), tap))
        finished = asyncio.ensure_future(tap.done.wait())
        try:
            await asyncio.wait({inner, finished}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (inner, finished):
                task.cancel()
            await asyncio.gather(inner, finished, return_exceptions=True)

    async def _whole(self, scope: Scope, receive: Receive, send: Send,
                     request: dict[str, Any] | None, body: bytes, fault: Fault,
                     options: FaultOptions, release: asyncio.Event) -> None:
        if fault == "hang_mid":  # nothing of a whole answer comes before the hang
            await held(release, receive)
            await drop(send)
        elif fault == "late_first_token":
            await wait(release, options.late_s)
            await self.app(scope, replay(body, receive), send)
        elif fault == "malformed":
            await respond(send, 200, b'{"id": "cmpl-malformed", "choices": [{not json',
                          b"application/json")
        elif fault == "error_event":
            await respond(send, 200, json.dumps(stream_error()).encode(), b"application/json")
        elif fault == "truncated":
            if request is not None:
                body = json.dumps(capped(request, options.after_tokens)).encode()
            status, headers, data = await capture(self.app, scope, replay(body, receive))
            await respond(send, status, truncate(data), header(headers, b"content-type"))
        else:  # trickle, cut
            status, headers, data = await capture(self.app, scope, replay(body, receive))
            if fault == "trickle":
                await wait(release, late_tokens(data, options.after_tokens) * options.trickle_s)
                await respond(send, status, data, header(headers, b"content-type"))
                return
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": data[:len(data) // 2],
                        "more_body": True})
            await drop(send)


class StreamTap:
    """The ``send`` the healthy app streams through: forwards its events with the fault
    applied, counting the events that carry a token. Sets :attr:`done` when the fault
    has ended the response itself (the healthy app is then cancelled)."""

    def __init__(self, send: Send, fault: Fault, options: FaultOptions,
                 release: asyncio.Event) -> None:
        self.send, self.fault, self.options, self.release = send, fault, options, release
        self.tokens = 0
        self.done = asyncio.Event()
        self._malformed_sent = False

    async def __call__(self, message: Message) -> None:
        if message["type"] != "http.response.body" or not is_token(message.get("body", b"")):
            await self.send(message)
            return
        self.tokens += 1
        if self.fault == "late_first_token":
            if self.tokens == 1:
                await wait(self.release, self.options.late_s)
            await self.send(message)
        elif self.tokens <= self.options.after_tokens:
            await self.send(message)
        else:
            await self._past(message)

    async def _body(self, data: bytes, more: bool = True) -> None:
        await self.send({"type": "http.response.body", "body": data, "more_body": more})

    async def _past(self, message: Message) -> None:
        """A token past ``after_tokens``."""
        if self.fault == "trickle":
            await wait(self.release, self.options.trickle_s)
            await self.send(message)
            return
        if self.fault == "malformed":  # the bad line takes this token's place, once
            if self._malformed_sent:
                await self.send(message)
            else:
                self._malformed_sent = True
                await self._body(MALFORMED_LINE)
            return
        if self.fault == "error_event":
            await self._body(b"data: " + json.dumps(stream_error()).encode() + b"\n\n")
            await self._body(DONE, more=False)
        elif self.fault == "truncated":
            await self._body(b"", more=False)
        elif self.fault == "hang_mid":
            await self.release.wait()
            await drop(self.send)
        else:  # cut
            await drop(self.send)
        self.done.set()
        await asyncio.Event().wait()  # until the layer cancels the healthy app


# --- helpers ------------------------------------------------------------------------------


async def wait(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait ``timeout_s`` or until ``event`` is set (then True)."""
    if event.is_set():
        return True
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
        return True
    except asyncio.TimeoutError:
        return False


async def held(release: asyncio.Event, receive: Receive) -> None:
    """Hold a request until ``release`` is set or the client leaves."""
    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    tasks = [asyncio.ensure_future(release.wait()), asyncio.ensure_future(gone())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def drop(send: Send) -> None:
    """Close the request's connection at once, whatever was sent on it.

    uvicorn's ``send`` is a method of the request's cycle, which holds the transport; with
    another server an exception ends the request (its server closes the connection, or
    answers 500 when nothing was sent yet)."""
    cycle = getattr(send, "__self__", None)
    transport = getattr(cycle, "transport", None)
    if transport is None:
        raise ConnectionAbortedError("the fault drops this connection")
    transport.close()
    for _ in range(100):  # until the server has seen it go (it then logs nothing)
        if getattr(cycle, "disconnected", True):
            return
        await asyncio.sleep(0.01)


async def read_body(receive: Receive) -> bytes | None:
    """The request's body (``None`` when the client left first)."""
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` first, then the connection's own events."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


def parse_request(body: bytes) -> dict[str, Any] | None:
    """The request's JSON object without chat messages' ``prefix`` (``None``: not one)."""
    try:
        request = json.loads(body)
    except ValueError:
        return None
    if not isinstance(request, dict):
        return None
    for message in request.get("messages") or []:
        if isinstance(message, dict):
            message.pop("prefix", None)
    return request


async def respond(send: Send, status: int, body: bytes, content_type: bytes,
                  headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """One whole response."""
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", content_type), (b"content-length", str(len(body)).encode()),
        *(headers or [])]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def respond_error(send: Send, status: int, options: FaultOptions) -> None:
    """A ``status_*`` fault's answer: OpenAI's error object, ``Retry-After`` if asked."""
    message, kind, code = ERRORS[status]
    headers = []
    if status in (429, 503) and options.retry_after_s is not None:
        headers.append((b"retry-after", str(math.ceil(options.retry_after_s)).encode()))
    body = json.dumps(OpenAIError(status, message, type=kind, code=code).body()).encode()
    await respond(send, status, body, b"application/json", headers)


def stream_error() -> dict[str, Any]:
    """The error object ``error_event`` sends."""
    return OpenAIError(500, "The engine failed while generating (fault error_event).",
                       type="server_error").body()


def is_token(data: bytes) -> bool:
    """Whether an SSE event of the healthy app carries text (not the final, usage or
    ``[DONE]`` event)."""
    if not data.startswith(b"data: {"):
        return False
    choices = json.loads(data[len(b"data: "):]).get("choices") or [{}]
    choice = choices[0]
    text = (choice.get("delta") or {}).get("content") or choice.get("text")
    return bool(text) and choice.get("finish_reason") is None


async def capture(app: ASGIApp, scope: Scope,
                  receive: Receive) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Run ``app`` to the end: its status, headers and whole body."""
    start: dict[str, Any] = {}
    body = bytearray()

    async def keep(message: Message) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        else:
            body.extend(message.get("body", b""))

    await app(scope, receive, keep)
    return int(start["status"]), list(start.get("headers", [])), bytes(body)


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes:
    """One header's value (``b""`` when absent)."""
    return next((value for key, value in headers if key.lower() == name), b"")


def capped(request: dict[str, Any], tokens: int) -> dict[str, Any]:
    """The request asking for at most ``tokens`` tokens."""
    keys = [k for k in ("max_tokens", "max_completion_tokens") if request.get(k)]
    for key in keys or ["max_tokens"]:
        request[key] = max(1, min(int(request.get(key) or tokens), tokens))
    return request


def truncate(data: bytes) -> bytes:
    """A whole answer with ``finish_reason: null`` (its text already cut short)."""
    try:
        answer = json.loads(data)
        for choice in answer.get("choices") or []:
            choice["finish_reason"] = None
    except (ValueError, AttributeError, TypeError):
        return data  # the healthy app's own error: unchanged
    return json.dumps(answer).encode()


def late_tokens(data: bytes, after_tokens: int) -> int:
    """How many tokens of a whole answer come past ``after_tokens``."""
    try:
        done = int(json.loads(data)["usage"]["completion_tokens"])
    except (ValueError, KeyError, TypeError):
        return 0
    return max(0, done - after_tokens)
