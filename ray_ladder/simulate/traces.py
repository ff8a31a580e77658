"""Capacity traces: when each rung could be obtained, as a step function of time."""

from __future__ import annotations

import bisect
import csv
import json
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

# Tick indices are computed as ceil(t / tick); the epsilon keeps 0.1 * 3 / 0.1 from
# landing on the next tick because of floating-point noise.
_EPS = 1e-9


def tick_index(t: float, tick_s: float) -> int:
    """The first tick whose start time is at or after ``t``."""
    return math.ceil(t / tick_s - _EPS)


@dataclass(frozen=True)
class Trace:
    """One rung's capacity over time: obtainable or not, as a step function.

    ``values[i]`` holds from ``starts[i]`` until ``starts[i + 1]`` (the last one until
    ``duration_s``, or for ever when that is ``None``). Build traces with
    :func:`load_trace`, :func:`always_on`, :func:`never_on`, :func:`markov_trace`,
    :func:`outage_trace`, :meth:`from_steps` or :meth:`from_counts`.

    Traces loaded from files also keep ``counts``: how many instances could be had in
    each step (the multi-node spot traces count 0 to 16). :meth:`at_least` turns them
    into the on/off trace of a rung that needs ``k`` of them at once.

    Attributes:
        starts: Change times in seconds, strictly increasing, ``starts[0] == 0``.
        values: Obtainable during each step.
        duration_s: Length of the trace; ``None`` for generated traces without an end.
        resolution_s: The trace's natural sampling gap (the simulator's default tick),
            or ``None`` when it has none.
        source: Where it came from (file path or generator spec), for reports.
        counts: Instances obtainable during each step (``values[i]`` is
            ``counts[i] > 0``), or ``None`` for on/off traces (generated ones).

    Example:
        >>> t = Trace.from_steps([(0, True), (600, False)], duration_s=1200, resolution_s=600)
        >>> t.at(599), t.at(600), t.obtainable_fraction()
        (True, False, 0.5)
    """

    starts: tuple[float, ...]
    values: tuple[bool, ...]
    duration_s: float | None = None
    resolution_s: float | None = None
    source: str = "<trace>"
    counts: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.starts or len(self.starts) != len(self.values):
            raise ValueError("a trace needs as many starts as values, at least one")
        if self.starts[0] != 0:
            raise ValueError(f"a trace starts at time 0, got {self.starts[0]}")
        if any(b <= a for a, b in pairwise(self.starts)):
            raise ValueError("trace step starts must be strictly increasing")
        if self.duration_s is not None and self.duration_s <= self.starts[-1]:
            raise ValueError(
                f"trace duration_s ({self.duration_s}) must be > its last step start "
                f"({self.starts[-1]})"
            )
        if self.resolution_s is not None and self.resolution_s <= 0:
            raise ValueError(f"resolution_s must be > 0, got {self.resolution_s}")
        if self.counts is not None and (
            len(self.counts) != len(self.values)
            or any(c < 0 or (c > 0) != v for c, v in zip(self.counts, self.values, strict=True))
        ):
            raise ValueError("trace counts must be >= 0, one per step, and > 0 exactly "
                             "where the step is obtainable")

    @classmethod
    def from_steps(
        cls,
        steps: Iterable[tuple[float, bool]],
        *,
        duration_s: float | None = None,
        resolution_s: float | None = None,
        source: str = "<trace>",
    ) -> Trace:
        """Build a trace from ``(start_s, obtainable)`` steps; equal neighbours merge.

        Example:
            >>> Trace.from_steps([(0, True), (60, True), (120, False)]).starts
            (0.0, 120.0)
        """
        starts: list[float] = []
        values: list[bool] = []
        for start, value in steps:
            if starts and float(start) == starts[-1]:
                starts.pop()  # two steps at one time: the later one wins
                values.pop()
            if values and bool(value) == values[-1]:
                continue
            starts.append(float(start))
            values.append(bool(value))
        return cls(tuple(starts), tuple(values), duration_s, resolution_s, source)

    @classmethod
    def from_counts(
        cls,
        steps: Iterable[tuple[float, int]],
        *,
        duration_s: float | None = None,
        resolution_s: float | None = None,
        source: str = "<trace>",
    ) -> Trace:
        """Build a trace from ``(start_s, instances obtainable)`` steps; equal neighbours merge.

        Example:
            >>> t = Trace.from_counts([(0, 16), (300, 16), (600, 5), (900, 0)])
            >>> t.starts, t.counts, t.values
            ((0.0, 600.0, 900.0), (16, 5, 0), (True, True, False))
        """
        starts: list[float] = []
        counts: list[int] = []
        for start, count in steps:
            if starts and float(start) == starts[-1]:
                starts.pop()  # two steps at one time: the later one wins
                counts.pop()
            if counts and int(count) == counts[-1]:
                continue
            starts.append(float(start))
            counts.append(int(count))
        return cls(tuple(starts), tuple(c > 0 for c in counts), duration_s, resolution_s,
                   source, tuple(counts))

    def at_least(self, k: int) -> Trace:
        """The on/off trace of a rung that needs ``k`` instances at once (a gang of ``k``).

        Obtainable exactly where the trace counts at least ``k``. ``k == 1`` returns the
        trace itself.

        Raises:
            ValueError: ``k < 1``, or ``k > 1`` on an on/off trace (one without counts).

        Example:
            >>> t = Trace.from_counts([(0, 16), (300, 5), (600, 0)], duration_s=900)
            >>> t.at_least(8).values, t.at_least(8).source
            ((True, False), '<trace>@8')
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"a rung needs at least 1 instance, got {k!r}")
        if k == 1:
            return self
        if self.counts is None:
            raise ValueError(f"trace {self.source} is on/off (it counts no instances): a "
                             f"rung that needs {k} would never be obtainable; give a trace "
                             "file with counts")
        steps = [(s, c >= k) for s, c in zip(self.starts, self.counts, strict=True)]
        return Trace.from_steps(steps, duration_s=self.duration_s,
                                resolution_s=self.resolution_s, source=f"{self.source}@{k}")

    def at(self, t: float) -> bool:
        """Whether the rung is obtainable at time ``t`` (seconds)."""
        return self.values[bisect.bisect_right(self.starts, t) - 1]

    def obtainable_fraction(self, duration_s: float | None = None) -> float:
        """Fraction of ``[0, duration_s)`` (default: the whole trace) it is obtainable."""
        end = self.duration_s if duration_s is None else duration_s
        if end is None:
            raise ValueError("an unbounded trace needs duration_s")
        up = 0.0
        for i, start in enumerate(self.starts):
            if start >= end:
                break
            stop = self.starts[i + 1] if i + 1 < len(self.starts) else end
            if self.values[i]:
                up += min(stop, end) - start
        return up / end

    def tick_runs(self, tick_s: float, ticks: int) -> list[tuple[int, bool]]:
        """The trace sampled at ``k * tick_s`` for ``k < ticks``, run-length encoded.

        Sampling takes the value in force at the start of each tick. Returns
        ``(first_tick, value)`` pairs; the first pair starts at tick 0.

        Example:
            >>> outage_trace([(120, 240)]).tick_runs(60, 5)
            [(0, True), (2, False), (4, True)]
        """
        runs: list[tuple[int, bool]] = []
        for start, value in zip(self.starts, self.values, strict=True):
            k = tick_index(start, tick_s)
            if k >= ticks:
                break
            if runs and runs[-1][0] == k:
                runs.pop()  # a step shorter than a tick: the later value is sampled
            if runs and runs[-1][1] == value:
                continue
            runs.append((k, value))
        return runs


def always_on() -> Trace:
    """A rung that is always obtainable (what a rung without a trace gets)."""
    return Trace((0.0,), (True,), source="always")


def never_on() -> Trace:
    """A rung that is never obtainable."""
    return Trace((0.0,), (False,), source="never")


def markov_trace(
    mean_up_s: float,
    mean_down_s: float,
    duration_s: float,
    *,
    seed: int = 0,
    gap_s: float = 60.0,
    start: bool | None = None,
) -> Trace:
    """Random on/off capacity: a two-state Markov chain sampled every ``gap_s``.

    Up and down periods are geometric in whole gaps with the given means (the discrete
    twin of exponential holding times); a mean shorter than one gap becomes one gap.
    The first state is ``start``, or drawn from the long-run distribution
    ``up / (up + down)`` when ``None``. Deterministic for a given seed.

    Example:
        >>> t = markov_trace(3600, 600, duration_s=86400, seed=1)
        >>> t.duration_s, t.resolution_s
        (86400.0, 60.0)
    """
    for name, value in (("mean_up_s", mean_up_s), ("mean_down_s", mean_down_s),
                        ("duration_s", duration_s), ("gap_s", gap_s)):
        if not value > 0:
            raise ValueError(f"markov_trace: {name} must be > 0, got {value}")
    rng = random.Random(seed)
    state = rng.random() < mean_up_s / (mean_up_s + mean_down_s) if start is None else start
    total = tick_index(duration_s, gap_s)
    steps: list[tuple[float, bool]] = []
    k = 0
    while k < total:
        steps.append((k * gap_s, state))
        mean = (mean_up_s if state else mean_down_s) / gap_s
        k += _geometric(rng, mean)
        state = not state
    source = f"markov:up={mean_up_s:g},down={mean_down_s:g},seed={seed},gap={gap_s:g}"
    return Trace.from_steps(steps, duration_s=float(duration_s), resolution_s=float(gap_s),
                            source=source)


def _geometric(rng: random.Random, mean: float) -> int:
    """A geometric number of steps (>= 1) with the given mean (<= 1 gives 1)."""
    if mean <= 1:
        return 1
    p = 1.0 / mean
    return 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - p))


def outage_trace(
    windows: Sequence[tuple[float, float]], duration_s: float | None = None
) -> Trace:
    """Obtainable except during the ``[start, end)`` outage windows (seconds).

    Overlapping or touching windows merge. The resolution is the greatest common divisor
    of the window edges when they are whole seconds, so a generated-only run ticks on
    them exactly.

    Example:
        >>> outage_trace([(100, 400), (900, 1000)]).starts
        (0.0, 100.0, 400.0, 900.0, 1000.0)
    """
    merged: list[list[float]] = []
    for start, end in sorted((float(a), float(b)) for a, b in windows):
        if start < 0 or end <= start:
            raise ValueError(f"outage window {start:g}-{end:g}: need 0 <= start < end")
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    steps: list[tuple[float, bool]] = [(0.0, True)]
    for start, end in merged:
        steps += [(start, False), (end, True)]
    if duration_s is not None:
        steps = [s for s in steps if s[0] < duration_s]
    edges = [e for w in merged for e in w if e] + ([duration_s] if duration_s else [])
    resolution: float | None = None
    if edges and all(float(e).is_integer() for e in edges):
        resolution = float(math.gcd(*(int(e) for e in edges)))
    source = "outage:" + ",".join(f"{a:g}-{b:g}" for a, b in merged)
    return Trace.from_steps(steps, duration_s=duration_s, resolution_s=resolution,
                            source=source)


def load_trace(path: str | Path) -> Trace:
    """Load a trace file: JSON (``gap_seconds`` + ``data``) or CSV (``t_s,available``).

    JSON is the format of the public spot traces: ``{"metadata": {"gap_seconds": 600},
    "data": [0, 1, ...]}`` where ``data[i]`` counts the instances obtainable during
    ``[i * gap, (i + 1) * gap)``; ``gap_seconds`` may also sit at the top level. CSV has
    one row per change or sample, ``t_s,available`` (header optional, ``#`` comments
    allowed); each value holds until the next row, the last one for the smallest gap
    between rows. Times are shifted so the first row is time 0. Any count > 0 (or
    ``true``) means obtainable; the counts are kept (``Trace.counts``) for rungs that
    need several instances (:meth:`Trace.at_least`).

    Raises:
        ValueError: naming the file and what is wrong with it.

    Example:
        >>> load_trace("../shared/traces/aws-10-26-2022_us-west-2a_v100_8.json")  # doctest: +SKIP
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"trace {p}: cannot read file: {err.strerror}") from None
    if p.suffix.lower() == ".csv":
        return _parse_csv(text, str(p))
    if p.suffix.lower() == ".json":
        return _parse_json(text, str(p))
    raise ValueError(f"trace {p}: unknown file type {p.suffix!r}; use .json or .csv")


