"""Karpenter's offerings: each rung's zones (instance type x zone), and their capacity."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeAlias

from ray_ladder.simulate.align import Timeline
from ray_ladder.simulate.baselines.context import PolicyContext, Segment
from ray_ladder.simulate.zones import ZONE_SEP

Row: TypeAlias = "tuple[bool, ...]"


@dataclass(frozen=True)
class Offerings:
    """The offerings Karpenter launches: each eligible rung's zones (one offering per
    rung without zones), and their capacity on the replay's ticks.

    Attributes:
        rung: Per offering, the index of its rung (``PolicyContext.names`` order).
        zone: Per offering, its zone (``""`` for a rung given one trace).
        by_rung: Per rung index, its offerings in the order given.
        starts: First tick of each stretch of identical offering rows (``None``: every
            rung is one offering, whose row is the rung's row).
        rows: Per stretch, obtainable per offering (``None`` likewise).

    Example:
        >>> off = Offerings.of(ctx)  # doctest: +SKIP
        >>> off.zone, off.by_rung[0]  # doctest: +SKIP
        (('us-west-2a', 'us-west-2b', '', ''), (0, 1))
    """

    rung: tuple[int, ...]
    zone: tuple[str, ...]
    by_rung: tuple[tuple[int, ...], ...]
    starts: list[int] | None = None
    rows: list[Row] | None = None

    @property
    def single(self) -> bool:
        """Whether each rung is one offering (no rung was given zones)."""
        return self.rows is None

    @classmethod
    def of(cls, ctx: PolicyContext) -> Offerings:
        """The offerings of ``ctx``: its rungs' zones (``ctx.zones``), or one a rung."""
        n = len(ctx.names)
        zoned = ctx.zones
        if zoned is None:
            return cls(tuple(range(n)), ("",) * n, tuple((i,) for i in range(n)))
        rung: list[int] = []
        zone: list[str] = []
        cols: list[tuple[int, int]] = []  # per offering: (source 0 rung / 1 zone, column)
        for i, name in enumerate(ctx.names):
            mine = [c for c, key in enumerate(zoned.names) if key.split(ZONE_SEP)[0] == name]
            for c in mine or [-1]:
                rung.append(i)
                zone.append(zoned.names[c].split(ZONE_SEP, 1)[1] if c >= 0 else "")
                cols.append((1, c) if c >= 0 else (
                    0, ctx.timeline.names.index(name) if ctx.traced[i] else -1))
        by_rung = tuple(tuple(o for o, r in enumerate(rung) if r == i) for i in range(n))
        starts, rows = _offering_rows(ctx.timeline, zoned, cols)
        return cls(tuple(rung), tuple(zone), by_rung, starts, rows)

    def feed(self, ticks: int, see: Callable[[Row], None]) -> Iterator[Segment]:
        """The replay's segments at offering grain, ``(first tick, end tick, obtainable
        per rung)``, handing each segment's offering row to ``see`` before yielding it.

        A rung is obtainable while any of its offerings is: the same rows every other
        policy sees, cut wherever an offering changes.
        """
        assert self.starts is not None and self.rows is not None
        shared: dict[Row, Row] = {}
        ends = [*self.starts[1:], ticks]
        for k0, k1, orow in zip(self.starts, ends, self.rows, strict=True):
            ok = shared.get(orow)
            if ok is None:
                ok = shared[orow] = tuple(any(orow[o] for o in offs) for offs in self.by_rung)
            see(orow)
            yield k0, k1, ok


def _offering_rows(rungs: Timeline, zones: Timeline, cols: list[tuple[int, int]],
                   ) -> tuple[list[int], list[Row]]:
    """The two timelines' rows merged on their common ticks, one bool per offering
    (``cols``: which timeline and column each reads; column -1: always obtainable)."""
    starts: list[int] = []
    rows: list[Row] = []
    shared: dict[Row, Row] = {}
    i = j = 0
    a_starts, b_starts = rungs.starts, zones.starts
    while i < len(a_starts) or j < len(b_starts):
        k = min(a_starts[i] if i < len(a_starts) else rungs.ticks,
                b_starts[j] if j < len(b_starts) else zones.ticks)
        if i < len(a_starts) and a_starts[i] == k:
            i += 1
        if j < len(b_starts) and b_starts[j] == k:
            j += 1
        src = (rungs.rows[i - 1], zones.rows[j - 1])
        row = tuple(c < 0 or src[s][c] for s, c in cols)
        row = shared.setdefault(row, row)
        if not rows or rows[-1] is not row:
            starts.append(k)
            rows.append(row)
    return starts, rows
