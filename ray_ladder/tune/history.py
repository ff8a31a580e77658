"""Rung history of a trial: where it ran, how long, at what cost (pure, no Ray import)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class RungSpan:
    """One stretch of a trial on one rung (one trial actor).

    Attributes:
        rung: Rung name.
        start: Wall-clock time (``time.time()``) the trial actor started on the rung.
        end: When it left the rung (``None`` while it still runs there).
        ended_by: Why it left: ``"node lost"``, ``"trial failed"``, ``"climbed to <rung>"``,
            ``"completed"``, ``"stopped"``, ``"paused"``; ``None`` while running.
        node_id: Ray node id it ran on.
        cost_per_hour: The rung's ``cost_per_hour``.
        first_iteration: First Tune ``training_iteration`` reported on this span.
        last_iteration: Last one reported.

    Example:
        >>> RungSpan("a100", 0.0, 3600.0, "completed", "n1", 4.1, 1, 10).cost
        4.1
    """

    rung: str
    start: float
    end: float | None
    ended_by: str | None
    node_id: str | None
    cost_per_hour: float
    first_iteration: int | None = None
    last_iteration: int | None = None

    def seconds(self, now: float | None = None) -> float:
        """Time on the rung (up to ``now`` for an open span)."""
        end = self.end if self.end is not None else (now if now is not None else self.start)
        return max(0.0, end - self.start)

    @property
    def cost(self) -> float:
        """``cost_per_hour`` x hours on the rung (0 for an open span: see :meth:`to_dict`)."""
        return self.cost_per_hour * self.seconds() / 3600.0

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        """JSON-ready dict, with ``seconds`` and ``cost`` (open spans counted up to ``now``)."""
        d = asdict(self)
        seconds = self.seconds(now)
        d["seconds"] = seconds
        d["cost"] = self.cost_per_hour * seconds / 3600.0
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RungSpan:
        """Inverse of :meth:`to_dict` (extra keys ignored)."""
        fields = cls.__dataclass_fields__
        return cls(**{k: d[k] for k in fields if k in d})


def per_rung(spans: Iterable[RungSpan], now: float | None = None) -> dict[str, dict[str, float]]:
    """Seconds and cost per rung, summed over spans (in first-use order).

    Example:
        >>> per_rung([RungSpan("h100", 0, 1800, "node lost", None, 12.0)])
        {'h100': {'seconds': 1800.0, 'cost': 6.0}}
    """
    out: dict[str, dict[str, float]] = {}
    for span in spans:
        seconds = span.seconds(now)
        slot = out.setdefault(span.rung, {"seconds": 0.0, "cost": 0.0})
        slot["seconds"] += seconds
        slot["cost"] += span.cost_per_hour * seconds / 3600.0
    return out


def summary(spans: list[RungSpan], now: float | None = None) -> dict[str, Any]:
    """The ``history`` / ``per_rung`` / ``cost`` / ``moves`` block of a trial's report.

    ``history`` maps ``"0"``, ``"1"``... to spans (see :func:`rung_history` for a list).
    """
    totals = per_rung(spans, now)
    return {
        # A dict, not a list: Tune's loggers flatten dicts into scalar columns.
        "history": {str(i): s.to_dict(now) for i, s in enumerate(spans)},
        "per_rung": totals,
        "seconds": sum(t["seconds"] for t in totals.values()),
        "cost": sum(t["cost"] for t in totals.values()),
        "moves": sum(1 for a, b in zip(spans, spans[1:], strict=False) if a.rung != b.rung),
    }


def rung_history(results: Any) -> Any:
    """The rungs a trial ran on, from Tune results.

    Args:
        results: A ``ray.tune.Result`` (or its ``metrics`` dict), or a ``ResultGrid``.

    Returns:
        ``list[RungSpan]`` for one result; ``{trial_id: list[RungSpan]}`` for a grid.

    Example:
        >>> [s.rung for s in rung_history(result_grid[0])]  # doctest: +SKIP
        ['h100', 'a100', 'h100']
    """
    if isinstance(results, Mapping):
        history = (results.get("ladder") or {}).get("history") or []
        if isinstance(history, Mapping):
            history = [history[k] for k in sorted(history, key=int)]
        return [RungSpan.from_dict(d) for d in history]
    metrics = getattr(results, "metrics", None)
    if isinstance(metrics, Mapping):
        return rung_history(metrics)
    out: dict[str, list[RungSpan]] = {}
    for result in results:
        m = getattr(result, "metrics", None) or {}
        out[m.get("trial_id", str(len(out)))] = rung_history(m)
    return out
