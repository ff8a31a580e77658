"""Where a Train run ran (pure): one span per worker group, time and cost per rung, the path."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class TrainSpan:
    """One worker group of a run on one rung, from its start to when it left.

    Attributes:
        rung: Rung name.
        start: Wall-clock time (``time.time()``) the group started (workers up, training
            function launched).
        end: When it left (``None`` while it runs).
        ended_by: ``"node lost"``, ``"workers failed"``, ``"preempted"``,
            ``"climbed to <rung>"``, ``"completed"``, ``"failed"`` or ``"aborted"``;
            ``None`` while it runs.
        workers: Workers in the group.
        node_ids: Nodes its workers ran on, by world rank.
        cost_per_hour: The rung's ``cost_per_hour`` (the whole gang's cost per hour).

    Example:
        >>> TrainSpan("a100x8", 0.0, 1800.0, "completed", 4, (), 8.2).cost
        4.1
    """

    rung: str
    start: float
    end: float | None
    ended_by: str | None
    workers: int
    node_ids: tuple[str, ...] = ()
    cost_per_hour: float = 0.0

    def seconds(self, now: float | None = None) -> float:
        """Time on the rung (up to ``now`` for an open span)."""
        end = self.end if self.end is not None else (now if now is not None else self.start)
        return max(0.0, end - self.start)

    @property
    def cost(self) -> float:
        """``cost_per_hour`` x hours (0 for an open span without ``now``)."""
        return self.cost_per_hour * self.seconds() / 3600.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (with ``seconds`` and ``cost``)."""
        d = asdict(self)
        d["node_ids"] = list(self.node_ids)
        d["seconds"] = self.seconds()
        d["cost"] = self.cost
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainSpan:
        """Inverse of :meth:`to_dict` (extra keys ignored)."""
        kwargs = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        kwargs["node_ids"] = tuple(kwargs.get("node_ids", ()))
        return cls(**kwargs)


@dataclass(frozen=True)
class LadderSummary:
    """The ladder's account of one Train run.

    Attributes:
        ladder: Ladder name.
        top: The best rung the run was allowed (its constraints applied).
        spans: Every worker group, in order.
        events: Every move as ``TransitionEvent.to_dict()`` (time, from, to, reason...).

    Example:
        >>> s = LadderSummary("l", "h", [TrainSpan("h", 0, 60, "node lost", 4, (), 36.0),
        ...                              TrainSpan("a", 65, 125, "completed", 4, (), 12.0)])
        >>> s.path, round(s.cost, 3), s.moves
        (['h', 'a'], 0.8, 1)
    """

    ladder: str
    top: str
    spans: list[TrainSpan] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def path(self) -> list[str]:
        """The rungs of the run's worker groups, in order (a restart on the same rung
        shows twice: each entry is one worker group)."""
        return [s.rung for s in self.spans]

    @property
    def per_rung(self) -> dict[str, dict[str, float]]:
        """``{rung: {"seconds", "cost"}}``, summed over spans, in first-use order."""
        out: dict[str, dict[str, float]] = {}
        for span in self.spans:
            slot = out.setdefault(span.rung, {"seconds": 0.0, "cost": 0.0})
            slot["seconds"] += span.seconds()
            slot["cost"] += span.cost
        return out

    @property
    def seconds(self) -> float:
        """Time the run had a worker group (restarts in between not counted)."""
        return sum(s.seconds() for s in self.spans)

    @property
    def cost(self) -> float:
        """Total cost over every rung."""
        return sum(s.cost for s in self.spans)

    @property
    def seconds_below_top(self) -> float:
        """Time on rungs below :attr:`top`."""
        return sum(s.seconds() for s in self.spans if s.rung != self.top)

    @property
    def moves(self) -> int:
        """Changes of rung between consecutive worker groups."""
        return sum(1 for a, b in zip(self.spans, self.spans[1:], strict=False)
                   if a.rung != b.rung)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: the fields plus ``path``, ``per_rung``, ``cost``, ``moves``."""
        return {"ladder": self.ladder, "top": self.top,
                "spans": [s.to_dict() for s in self.spans], "events": list(self.events),
                "path": self.path, "per_rung": self.per_rung, "seconds": self.seconds,
                "cost": self.cost, "seconds_below_top": self.seconds_below_top,
                "moves": self.moves}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LadderSummary:
        """Inverse of :meth:`to_dict`."""
        return cls(str(d["ladder"]), str(d["top"]),
                   [TrainSpan.from_dict(s) for s in d.get("spans", [])],
                   list(d.get("events", [])))

    def text(self) -> str:
        """One line per span: rung, seconds, cost, why it left (for logs and examples)."""
        return "\n".join(f"{s.rung}: {s.seconds():.1f}s ${s.cost:.5f} {s.workers} workers, "
                         f"left: {s.ended_by or '-'}" for s in self.spans)


def close_last(spans: list[TrainSpan], end: float, why: str) -> bool:
    """Close the open span, if any, in place; ``True`` when one was open."""
    if spans and spans[-1].end is None:
        last = spans[-1]
        spans[-1] = TrainSpan(last.rung, last.start, end, why, last.workers, last.node_ids,
                              last.cost_per_hour)
        return True
    return False


def with_nodes(spans: list[TrainSpan], node_ids: Iterable[str]) -> None:
    """Record the nodes of the open span's workers, in place."""
    if spans and spans[-1].end is None:
        last = spans[-1]
        spans[-1] = TrainSpan(last.rung, last.start, last.end, last.ended_by, last.workers,
                              tuple(node_ids), last.cost_per_hour)
