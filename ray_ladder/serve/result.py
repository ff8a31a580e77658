"""LadderResult: what a DeploymentHandle caller gets back from the ladder router."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LadderResult:
    """One answer of the ladder app, and the rung that produced it.

    Attributes:
        value: What the rung class returned (for a cache answer: what the producing
            compute rung returned earlier).
        rung: The rung that answered (for a cache answer: the cache rung's own name).
        stale: True when the answer came from the cache rung.
        degraded_s: Seconds the ladder has been below its best eligible rung, as of its
            last observation (0 when on the best).
        source_rung: For a cache answer, the compute rung that produced it; else ``None``.

    Example:
        >>> result = handle.predict.remote({"x": 1}).result()  # doctest: +SKIP
        >>> result.rung, result.stale  # doctest: +SKIP
        ('h100', False)
    """

    value: Any
    rung: str
    stale: bool = False
    degraded_s: float = 0.0
    source_rung: str | None = None
