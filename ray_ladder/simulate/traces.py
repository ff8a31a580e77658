"""The Trace value class: when one rung could be obtained, as a step function of time."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import TypeVar

# Tick indices are computed as ceil(t / tick); the epsilon keeps 0.1 * 3 / 0.1 from
# landing on the next tick because of floating-point noise.
_EPS = 1e-9
_V = TypeVar("_V", bool, int)


def tick_index(t: float, tick_s: float) -> int:
    """The first tick whose start time is at or after ``t``."""
    return math.ceil(t / tick_s - _EPS)


def _merge(steps: Iterable[tuple[float, _V]]) -> tuple[list[float], list[_V]]:
    """Run-length steps: two at one time keep the later, equal neighbours merge."""
    starts: list[float] = []
    values: list[_V] = []
    for start, value in steps:
        if starts and float(start) == starts[-1]:
            starts.pop()  # two steps at one time: the later one wins
            values.pop()
        if values and value == values[-1]:
            continue
        starts.append(float(start))
        values.append(value)
    return starts, values


@dataclass(frozen=True)
class Trace:
    """One rung's capacity over time: obtainable or not, as a step function.

    ``values[i]`` holds from ``starts[i]`` until ``starts[i + 1]`` (the last one until
    ``duration_s``, or for ever when that is ``None``). Build traces with
    :func:`~ray_ladder.simulate.load_trace`, :func:`~ray_ladder.simulate.always_on`,
    :func:`~ray_ladder.simulate.never_on`, :func:`~ray_ladder.simulate.markov_trace`,
    :func:`~ray_ladder.simulate.outage_trace`, :meth:`from_steps` or :meth:`from_counts`.

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
        starts, values = _merge(((t, bool(v)) for t, v in steps))
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
        starts, counts = _merge(((t, int(c)) for t, c in steps))
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
            >>> from ray_ladder.simulate import outage_trace
            >>> outage_trace([(120, 240)]).tick_runs(60, 5)
            [(0, True), (2, False), (4, True)]
        """
        runs: list[tuple[int, bool]] = []
        ceil = math.ceil
        last_k, last_v = -1, None  # runs[-1], kept in locals (a year has ~1e5 steps)
        for start, value in zip(self.starts, self.values, strict=True):
            k = ceil(start / tick_s - _EPS)  # tick_index(start, tick_s), inline
            if k >= ticks:
                break
            if last_k == k:
                runs.pop()  # a step shorter than a tick: the later value is sampled
                last_k, last_v = runs[-1] if runs else (-1, None)
            if last_v == value:
                continue
            runs.append((k, value))
            last_k, last_v = k, value
        return runs
