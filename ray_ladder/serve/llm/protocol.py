"""The LLM rung protocol: what a rung that generates text is given and what it yields.

A rung class is an *LLM rung* when it defines ``generate(self, request)`` as an async
generator of text pieces: a ``str`` counts as one token; a :class:`Tokens` says how many
engine tokens its text is (a real engine puts several in one chunk, and a partial UTF-8
character in none), with their ids when the rung knows them::

    class MyModel:
        def __init__(self, rung: RungContext, **kwargs): ...
        async def generate(self, request: GenerationRequest) -> AsyncIterator[str]:
            async for piece in engine.stream(request.context_text(), request.max_tokens):
                yield piece

The router gives a rung the conversation *and* the text already sent to the client
(``continuation``): a rung that takes over a stream after the one before it was lost
continues that text, so the client sees one answer (docs/llm.md).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "developer", "tool"]
#: How the router counts prompt tokens for ``usage`` (rungs count their own pieces).
_WORD = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Tokens of ``text`` as the router counts them: words and punctuation marks.

    Example:
        >>> count_tokens("Hello, world!")
        4
    """
    return len(_WORD.findall(text))


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message (text content only).

    Example:
        >>> Message("user", "hi").role
        'user'
    """

    role: Role
    content: str


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """What an LLM rung is asked to generate.

    Attributes:
        prompt: The prompt of a completion request (``None`` for chat).
        messages: The conversation of a chat request (empty for completions).
        continuation: Text of the answer already sent to the client: generate what comes
            after it (empty unless the stream moved here from a lost rung).
        continuation_ids: The token ids of ``continuation`` in ``tokenizer``'s vocabulary,
            when one tokenizer made all of it (a rung with the same tokenizer continues
            from them: the text re-tokenized could split a word differently).
        tokenizer: Who made ``continuation_ids`` (:attr:`Tokens.tokenizer`).
        max_tokens: Pieces still allowed (the router stops the stream there too).
        temperature: Sampling temperature (0: greedy).
        top_p: Nucleus sampling mass.
        seed: Sampling seed, when the client gave one.
        stop: Stop sequences (the router also enforces them across rungs).
        ignore_eos: Generate ``max_tokens`` past the model's end of text (vLLM's
            extension, for load generators; rungs that cannot may end sooner).

    Example:
        >>> GenerationRequest(prompt="Once", max_tokens=5).context_text()
        'Once'
    """

    prompt: str | None = None
    messages: tuple[Message, ...] = ()
    continuation: str = ""
    continuation_ids: tuple[int, ...] = ()
    tokenizer: str | None = None
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)
    ignore_eos: bool = False

    @property
    def is_chat(self) -> bool:
        """True for a chat request."""
        return self.prompt is None

    def context_text(self) -> str:
        """A plain-text rendering of everything before the next piece: the prompt (or each
        message as ``role: content`` then ``assistant:``) followed by ``continuation``.

        Rungs with a chat template of their own render ``messages`` themselves and append
        ``continuation`` as the start of the assistant's turn.
        """
        if self.prompt is not None:
            return self.prompt + self.continuation
        lines = [f"{m.role}: {m.content}" for m in self.messages]
        return "\n".join([*lines, "assistant: " + self.continuation])

    def prompt_tokens(self) -> int:
        """Prompt tokens for ``usage`` (:func:`count_tokens` of the prompt or messages)."""
        if self.prompt is not None:
            return count_tokens(self.prompt)
        return sum(count_tokens(m.content) for m in self.messages)

    def continuing(self, sent: str, used_tokens: int, ids: tuple[int, ...] = (),
                   tokenizer: str | None = None) -> GenerationRequest:
        """The request for the next rung of a stream that already sent ``sent`` (made of
        ``used_tokens`` tokens; ``ids`` by ``tokenizer``, when one tokenizer made it all)."""
        fresh = not self.continuation
        same = bool(ids) and tokenizer is not None and (fresh or (
            tokenizer == self.tokenizer and bool(self.continuation_ids)))
        return replace(self, continuation=self.continuation + sent,
                       continuation_ids=(self.continuation_ids + ids) if same else (),
                       tokenizer=tokenizer if same else None,
                       max_tokens=max(0, self.max_tokens - used_tokens))

    def to_dict(self) -> dict[str, Any]:
        """Plain data, for the call from the router to the rung's replica."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GenerationRequest:
        """The inverse of :meth:`to_dict`."""
        messages = tuple(Message(m["role"], m["content"]) for m in data.get("messages") or ())
        return cls(**{**data, "messages": messages, "stop": tuple(data.get("stop") or ()),
                      "continuation_ids": tuple(data.get("continuation_ids") or ())})

    @classmethod
    def from_payload(cls, payload: Any) -> GenerationRequest:
        """A request from the JSON route's payload: ``{"prompt": ..., "max_tokens": ...}``
        or ``{"messages": [...]}``.

        Raises:
            ValueError: the payload is neither (the router answers 400).
        """
        if not isinstance(payload, dict):
            raise ValueError("an LLM rung takes a JSON object with 'prompt' or 'messages'")
        if isinstance(payload.get("prompt"), str):
            return cls(prompt=payload["prompt"], max_tokens=_int(payload, "max_tokens", 256))
        messages = payload.get("messages")
        if isinstance(messages, list) and messages and all(
                isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
            return cls(messages=tuple(Message(str(m.get("role", "user")), m["content"])  # type: ignore[arg-type]
                                      for m in messages),
                       max_tokens=_int(payload, "max_tokens", 256))
        raise ValueError("an LLM rung takes a JSON object with 'prompt' (a string) or "
                         "'messages' (a list of {role, content})")


@dataclass(frozen=True, slots=True)
class Tokens:
    """A piece of text and the engine tokens that made it.

    Attributes:
        text: The text (empty while the engine holds part of a character back).
        count: Engine tokens behind it.
        ids: Their ids, when the rung knows them (else empty).
        tokenizer: Whose ids they are: a name equal for rungs that share a tokenizer
            (``OpenAIBackendRung``: ``params.tokenizer``, else the served model's root).
        finish_reason: The engine's, on the last piece (``stop``, ``length``).
        prompt_tokens: The engine's count of the prompt, on the first piece.

    Example:
        >>> Tokens.of("hi").count, Tokens.of({"text": "hi", "count": 2}).count
        (1, 2)
    """

    text: str
    count: int = 1
    ids: tuple[int, ...] = ()
    tokenizer: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None

    def wire(self) -> dict[str, Any]:
        """Plain data for the call from the rung's replica to the router."""
        return {k: v for k, v in asdict(self).items() if v not in (None, ())}

    @classmethod
    def of(cls, piece: Any) -> Tokens:
        """A piece as a rung yields it (``str``, :class:`Tokens`) or as the router receives
        it (``str``, :meth:`wire`'s dict)."""
        if isinstance(piece, Tokens):
            return piece
        if isinstance(piece, dict):
            return cls(**{**piece, "ids": tuple(piece.get("ids") or ())})
        return cls(str(piece))


def _int(payload: dict[str, Any], key: str, default: int) -> int:
    value = payload.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{key} must be a positive integer, got {value!r}")
    return value


def is_llm_class(cls: type) -> bool:
    """Whether ``cls`` implements the LLM rung protocol (a ``generate`` method)."""
    return callable(getattr(cls, "generate", None))


def first_stop(text: str, stop: tuple[str, ...], start: int = 0) -> int | None:
    """Index of the earliest stop sequence in ``text`` that ends at or after ``start``
    (only new text is searched, plus the overlap a stop may straddle), or ``None``.

    Example:
        >>> first_stop("one two. three", (".",))
        7
    """
    best: int | None = None
    for s in stop:
        if not s:
            continue
        i = text.find(s, max(0, start - len(s) + 1))
        if i >= 0 and (best is None or i < best):
            best = i
    return best
