"""OpenAI-compatible answers: whole responses and server-sent-event chunks (pure).

Every answer names what produced it: ``model`` is the real model of the rung that
produced the text (its ``params["model"]``), and the extension field ``ladder`` says which
rung, how long the ladder has been degraded and, on the chunk where a stream moved to
another rung, where it came from (docs/llm.md "Extension fields").
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ray_ladder.core.spec import Ladder
from ray_ladder.serve.llm.protocol import Tokens

DONE = b"data: [DONE]\n\n"


def rung_model(ladder: Ladder, rung: str) -> str:
    """The model a rung serves: ``params["model"]``, else the rung's name."""
    return str(ladder.rung(rung).params.get("model") or rung)


@dataclass
class StreamRecord:
    """What one answer is made of, across rungs (filled by the stream driver).

    Attributes:
        text: Everything sent so far.
        tokens: Rung -> engine tokens it produced (a ``str`` piece is one).
        switches: ``{"from", "to", "at_token", "reason"}`` for each move to another rung.
        finish_reason: ``stop`` or ``length`` once finished.
        ids: The token ids of ``text`` while one tokenizer made all of it (else empty).
        tokenizer: Whose ids they are (``None``: unknown or several tokenizers).
        prompt_tokens: The engine's count of the prompt, when the rung that started the
            answer reported one.
        rung: The rung that finished the answer (set when it ends).
    """

    text: str = ""
    tokens: dict[str, int] = field(default_factory=dict)
    switches: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    ids: list[int] = field(default_factory=list)
    tokenizer: str | None = None
    prompt_tokens: int | None = None
    rung: str | None = None
    _ids_known: bool = True
    _held: list[Tokens] = field(default_factory=list)

    @property
    def completion_tokens(self) -> int:
        """Engine tokens produced by every rung together (sent or held back)."""
        return sum(self.tokens.values())

    def take(self, rung: str, piece: Tokens) -> str:
        """Count ``piece`` of ``rung``; the text to send now. Tokens without text (a
        character the engine has not finished) are held until text comes, so that what a
        lost rung leaves is always whole tokens behind whole text (:meth:`drop_held`)."""
        if piece.prompt_tokens is not None and not self.text:
            self.prompt_tokens = piece.prompt_tokens
        self._held.append(piece)
        if not piece.text and piece.finish_reason is None:
            return ""
        self._commit(rung)
        return piece.text

    def finish(self, rung: str) -> None:
        """The rung's stream ended: its held tokens count (their text never came)."""
        self._commit(rung)

    def drop_held(self) -> None:
        """The rung was lost: held tokens (no text sent for them) are regenerated below."""
        self._held.clear()

    def _commit(self, rung: str) -> None:
        for piece in self._held:
            self.tokens[rung] = self.tokens.get(rung, 0) + piece.count
            if not self._ids_known:
                continue
            if len(piece.ids) != piece.count or (self.ids and piece.tokenizer != self.tokenizer):
                self._ids_known, self.ids, self.tokenizer = False, [], None
                continue
            self.ids.extend(piece.ids)
            self.tokenizer = piece.tokenizer if piece.ids else self.tokenizer
        self._held.clear()

    def continued_ids(self) -> tuple[tuple[int, ...], str | None]:
        """The ids of ``text`` and their tokenizer, for the next rung (``((), None)`` when
        unknown)."""
        if not self._ids_known or self.tokenizer is None:
            return (), None
        return tuple(self.ids), self.tokenizer


