"""Chat clients streaming ``POST /v1/chat/completions`` through the ladder (httpx, SSE).

Closed loop, like people at a chat window: each of ``clients`` clients sends a request,
reads its stream to ``data: [DONE]``, pauses ``think_s`` and sends the next, until the
traffic's ``duration_s`` is over or it is stopped; a stopped client finishes the stream it
is reading first, so no stream is cut by the demo itself. Every stream, every token and
every end is logged (:mod:`ray_ladder.demo.llm.records`).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Sequence
from typing import Any

import httpx

from ray_ladder.demo.llm.records import ChunkParser, Event, Opened
from ray_ladder.demo.load import BackgroundLoad

#: What the demo's users ask (the models answer in the style of the standard library's
#: docstrings, whatever the question).
PROMPTS: tuple[str, ...] = (
    "How do I read a file line by line?",
    "Explain what a context manager does.",
    "What does the socket module offer?",
    "How should I parse command line arguments?",
    "Describe how a thread pool executor works.",
    "What is the difference between a list and a tuple?",
    "How do I format dates and times?",
    "Explain how the logging module handles levels.",
    "How can I compress data with zlib?",
    "What does the json module return for an object?",
    "How do I start a subprocess and read its output?",
    "Explain the heap queue algorithm.",
    "How do I match text with regular expressions?",
    "What is a named tuple?",
    "How do I copy a directory tree?",
    "Explain what an abstract base class is.",
    "How can I serve files over HTTP?",
    "What does the random module guarantee about seeds?",
    "How do I write a CSV file?",
    "Explain how the email package builds a message.",
)


def chat_body(prompt: str, *, model: str, max_tokens: int, seed: int,
              temperature: float = 0.8) -> dict[str, Any]:
    """The JSON of one streamed chat request, with the usage chunk asked for.

    Example:
        >>> chat_body("Hi", model="llm", max_tokens=8, seed=1)["stream_options"]
        {'include_usage': True}
    """
    return {"model": model, "messages": [{"role": "user", "content": prompt}],
            "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": max_tokens, "temperature": temperature, "seed": seed}


class ChatLoad(BackgroundLoad[Event]):
    """``clients`` chat clients streaming from a background thread; see the module doc.

    Args:
        url: Base URL of the Serve app.
        prompts: Questions, sent in turn (cycling).
        clients: Concurrent clients (so at most this many streams open at once).
        duration_s: No client sends a new request after this many seconds.
        max_tokens: Tokens asked for per answer.
        stagger_s: Client ``i`` sends its first request ``i * stagger_s`` after the start,
            so the streams are at different points when a node is lost.
        think_s: Pause between the end of a stream and the client's next request.
        temperature: Sampling temperature (each stream has its own seed).
        timeout_s: Longest wait for the answer to start or for its next chunk.
        model: The ``model`` asked for: the ladder's name.
        **options: :class:`~ray_ladder.demo.load.BackgroundLoad`'s ``watch_interval_s``,
            ``t0``, ``clock`` and ``transport``.

    Example:
        >>> load = ChatLoad("http://127.0.0.1:8123", PROMPTS, clients=20)  # doctest: +SKIP
        >>> load.start(); ...; load.stop()  # doctest: +SKIP
    """

    def __init__(self, url: str, prompts: Sequence[str], *, clients: int = 20,
                 duration_s: float = 60.0, max_tokens: int = 96, stagger_s: float = 0.25,
                 think_s: float = 0.5, temperature: float = 0.8, timeout_s: float = 15.0,
                 model: str = "llm", **options: Any) -> None:
        if not prompts:
            raise ValueError("prompts must not be empty")
        if clients < 1 or max_tokens < 1:
            raise ValueError(f"clients ({clients}) and max_tokens ({max_tokens}) must be >= 1")
        super().__init__(url, duration_s=duration_s, timeout_s=timeout_s,
                         max_connections=clients + 2, **options)
        self.prompts = list(prompts)
        self.clients = clients
        self.stagger_s, self.think_s = stagger_s, think_s
        self.body = functools.partial(chat_body, model=model, max_tokens=max_tokens,
                                      temperature=temperature)
        self._ids = itertools.count()

    async def _pause(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; False when stopped or past the duration meanwhile."""
        until = self.clock() + seconds
        while self.clock() < until and not self._stop.is_set():
            await asyncio.sleep(min(0.05, max(0.0, until - self.clock())))
        return not self._stop.is_set() and self.now() < self.duration_s

    async def _send(self, client: httpx.AsyncClient) -> None:
        tasks = [asyncio.create_task(self._client(client, i)) for i in range(self.clients)]
        await asyncio.gather(*tasks)

    async def _client(self, client: httpx.AsyncClient, number: int) -> None:
        if not await self._pause(number * self.stagger_s):
            return
        while True:
            stream = next(self._ids)
            await self._one(client, number, stream, self.prompts[stream % len(self.prompts)])
            if not await self._pause(self.think_s):
                return

    async def _one(self, client: httpx.AsyncClient, number: int, stream: int,
                   prompt: str) -> None:
        self._records.append(Opened(stream, number, self.now()))
        parser = ChunkParser(stream)
        body = self.body(prompt, seed=stream)
        status: int | None = None
        error = ""
        try:
            async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                status = resp.status_code
                if status != 200:
                    text = (await resp.aread())[:160].decode("utf-8", "replace")
                    error = f"HTTP {status}: {text}"
                else:
                    async for line in resp.aiter_lines():
                        token = parser.feed(line, self.now())
                        if token is not None:
                            self._records.append(token)
        except httpx.HTTPError as err:
            error = f"{type(err).__name__}: {err}"[:200]
        if status == 200 and not error and not parser.done:
            error = "the stream ended without data: [DONE]"
        self._records.append(parser.closed(number, self.now(), status, error))


def ask_once(url: str, model: str, timeout_s: float = 10.0) -> tuple[int, str | None]:
    """One short non-streamed chat request: ``(status, X-Ladder-Rung)`` (for the wait until
    the top rung answers); raises ``httpx.HTTPError``."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hello"}],
            "max_tokens": 2}
    with httpx.Client(timeout=timeout_s, trust_env=False) as client:
        resp = client.post(url.rstrip("/") + "/v1/chat/completions", json=body)
        return resp.status_code, resp.headers.get("X-Ladder-Rung")
