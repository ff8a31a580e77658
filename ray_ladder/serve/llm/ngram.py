"""Small word n-gram language models trained at start on text Python ships (pure).

No weights are downloaded: the corpus is the docstrings of the standard library, read
with ``ast`` (nothing is imported). One model size per rung: a higher order over more
text on the better rungs. Each model's quality is its next-token accuracy on held-out
docstrings, reported per rung (docs/llm.md "Models that run here").
"""

from __future__ import annotations

import ast
import random
import re
import sysconfig
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_']*|\d+|[^\sA-Za-z0-9_]")
_NO_SPACE_BEFORE = set(".,:;!?)]}'\"")
_NO_SPACE_AFTER = set("([{")


def tokenize(text: str) -> list[str]:
    """Words, numbers and single punctuation marks.

    Example:
        >>> tokenize("Return x (the value).")
        ['Return', 'x', '(', 'the', 'value', ')', '.']
    """
    return _TOKEN.findall(text)


def piece(token: str, previous: str | None) -> str:
    """The text a token adds after ``previous``: a space before words, none before
    closing punctuation or after an opening bracket."""
    if previous is None or token[0] in _NO_SPACE_BEFORE or previous[-1] in _NO_SPACE_AFTER:
        return token
    return " " + token


def stdlib_docstrings(max_files: int = 160) -> list[str]:
    """Docstrings of the first ``max_files`` standard-library modules (sorted by name, so
    every process reads the same corpus), one string per module, class or function."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))[:max_files]
    out: list[str] = []
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                          | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 40:
                    out.append(" ".join(doc.split()))
    return out


@dataclass(frozen=True)
class Corpus:
    """Training and held-out texts (every ``holdout_every``-th docstring is held out)."""

    train: tuple[str, ...]
    heldout: tuple[str, ...]

    @classmethod
    def stdlib(cls, max_files: int = 160, holdout_every: int = 10) -> Corpus:
        """The standard library's docstrings, split deterministically."""
        docs = stdlib_docstrings(max_files)
        return cls(tuple(d for i, d in enumerate(docs) if i % holdout_every),
                   tuple(d for i, d in enumerate(docs) if not i % holdout_every))


class NGramLM:
    """A word n-gram model with back-off to shorter contexts.

    Args:
        order: Tokens of context plus one (2: bigram).

    Example:
        >>> lm = NGramLM.train(["the cat sat on the mat", "the cat ran"], order=2)
        >>> "".join(lm.generate("the", max_tokens=2, temperature=0))
        ' cat sat'
    """

    def __init__(self, order: int) -> None:
        if order < 1:
            raise ValueError(f"order must be >= 1, got {order}")
        self.order = order
        self.counts: dict[tuple[str, ...], Counter[str]] = {}

    @classmethod
    def train(cls, texts: Sequence[str], order: int) -> NGramLM:
        """Count every n-gram of ``texts`` up to ``order``."""
        lm = cls(order)
        for text in texts:
            tokens = tokenize(text)
            for i, token in enumerate(tokens):
                for n in range(order):
                    if i - n < 0:
                        break
                    context = tuple(tokens[i - n:i])
                    lm.counts.setdefault(context, Counter())[token] += 1
        return lm

    def _dist(self, history: Sequence[str]) -> Counter[str]:
        for n in range(min(self.order - 1, len(history)), -1, -1):
            dist = self.counts.get(tuple(history[len(history) - n:]))
            if dist:
                return dist
        return Counter({".": 1})

    def next_token(self, history: Sequence[str], temperature: float = 0.0,
                   rng: random.Random | None = None) -> str:
        """The next token: the most frequent one (``temperature`` 0), else sampled."""
        dist = self._dist(history)
        if temperature <= 0 or rng is None:
            return max(dist.items(), key=lambda kv: (kv[1], kv[0]))[0]
        tokens = sorted(dist)
        weights = [dist[t] ** (1.0 / temperature) for t in tokens]
        return rng.choices(tokens, weights)[0]

    def generate(self, context: str, max_tokens: int, temperature: float = 0.0,
                 seed: int | None = None) -> Iterator[str]:
        """Text pieces continuing ``context`` (each the text of one token)."""
        history = tokenize(context)
        rng = random.Random(seed if seed is not None else len(history))
        previous = history[-1] if history else None
        for _ in range(max_tokens):
            token = self.next_token(history, temperature, rng)
            yield piece(token, previous)
            history.append(token)
            previous = token

    def accuracy(self, texts: Sequence[str], limit: int = 20_000) -> float:
        """Next-token top-1 accuracy over ``texts`` (at most ``limit`` predictions)."""
        hits = total = 0
        for text in texts:
            tokens = tokenize(text)
            for i in range(1, len(tokens)):
                hits += self.next_token(tokens[max(0, i - self.order + 1):i]) == tokens[i]
                total += 1
                if total >= limit:
                    return hits / total
        return hits / total if total else 0.0
