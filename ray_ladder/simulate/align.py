"""Align traces of different gaps on one tick grid, as runs of identical observations."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from itertools import chain, islice
from typing import Any

from ray_ladder.simulate.traces import Trace


@dataclass(frozen=True)
class Timeline:
    """Every traced rung's availability on a common tick grid, run-length encoded.

    Segment ``i`` covers ticks ``starts[i] .. starts[i + 1] - 1`` (the last one up to
    ``ticks - 1``) and every tick in it sees ``rows[i]``: one bool per name in ``names``.

    Attributes:
        tick_s: Seconds between observations.
        ticks: Number of observations.
        names: Traced rungs, in ladder order.
        starts: First tick of each segment (``starts[0] == 0``).
        rows: Availability of each traced rung during each segment.

    Example:
        >>> from ray_ladder.simulate.generators import outage_trace
        >>> tl = align({"h100": outage_trace([(60, 120)])}, tick_s=60, ticks=3)
        >>> tl.starts, tl.rows
        ([0, 1, 2], [(True,), (False,), (True,)])
    """

    tick_s: float
    ticks: int
    names: tuple[str, ...]
    starts: list[int]
    rows: list[tuple[bool, ...]]

    def obtainable_ticks(self, name: str) -> int:
        """How many ticks rung ``name`` is seen obtainable."""
        return self._obtainable[self.names.index(name)]

    @cached_property
    def _obtainable(self) -> list[int]:
        """Ticks each traced rung is obtainable: the ticks of each distinct row, summed
        once for every rung (the rows are shared: one tuple per distinct row)."""
        per_row: dict[int, list[Any]] = {}  # id(row) -> [row, ticks]
        starts = self.starts
        for s, e, row in zip(starts, chain(islice(starts, 1, None), [self.ticks]), self.rows,
                             strict=True):
            entry = per_row.get(id(row))
            if entry is None:
                per_row[id(row)] = [row, e - s]
            else:
                entry[1] += e - s
        return [sum(n for row, n in per_row.values() if row[col])
                for col in range(len(self.names))]


def align(traces: Mapping[str, Trace], *, tick_s: float, ticks: int) -> Timeline:
    """Sample every trace at ``k * tick_s`` for ``k < ticks`` and merge them into segments.

    Cost is proportional to the number of changes, not of ticks, so a year at one-minute
    ticks aligns in milliseconds.
    """
    if tick_s <= 0 or ticks < 1:
        raise ValueError(f"need tick_s > 0 and ticks >= 1, got {tick_s}, {ticks}")
    names = tuple(traces)
    runs = [traces[name].tick_runs(tick_s, ticks) for name in names]
    # Within a run the value alternates (equal neighbours are merged), so each change
    # after the first flips one bit: XOR the flips of every rung per tick, then walk the
    # ticks in order with the row as an int. Rows are shared: one tuple per distinct row.
    flips: dict[int, int] = {}
    for j, run in enumerate(runs):
        bit = 1 << j
        for k, _ in run[1:]:
            flips[k] = flips.get(k, 0) ^ bit
    bits = sum(1 << j for j, run in enumerate(runs) if run[0][1])
    shared: dict[int, tuple[bool, ...]] = {}
    starts: list[int] = [0]
    rows: list[tuple[bool, ...]] = [_row(bits, len(runs), shared)]
    last = bits
    for k in sorted(flips):
        bits ^= flips[k]
        if bits != last:
            starts.append(k)
            rows.append(shared.get(bits) or _row(bits, len(runs), shared))
            last = bits
    return Timeline(float(tick_s), ticks, names, starts, rows)


def _row(bits: int, n: int, shared: dict[int, tuple[bool, ...]]) -> tuple[bool, ...]:
    """The row of ``bits`` (bit ``j``: trace ``j`` obtainable), made once per distinct row."""
    row = shared.get(bits)
    if row is None:
        row = shared[bits] = tuple(bool(bits >> j & 1) for j in range(n))
    return row
