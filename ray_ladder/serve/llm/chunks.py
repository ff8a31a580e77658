"""Reading an OpenAI-compatible server's stream as engine tokens (pure).

A real engine puts several tokens in one chunk and none in a chunk that holds part of a
character back, so a chunk is not a token. vLLM says what each chunk is when asked
(``return_token_ids`` and ``stream_options.continuous_usage_stats``): its ``token_ids``
and the running ``usage.completion_tokens``. :class:`ChunkReader` turns each chunk into a
:class:`~ray_ladder.serve.llm.protocol.Tokens` from those, and checks that the stream
ended the way a finished answer ends (``data: [DONE]`` or a ``finish_reason``): a stream
that stops short of both was cut, which is the rung's failure, never a finished answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ray_ladder.core.exceptions import RungUnavailableError
from ray_ladder.serve.llm.protocol import Tokens


class TruncatedStream(RungUnavailableError):
    """The backend's stream ended before its answer did (no ``[DONE]``, no
    ``finish_reason``), or a line of it was not an OpenAI chunk: the rung's fault."""


@dataclass
class ChunkReader:
    """Reads one stream's ``data:`` lines into :class:`Tokens`.

    Args:
        source: Named in errors (the backend's URL).
        tokenizer: Whose ids the chunks carry (:attr:`Tokens.tokenizer`).
        usage_counts: Trust ``usage.completion_tokens`` (the server was asked for
            continuous usage) over counting a chunk as one token.

    Example:
        >>> r = ChunkReader("x", "tok", usage_counts=True)
        >>> t = r.line('data: {"choices": [{"text": "ab", "token_ids": [1, 2]}], '
        ...            '"usage": {"prompt_tokens": 3, "completion_tokens": 2}}')
        >>> t.text, t.count, t.ids, t.prompt_tokens
        ('ab', 2, (1, 2), 3)
    """

    source: str
    tokenizer: str | None = None
    usage_counts: bool = False
    counted: int = 0
    finished: bool = False
    done: bool = False
    #: A chunk with a choice came (an answer, even an empty one, has one).
    answered: bool = False

    def line(self, line: str) -> Tokens | None:
        """The tokens of one line (``None`` for a line that carries none)."""
        if not line.startswith("data:"):
            return None
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
            return None
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise TruncatedStream(f"{self.source}: a line of the stream is not JSON: "
                                  f"{data[:80]!r}") from None
        if not isinstance(chunk, dict):
            raise TruncatedStream(f"{self.source}: a chunk is not an object: {data[:80]!r}")
        return self.chunk(chunk)

    def chunk(self, chunk: dict[str, Any]) -> Tokens | None:
        """The tokens of one parsed chunk."""
        if "error" in chunk:
            raise RungUnavailableError(f"the model's stream failed: {chunk['error']}")
        choices = chunk.get("choices") or []
        self.answered = self.answered or bool(choices)
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        text = _text(choice)
        ids = tuple(int(i) for i in choice.get("token_ids") or ())
        finish = choice.get("finish_reason")
        if finish:
            self.finished = True
        usage = chunk.get("usage") if isinstance(chunk.get("usage"), dict) else None
        count = self._count(text, ids, usage)
        prompt = usage.get("prompt_tokens") if usage is not None else None
        if not text and not count and not finish and prompt is None:
            return None
        return Tokens(text, count, ids, self.tokenizer if ids else None,
                      str(finish) if finish else None,
                      int(prompt) if isinstance(prompt, int) else None)

    def _count(self, text: str, ids: tuple[int, ...], usage: dict[str, Any] | None) -> int:
        total = usage.get("completion_tokens") if usage is not None else None
        if self.usage_counts and isinstance(total, int):
            count, self.counted = max(0, total - self.counted), max(total, self.counted)
            return count
        count = len(ids) if ids else int(bool(text))
        self.counted += count
        return count

    def end(self) -> None:
        """The body ended: raise :class:`TruncatedStream` unless the answer had, or when
        it held no choice at all (an empty answer: ``[DONE]`` alone is no answer)."""
        if not (self.done or self.finished):
            raise TruncatedStream(f"{self.source}: the stream ended without [DONE] or a "
                                  f"finish_reason after {self.counted} token(s)")
        if not self.answered:
            raise TruncatedStream(f"{self.source}: an empty answer (no choice in the "
                                  "stream)")


def _text(choice: dict[str, Any]) -> str:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return str(delta.get("content") or "")
    return str(choice.get("text") or "")
