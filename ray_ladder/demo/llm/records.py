"""What the chat clients log (pure): stream opened, each token, stream closed; the parser of
one OpenAI server-sent-event stream; and the log read back stream by stream.

The clients' log is append-only (:class:`Opened`, :class:`Token`, :class:`Closed`), so the
load process can ship it to the driver in pieces; :class:`StreamLog` rebuilds each stream
from it, open ones included.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union


@dataclass(frozen=True, slots=True)
class Opened:
    """A client sent a chat request (``t``: demo time)."""

    stream: int
    client: int
    t: float


@dataclass(frozen=True, slots=True)
class Token:
    """One content chunk received.

    Attributes:
        stream: The stream it belongs to.
        t: Demo time it arrived.
        rung: Its ``ladder.rung`` (the rung that produced it).
        text: Its ``delta.content``.
        switched_from: ``ladder.switched_from``: set on the first chunk after the stream
            moved to another rung.
        reason: ``ladder.switch_reason``.
    """

    stream: int
    t: float
    rung: str
    text: str
    switched_from: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Closed:
    """A stream ended, well or not.

    Attributes:
        stream: Its id.
        client: The client that sent it.
        t: Demo time it ended.
        status: HTTP status (``None``: no answer at all).
        done: ``data: [DONE]`` was received.
        finish_reason: The last chunk's ``finish_reason``.
        usage_tokens: ``usage.completion_tokens`` of the usage chunk.
        usage_by_rung: The usage chunk's ``ladder.tokens_by_rung`` as ``rung -> tokens``.
        models: Rung -> the ``model`` field its chunks named.
        error: What went wrong (an HTTP error body, an error event, a timeout).
    """

    stream: int
    client: int
    t: float
    status: int | None
    done: bool = False
    finish_reason: str | None = None
    usage_tokens: int | None = None
    usage_by_rung: dict[str, int] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    error: str = ""

    @property
    def completed(self) -> bool:
        """A 200 that ended with a finish reason and ``[DONE]``, with no error event."""
        return (self.status == 200 and self.done and self.finish_reason is not None
                and not self.error)


#: One entry of the clients' log.
Event = Union[Opened, Token, Closed]  # noqa: UP007 (3.10 needs Union in a runtime alias)


class ChunkParser:
    """Reads one streamed chat answer, line by line (``data: {...}`` events).

    Example:
        >>> p = ChunkParser(stream=7)
        >>> line = ('data: {"model": "docs-4gram", "choices": [{"delta": {"content": " The"}, '
        ...         '"finish_reason": null}], "ladder": {"rung": "h100"}}')
        >>> p.feed(line, t=1.5)
        Token(stream=7, t=1.5, rung='h100', text=' The', switched_from=None, reason=None)
    """

    def __init__(self, stream: int) -> None:
        self.stream = stream
        self.done = False
        self.finish_reason: str | None = None
        self.usage_tokens: int | None = None
        self.usage_by_rung: dict[str, int] = {}
        self.models: dict[str, str] = {}
        self.error = ""

    def feed(self, line: str, t: float) -> Token | None:
        """Take one line of the event stream; the :class:`Token` it carries, if any."""
        if not line.startswith("data:"):
            return None  # blank separators, comments
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return None
        try:
            chunk = json.loads(data)
        except ValueError:
            self.error = self.error or f"bad event: {data[:80]}"
            return None
        if not isinstance(chunk, dict):
            self.error = self.error or f"bad event: {data[:80]}"
            return None
        if "error" in chunk:
            err = chunk["error"]
            self.error = str(err.get("message") if isinstance(err, dict) else err)[:200]
            return None
        ladder = chunk.get("ladder")
        ext: dict[str, Any] = ladder if isinstance(ladder, dict) else {}
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage_tokens = int(usage.get("completion_tokens", 0))
            self.usage_by_rung = {str(r.get("rung")): int(r.get("completion_tokens", 0))
                                  for r in ext.get("tokens_by_rung", []) if isinstance(r, dict)}
        token: Token | None = None
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
            text = delta.get("content")
            if text:
                rung = str(ext.get("rung") or "?")
                self.models.setdefault(rung, str(chunk.get("model")))
                token = Token(self.stream, t, rung, text, ext.get("switched_from"),
                              ext.get("switch_reason"))
        return token

    def closed(self, client: int, t: float, status: int | None, error: str = "") -> Closed:
        """The :class:`Closed` record of this stream."""
        return Closed(self.stream, client, t, status, self.done, self.finish_reason,
                      self.usage_tokens, dict(self.usage_by_rung), dict(self.models),
                      error or self.error)


@dataclass
class StreamView:
    """One stream rebuilt from the log.

    Attributes:
        stream: Its id.
        client: The client that sent it.
        opened: Demo time the request was sent.
        tokens: Its tokens, in arrival order.
        closed: How it ended (``None`` while open).
    """

    stream: int
    client: int
    opened: float
    tokens: list[Token] = field(default_factory=list)
    closed: Closed | None = None

    @property
    def ttft_s(self) -> float | None:
        """Time to first token."""
        return self.tokens[0].t - self.opened if self.tokens else None

    @property
    def rung(self) -> str | None:
        """The rung of its latest token."""
        return self.tokens[-1].rung if self.tokens else None

    @property
    def text(self) -> str:
        """Everything received."""
        return "".join(tok.text for tok in self.tokens)

    @property
    def completed(self) -> bool:
        """Closed well (see :attr:`Closed.completed`)."""
        return self.closed is not None and self.closed.completed

    @property
    def shed(self) -> bool:
        """Refused before any token with 429/503: the ladder's designed "try later"."""
        return (self.closed is not None and self.closed.status in (429, 503)
                and not self.tokens)

    @property
    def broken(self) -> bool:
        """Closed, neither completed nor shed."""
        return self.closed is not None and not self.completed and not self.shed

    def per_rung(self) -> dict[str, int]:
        """Tokens received from each rung."""
        out: dict[str, int] = {}
        for tok in self.tokens:
            out[tok.rung] = out.get(tok.rung, 0) + 1
        return out

    def switches(self) -> list[tuple[int, Token, Token]]:
        """``(index of the first token after, last token before, first token after)`` for
        each rung change mid-stream."""
        return [(i + 1, a, b) for i, (a, b) in enumerate(zip(self.tokens, self.tokens[1:],
                                                             strict=False))
                if b.rung != a.rung]

    def max_gap_s(self) -> float:
        """The longest pause between two of its tokens (0 for fewer than two)."""
        return max((b.t - a.t for a, b in zip(self.tokens, self.tokens[1:], strict=False)),
                   default=0.0)

    def usage_matches(self) -> bool | None:
        """The server's per-rung usage equals what was received (``None``: no usage)."""
        if self.closed is None or self.closed.usage_tokens is None:
            return None
        return (self.closed.usage_tokens == len(self.tokens)
                and self.closed.usage_by_rung == self.per_rung())


