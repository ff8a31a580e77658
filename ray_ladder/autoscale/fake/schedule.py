"""Capacity schedules: when a simulated cloud refuses launches of each node type."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_SCRIPT_LINE = re.compile(
    r"^\s*(?P<type>[A-Za-z0-9_.\-]+)\s+(?:unavailable|refused|stocked[- ]out)"
    r"(?:\s+from\s+t\s*=\s*(?P<start>[0-9.]+)\s*s?)?"
    r"(?:\s+(?:to|until)\s+t\s*=\s*(?P<end>[0-9.]+)\s*s?)?\s*$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Window:
    """Launches are refused during ``[start_s, end_s)`` (``end_s=None``: for ever).

    Example:
        >>> Window(5, 40).covers(10), Window(5, 40).covers(40)
        (True, False)
    """

    start_s: float
    end_s: float | None = None

    def covers(self, t: float) -> bool:
        """Whether second ``t`` (since the schedule's epoch) lies in the window."""
        return t >= self.start_s and (self.end_s is None or t < self.end_s)


@dataclass(frozen=True)
class TraceReplay:
    """Replay a capacity trace (``../shared/traces`` format): a 0 point refuses launches.

    Attributes:
        points: The trace's ``data`` list (0: no capacity, > 0: obtainable).
        seconds_per_point: Replay speed: how long one trace point lasts here.
        start_point: Trace index played at ``t=0``.
        source: Where the trace came from (for reports).
    """

    points: tuple[int, ...]
    seconds_per_point: float = 1.0
    start_point: int = 0
    source: str = "<trace>"

    def refused(self, t: float) -> bool:
        """Whether the trace says "no capacity" at second ``t``; the trace loops."""
        if t < 0 or not self.points:
            return False
        i = (self.start_point + int(t / self.seconds_per_point)) % len(self.points)
        return self.points[i] <= 0

    @classmethod
    def load(cls, path: str | Path, seconds_per_point: float = 1.0,
             start_point: int = 0) -> TraceReplay:
        """Read a trace file ``{"metadata": {...}, "data": [0, 1, ...]}``."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        points = data["data"] if isinstance(data, dict) else data
        if seconds_per_point <= 0:
            raise ValueError(f"seconds_per_point must be > 0, got {seconds_per_point}")
        return cls(tuple(int(p) for p in points), seconds_per_point, start_point, str(path))


@dataclass(frozen=True)
class CapacitySchedule:
    """Which node types the fake cloud refuses to launch, and when.

    Times are seconds since ``epoch`` (a unix time; ``None`` means "when the provider
    first reads the schedule"). A node type is refused when any of its windows covers the
    time, or its trace replay has a 0 point there.

    Example:
        >>> s = CapacitySchedule.parse("h100 unavailable from t=5s to t=40s")
        >>> s.refused("h100", 10.0, epoch=0.0), s.refused("h100", 41.0, epoch=0.0)
        (True, False)
    """

    windows: Mapping[str, tuple[Window, ...]] = field(default_factory=dict)
    traces: Mapping[str, TraceReplay] = field(default_factory=dict)
    epoch: float | None = None

    def refused(self, node_type: str, now: float, epoch: float | None = None) -> bool:
        """Whether a launch of ``node_type`` at unix time ``now`` is refused."""
        zero = self.epoch if self.epoch is not None else epoch
        t = now - (zero if zero is not None else now)
        if any(w.covers(t) for w in self.windows.get(node_type, ())):
            return True
        trace = self.traces.get(node_type)
        return trace is not None and trace.refused(t)

    @classmethod
    def parse(cls, script: str, epoch: float | None = None) -> CapacitySchedule:
        """Parse lines (or ``;``-separated clauses) like ``h100 unavailable from t=5s to t=40s``.

        ``from`` defaults to 0 and ``to`` to for ever, so ``h100 unavailable`` refuses
        every launch of ``h100``.
        """
        windows: dict[str, list[Window]] = {}
        for clause in re.split(r"[;\n]", script):
            if not clause.strip() or clause.strip().startswith("#"):
                continue
            m = _SCRIPT_LINE.match(clause)
            if m is None:
                raise ValueError(
                    f"cannot read schedule clause {clause.strip()!r}; write e.g. "
                    "'h100 unavailable from t=5s to t=40s'"
                )
            start = float(m["start"]) if m["start"] else 0.0
            end = float(m["end"]) if m["end"] else None
            if end is not None and end <= start:
                raise ValueError(f"window end t={end}s must be after its start t={start}s")
            windows.setdefault(m["type"], []).append(Window(start, end))
        return cls({k: tuple(v) for k, v in windows.items()}, {}, epoch)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], base: Path | None = None) -> CapacitySchedule:
        """Build from ``{"epoch": .., "script": "..", "node_types": {type: {..}}}``.

        Each node type takes ``unavailable: [[start_s, end_s or null], ...]`` and/or
        ``trace: path`` with ``seconds_per_point`` and ``start_point``. Relative trace
        paths are resolved against ``base``.
        """
        unknown = set(data) - {"epoch", "script", "node_types"}
        if unknown:
            raise ValueError(f"unknown schedule key(s) {sorted(unknown)}; "
                             "valid: ['epoch', 'node_types', 'script']")
        parsed = cls.parse(data.get("script") or "")
        windows = {k: list(v) for k, v in parsed.windows.items()}
        traces: dict[str, TraceReplay] = {}
        for node_type, spec in (data.get("node_types") or {}).items():
            for pair in spec.get("unavailable", []):
                start, end = (list(pair) + [None])[:2]
                windows.setdefault(node_type, []).append(
                    Window(float(start), None if end is None else float(end)))
            if spec.get("trace"):
                path = Path(spec["trace"])
                if base is not None and not path.is_absolute():
                    path = base / path
                traces[node_type] = TraceReplay.load(
                    path, float(spec.get("seconds_per_point", 1.0)),
                    int(spec.get("start_point", 0)))
        epoch = data.get("epoch")
        return cls({k: tuple(v) for k, v in windows.items()}, traces,
                   None if epoch is None else float(epoch))

    @classmethod
    def load(cls, path: str | Path) -> CapacitySchedule:
        """Read a YAML/JSON schedule file (a plain text file is read as a script)."""
        p = Path(path)
        text = p.read_text(encoding="utf-8")
        data = yaml.safe_load(text) if text.strip() else {}
        if isinstance(data, str):
            return cls.parse(data)
        return cls.from_dict(data or {}, base=p.parent)

    def to_dict(self) -> dict[str, Any]:
        """A dict :meth:`from_dict` reads back (traces by their source path)."""
        node_types: dict[str, dict[str, Any]] = {}
        for name, ws in self.windows.items():
            node_types.setdefault(name, {})["unavailable"] = [[w.start_s, w.end_s] for w in ws]
        for name, tr in self.traces.items():
            node_types.setdefault(name, {}).update(
                trace=tr.source, seconds_per_point=tr.seconds_per_point,
                start_point=tr.start_point)
        out: dict[str, Any] = {"node_types": node_types}
        if self.epoch is not None:
            out["epoch"] = self.epoch
        return out


def as_schedule(value: CapacitySchedule | Mapping[str, Any] | str | Sequence[str] | None
                ) -> CapacitySchedule:
    """Accept a schedule, its dict, a script string, or ``None`` (refuse nothing)."""
    if value is None:
        return CapacitySchedule()
    if isinstance(value, CapacitySchedule):
        return value
    if isinstance(value, str):
        return CapacitySchedule.parse(value)
    if isinstance(value, Mapping):
        return CapacitySchedule.from_dict(value)
    return CapacitySchedule.parse("\n".join(value))
