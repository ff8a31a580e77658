"""LLM rung classes that run on any machine: n-gram models and an exact counter.

``NGramRung`` trains a word n-gram model on the standard library's docstrings when its
replica starts (under a second) and streams it at the token rate of the accelerator it
stands in for. ``CounterRung`` continues a count (`` 1 2 3 ...``) from whatever text it is
given, so a test can check that a stream that moved between rungs has no repeated and no
missing piece.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from functools import lru_cache

from ray_ladder.core.context import RungContext
from ray_ladder.serve.llm.ngram import Corpus, NGramLM
from ray_ladder.serve.llm.protocol import GenerationRequest

_LAST_INT = re.compile(r"(\d+)\D*$")


@lru_cache(maxsize=4)
def _corpus(max_files: int) -> Corpus:
    return Corpus.stdlib(max_files)


class NGramRung:
    """A word n-gram model as an LLM rung.

    Args:
        rung: The rung (``params``: ``order``, ``train_fraction``, ``tokens_per_s``,
            ``corpus_files``; keyword arguments override them).
        order: n-gram order (higher: better model).
        train_fraction: Share of the training docstrings used.
        tokens_per_s: Streaming pace (0: as fast as it computes).
        corpus_files: Standard-library modules read for the corpus.

    Example:
        >>> rung = NGramRung(RungContext(name="cpu", index=2, ladder="llm"), order=2)
        ... # doctest: +SKIP
    """

    def __init__(self, rung: RungContext, order: int | None = None,
                 train_fraction: float | None = None, tokens_per_s: float | None = None,
                 corpus_files: int | None = None) -> None:
        params = rung.params
        self.rung = rung
        self.order = int(order if order is not None else params.get("order", 3))
        fraction = float(train_fraction if train_fraction is not None
                         else params.get("train_fraction", 1.0))
        self.tokens_per_s = float(tokens_per_s if tokens_per_s is not None
                                  else params.get("tokens_per_s", 0.0))
        corpus = _corpus(int(corpus_files if corpus_files is not None
                             else params.get("corpus_files", 160)))
        texts = corpus.train[:max(1, int(len(corpus.train) * fraction))]
        self.lm = NGramLM.train(texts, self.order)
        self.heldout = corpus.heldout

    def quality(self) -> float:
        """Next-token accuracy on the held-out docstrings."""
        return self.lm.accuracy(self.heldout)

    async def generate(self, request: GenerationRequest) -> AsyncIterator[str]:
        """Stream pieces continuing the request's context at ``tokens_per_s``."""
        delay = 1.0 / self.tokens_per_s if self.tokens_per_s > 0 else 0.0
        for text in self.lm.generate(request.context_text(), request.max_tokens,
                                     request.temperature, request.seed):
            if delay:
                await asyncio.sleep(delay)  # the accelerator's pace
            yield text


class CounterRung:
    """Counts on from the last number in its context: `` 4 5 6`` after ``"1 2 3"``.

    Deterministic and exact: any repeated or missing piece after a move between rungs
    shows as a gap or a repeat in the count.

    Args:
        rung: The rung (``params.tokens_per_s`` paces it).
        tokens_per_s: Pieces per second (0: as fast as possible).
    """

    def __init__(self, rung: RungContext, tokens_per_s: float | None = None) -> None:
        self.rung = rung
        self.tokens_per_s = float(tokens_per_s if tokens_per_s is not None
                                  else rung.params.get("tokens_per_s", 0.0))

    async def generate(self, request: GenerationRequest) -> AsyncIterator[str]:
        """`` n+1``, `` n+2``, ... where ``n`` is the last number of the context (or 0)."""
        match = _LAST_INT.search(request.context_text())
        n = int(match.group(1)) if match else 0
        delay = 1.0 / self.tokens_per_s if self.tokens_per_s > 0 else 0.0
        for i in range(1, request.max_tokens + 1):
            if delay:
                await asyncio.sleep(delay)
            yield f" {n + i}"