def _truthy(raw: object, where: str) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, (int, float)):
        return raw > 0
    if isinstance(raw, str):
        low = raw.strip().lower()
        if low in ("true", "yes"):
            return True
        if low in ("false", "no"):
            return False
        try:
            return float(low) > 0
        except ValueError:
            pass
    raise ValueError(f"{where}: availability must be a count or true/false, got {raw!r}")


def _count(raw: object, where: str) -> int:
    """Instances a trace value counts: a number (rounded up), or 1/0 for true/false."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return math.ceil(raw) if raw > 0 else 0
    if isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            return int(_truthy(raw, where))
        return math.ceil(value) if value > 0 else 0
    return int(_truthy(raw, where))


def _parse_json(text: str, source: str) -> Trace:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"trace {source}: not valid JSON: {err.msg} (line {err.lineno})") from None
    if not isinstance(doc, dict) or "data" not in doc:
        raise ValueError(f"trace {source}: expected an object with 'data' and "
                         "'metadata': {'gap_seconds': ...}")
    meta = doc.get("metadata") or {}
    gap = meta.get("gap_seconds", doc.get("gap_seconds")) if isinstance(meta, dict) else None
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or gap <= 0:
        raise ValueError(f"trace {source}: metadata.gap_seconds must be a number > 0, "
                         f"got {gap!r}")
    data = doc["data"]
    if not isinstance(data, list) or not data:
        raise ValueError(f"trace {source}: 'data' must be a non-empty list")
    steps = [(i * float(gap), _count(v, f"trace {source}: data[{i}]"))
             for i, v in enumerate(data)]
    return Trace.from_counts(steps, duration_s=len(data) * float(gap),
                             resolution_s=float(gap), source=source)


def _parse_csv(text: str, source: str) -> Trace:
    rows = [r for r in csv.reader(line for line in text.splitlines()
                                  if line.strip() and not line.lstrip().startswith("#"))]
    t_col, a_col = 0, 1
    if rows and not _is_number(rows[0][0]):
        header = [h.strip() for h in rows[0]]
        if "t_s" not in header or "available" not in header:
            raise ValueError(f"trace {source}: CSV header must name t_s and available, "
                             f"got {header}")
        t_col, a_col = header.index("t_s"), header.index("available")
        rows = rows[1:]
    if len(rows) < 2:
        raise ValueError(f"trace {source}: a CSV trace needs at least 2 rows")
    times: list[float] = []
    steps: list[tuple[float, int]] = []
    for n, row in enumerate(rows, start=1):
        where = f"trace {source}: row {n}"
        try:
            t = float(row[t_col])
            value = _count(row[a_col], where)
        except (IndexError, ValueError) as err:
            raise ValueError(f"{where}: expected 't_s,available', got {row} ({err})") from None
        if times and t <= times[-1]:
            raise ValueError(f"{where}: t_s must increase ({t:g} after {times[-1]:g})")
        times.append(t)
        steps.append((t - times[0], value))
    gap = min(b - a for a, b in pairwise(times))
    return Trace.from_counts(steps, duration_s=times[-1] - times[0] + gap,
                             resolution_s=gap, source=source)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
