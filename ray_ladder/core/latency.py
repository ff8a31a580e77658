"""Latency targets of a serving ladder (the ``policy.targets`` block of a ladder file).

A target is what a request may take on a rung before the rung is the wrong place for it:
the router sends a request to the best rung expected to answer within its target and
spills the rest below (docs/serve.md, "Targets, spill and slow rungs").
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


class LatencyTargets(BaseModel):
    """Latency targets of a ladder's requests; each one is optional.

    Example:
        >>> LatencyTargets(answer_s=1.0, ttft_s=0.5)  # doctest: +NORMALIZE_WHITESPACE
        LatencyTargets(answer_s=1.0, ttft_s=0.5, inter_token_s=None, slow_after_s=10.0,
                       late_moves=1)
    """

    model_config = _STRICT

    answer_s: float | None = Field(
        None, gt=0, description="Seconds for a whole answer (POST / and non-streaming "
        "/v1 requests), from arrival at the router.")
    ttft_s: float | None = Field(
        None, gt=0, description="Seconds to a stream's first token, from arrival.")
    inter_token_s: float | None = Field(
        None, gt=0, description="Longest gap between two pieces of a stream; a later "
        "piece may move the stream to another rung (late_moves).")
    slow_after_s: float = Field(
        10.0, gt=0, description="A rung whose replicas (queue left out) break the "
        "ladder's target this long without a break is 'slow': the ladder falls off it "
        "and retries it after this long, doubling up to 8x while it stays slow.")
    late_moves: int = Field(
        1, ge=0, description="Times one stream may move to another rung because its "
        "next piece was late (moves for a lost rung are not counted).")

    def for_kind(self, kind: str) -> float | None:
        """The target of a request kind: ``answer`` (a whole answer) or ``first`` (a
        stream's first token).

        Example:
            >>> LatencyTargets(answer_s=2.0).for_kind("first") is None
            True
        """
        return self.answer_s if kind == "answer" else self.ttft_s

    def overridden(self, other: LatencyTargets | None) -> LatencyTargets:
        """This one with the fields ``other`` sets (an operator's app or route override:
        it may widen a target as well as narrow it).

        Example:
            >>> LatencyTargets(answer_s=1.0).overridden(LatencyTargets(answer_s=30.0)).answer_s
            30.0
        """
        if other is None:
            return self
        return self.model_copy(update={k: getattr(other, k) for k in other.model_fields_set})

    def narrowed(self, other: LatencyTargets | None) -> LatencyTargets:
        """Each target the smaller of this one's and ``other``'s (an operator's route
        override narrows the ladder's; a request narrows its route's).

        Example:
            >>> LatencyTargets(answer_s=2.0).narrowed(LatencyTargets(answer_s=5.0,
            ...                                                    ttft_s=0.4)).answer_s
            2.0
        """
        if other is None:
            return self
        return self.model_copy(update={
            k: _smaller(getattr(self, k), getattr(other, k))
            for k in ("answer_s", "ttft_s", "inter_token_s")})

    def spent(self, seconds: float) -> LatencyTargets:
        """What is left of the first-piece and whole-answer targets ``seconds`` after the
        request arrived (its body read and checked before the walk began); the
        inter-token target is a gap, not a deadline, and stays.

        Example:
            >>> LatencyTargets(answer_s=2.0, ttft_s=0.5, inter_token_s=0.3).spent(0.1)
            ... # doctest: +NORMALIZE_WHITESPACE
            LatencyTargets(answer_s=1.9, ttft_s=0.4, inter_token_s=0.3, slow_after_s=10.0,
                           late_moves=1)
        """
        if seconds <= 0:
            return self
        return self.model_copy(update={
            k: None if getattr(self, k) is None else max(1e-3, getattr(self, k) - seconds)
            for k in ("answer_s", "ttft_s")})


def _smaller(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    return a if b is None else min(a, b)