class Answer:
    """Builds the JSON of one answer of a chat or completion request.

    Args:
        kind: ``"chat"`` or ``"completion"``.
        ladder: The ladder (for rung models).
        prompt_tokens: Prompt tokens (router's count).

    Example:
        >>> a = Answer("chat", ladder, 3)  # doctest: +SKIP
        >>> a.chunk("h100", "Hello", degraded_s=0.0)  # doctest: +SKIP
    """

    def __init__(self, kind: Literal["chat", "completion"], ladder: Ladder,
                 prompt_tokens: int) -> None:
        self.kind = kind
        self.ladder = ladder
        self.prompt_tokens = prompt_tokens
        prefix = "chatcmpl" if kind == "chat" else "cmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self._role_sent = False

    # --- pieces ------------------------------------------------------------------------

    def _choice(self, text: str | None, finish: str | None) -> dict[str, Any]:
        if self.kind == "completion":
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        delta: dict[str, Any] = {}
        if not self._role_sent:
            delta["role"] = "assistant"
            self._role_sent = True
        if text is not None:
            delta["content"] = text
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    def _envelope(self, rung: str | None, choices: list[dict[str, Any]],
                  ladder: Mapping[str, Any]) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {"id": self.id, "object": obj, "created": self.created,
                "model": rung_model(self.ladder, rung) if rung else self.ladder.name,
                "choices": choices, "ladder": dict(ladder)}

    def chunk(self, rung: str, text: str, *, degraded_s: float,
              switched_from: str | None = None, reason: str | None = None) -> bytes:
        """One SSE event carrying ``text`` from ``rung``."""
        ext: dict[str, Any] = {"rung": rung, "degraded_s": round(degraded_s, 3)}
        if switched_from is not None:
            ext["switched_from"] = switched_from
            ext["switch_reason"] = reason
        return sse(self._envelope(rung, [self._choice(text, None)], ext))

    def final(self, rung: str, record: StreamRecord, *, degraded_s: float) -> bytes:
        """The last content event: no text, the finish reason."""
        ext = {"rung": rung, "degraded_s": round(degraded_s, 3)}
        return sse(self._envelope(rung, [self._choice(None, record.finish_reason)], ext))

    def usage_chunk(self, rung: str, record: StreamRecord) -> bytes:
        """``stream_options.include_usage``: empty choices, the usage."""
        return sse(self._envelope(rung, [], self._ladder_block(rung, record, 0.0))
                   | {"usage": self.usage(record)})

    def error_chunk(self, message: str, *, type: str = "ladder_exhausted") -> bytes:
        """An error event inside a stream that already sent text (then ``[DONE]``)."""
        return sse({"error": {"message": message, "type": type, "param": None,
                              "code": type}})

    # --- whole answers -----------------------------------------------------------------

    def usage(self, record: StreamRecord) -> dict[str, Any]:
        """OpenAI's usage object."""
        done = record.completion_tokens
        prompt = self.prompt_tokens if record.prompt_tokens is None else record.prompt_tokens
        return {"prompt_tokens": prompt, "completion_tokens": done,
                "total_tokens": prompt + done}

    def _ladder_block(self, rung: str, record: StreamRecord,
                      degraded_s: float) -> dict[str, Any]:
        return {"rung": rung, "degraded_s": round(degraded_s, 3),
                "tokens_by_rung": [{"rung": r, "model": rung_model(self.ladder, r),
                                    "completion_tokens": n} for r, n in record.tokens.items()],
                "switches": list(record.switches)}

    def whole(self, rung: str, record: StreamRecord, *, degraded_s: float) -> dict[str, Any]:
        """The JSON of a non-streamed answer."""
        if self.kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": record.text},
                      "logprobs": None, "finish_reason": record.finish_reason}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": record.text, "logprobs": None,
                      "finish_reason": record.finish_reason}
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created,
                "model": rung_model(self.ladder, rung), "choices": [choice],
                "usage": self.usage(record),
                "ladder": self._ladder_block(rung, record, degraded_s)}


def sse(data: Mapping[str, Any]) -> bytes:
    """One server-sent event: ``data: <json>`` and a blank line.

    Example:
        >>> sse({"a": 1})
        b'data: {"a": 1}\\n\\n'
    """
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def model_object(ladder: Ladder) -> dict[str, Any]:
    """``GET /v1/models/{id}``: the ladder as the one model; its rungs are listed in the
    ``ladder`` extension field (they are not requestable on their own)."""
    rungs = [{"rung": r.name, "kind": r.kind, "model": rung_model(ladder, r.name),
              "quality": r.quality, "tags": dict(r.tags)} for r in ladder.rungs]
    return {"id": ladder.name, "object": "model", "created": 0, "owned_by": "ray-ladder",
            "ladder": {"rungs": rungs}}


def models_list(ladder: Ladder) -> dict[str, Any]:
    """``GET /v1/models``: the list of the one model (:func:`model_object`)."""
    return {"object": "list", "data": [model_object(ladder)]}