class StreamLog:
    """The clients' log, read back stream by stream (feed it more as it arrives).

    Example:
        >>> log = StreamLog([Opened(0, 0, 1.0), Token(0, 1.25, "h100", " A")])
        >>> log.streams[0].ttft_s, len(log.open())
        (0.25, 1)
    """

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self.streams: dict[int, StreamView] = {}
        self.tokens: list[Token] = []
        self._seen = 0
        #: Held while adding events; hold it to read the log while another thread adds
        #: (the live view draws from rich's refresh thread).
        self.lock = threading.RLock()
        self.extend(events)

    def extend(self, events: Iterable[Event]) -> StreamLog:
        """Add events (in log order)."""
        with self.lock:
            for e in events:
                self._add(e)
        return self

    def update(self, events: Sequence[Event]) -> StreamLog:
        """Add the events past those already read (``events`` is the whole log so far)."""
        with self.lock:
            for e in events[self._seen:]:
                self._add(e)
        return self

    def _add(self, e: Event) -> None:
        self._seen += 1
        if isinstance(e, Opened):
            self.streams[e.stream] = StreamView(e.stream, e.client, e.t)
        elif isinstance(e, Token):
            self.streams[e.stream].tokens.append(e)
            self.tokens.append(e)
        else:
            self.streams[e.stream].closed = e

    def open(self) -> list[StreamView]:
        """Streams not closed yet."""
        return [s for s in self.streams.values() if s.closed is None]

    def closed(self) -> list[StreamView]:
        """Streams that ended."""
        return [s for s in self.streams.values() if s.closed is not None]

    def first_token_since(self, rung: str, since: float) -> float | None:
        """Demo time of the first token from ``rung`` at or after ``since``."""
        return next((tok.t for tok in self.tokens if tok.rung == rung and tok.t >= since),
                    None)

    def rates(self, now: float, window_s: float = 5.0) -> dict[str, float]:
        """Tokens per second from each rung over the last ``window_s``."""
        out: dict[str, float] = {}
        for tok in reversed(self.tokens):
            if tok.t < now - window_s:
                break
            out[tok.rung] = out.get(tok.rung, 0.0) + 1.0 / window_s
        return out


def as_json(view: StreamView) -> dict[str, Any]:
    """One line of ``streams.jsonl``: the stream, its text and where its rungs changed."""
    c = view.closed
    return {"stream": view.stream, "client": view.client, "t": round(view.opened, 3),
            "end_t": round(c.t, 3) if c else None, "status": c.status if c else None,
            "completed": view.completed, "broken": view.broken, "shed": view.shed,
            "ttft_s": None if view.ttft_s is None else round(view.ttft_s, 4),
            "tokens": len(view.tokens), "tokens_by_rung": view.per_rung(),
            "usage_matches": view.usage_matches(),
            "finish_reason": c.finish_reason if c else None,
            "switches": [{"t": round(b.t, 3), "from": a.rung, "to": b.rung, "at_token": i,
                          "gap_s": round(b.t - a.t, 4), "told": b.switched_from == a.rung,
                          "reason": b.reason}
                         for i, a, b in view.switches()],
            "models": c.models if c else {}, "error": c.error if c else "",
            "text": view.text}
