"""What every policy is measured against: the best rung obtainable at each tick, and the
blocks of time the spread of the headline figures is drawn from.

**Best available.** At each tick, the best *eligible* rung (the ladder's constraints
applied) that the traces say can be had: the first rung in ladder order that is
obtainable (a compute rung without a trace, a cache or a shed rung always is; a rung
that needs ``K`` instances only while its trace counts ``K``, the ``@K`` timeline).
It is what the oracle serves, so a policy is *below the best available* while it serves
a worse rung, or nothing while some rung could be had. The "degraded" figures measure
against the *top* rung instead, obtainable or not.

**Blocks.** The replay is cut into whole days (into ten equal stretches of whole ticks
when it is shorter than ten days; a last stretch shorter than half a day joins the one
before it). :mod:`ray_ladder.simulate.spread` resamples these blocks to give each
headline figure a bootstrap interval; the draws are made once, from a fixed seed, and
shared by every policy of a report (so two rows are compared on the same resamples).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from operator import itemgetter
from typing import Any

from ray_ladder.simulate.align import Timeline

DAY_S = 86400.0
RESAMPLES = 1000
"""Bootstrap resamples of the blocks."""
SEED = 0
"""Seed of the bootstrap draws: the same report gives the same intervals."""
LEVEL = 0.9
"""Coverage of the bootstrap interval (5th to 95th percentile)."""
Picker = Callable[[list[float]], Iterable[float]]
"""Picks one draw's blocks out of a per-block list (:func:`pickers`)."""


@dataclass(frozen=True)
class Reference:
    """The yardstick of one report, the same for every policy.

    Attributes:
        ticks: Ticks replayed.
        tick_s: Seconds per tick.
        best: Change points ``(tick, rung index)`` of the best available eligible rung
            (``-1``: none can be had), as :attr:`~ray_ladder.simulate.replay.Replay.served`.
        quality: Quality of each eligible rung.
        edges: Block edges in ticks, ``[0, ..., ticks]``.
        block_s: Nominal seconds per block (a day, or a tenth of a short replay).
        obtainable: Per eligible rung, the ticks it is obtainable in each block.
        draws: The bootstrap's resamples: each a list of block indices, drawn with
            replacement.
        seed: The seed the draws came from.
    """

    ticks: int
    tick_s: float
    best: list[tuple[float, int]]
    quality: list[float]
    edges: list[int]
    block_s: float
    obtainable: list[list[float]]
    draws: list[list[int]]
    seed: int = SEED

    @property
    def blocks(self) -> list[tuple[float, int]]:
        """The blocks as change points ``(first tick, block index)``."""
        return [(float(e), j) for j, e in enumerate(self.edges[:-1])]

    @cached_property
    def steps(self) -> tuple[list[float], list[int], list[int]]:
        """The best rung and the block merged, once for every policy: a change point at
        each distinct time of either, as ``(times, best rung, block index)``."""
        times: list[float] = []
        bests: list[int] = []
        blocks: list[int] = []
        best, block = -1, -1
        cuts = iter([*self.blocks, (math.inf, -1)])  # a merge: no sorted copy of a year
        cut, block_next = next(cuts)
        for t, v in [*self.best, (math.inf, -1)]:
            while cut <= t and cut != math.inf:  # a block edge at t first: the same values
                block = block_next
                _step(times, bests, blocks, cut, best, block)
                cut, block_next = next(cuts)
            if t == math.inf:
                break
            best = v
            _step(times, bests, blocks, t, best, block)
        return times, bests, blocks

    @cached_property
    def pickers(self) -> list[Picker]:
        """Per draw, the function that picks its blocks out of a per-block list
        (:func:`pickers`), made once for every policy."""
        return pickers(self.draws)

    @cached_property
    def span_sums(self) -> list[float]:
        """Per draw, the ticks its blocks cover: the denominator of every share of time."""
        return draw_sums([float(e2 - e1) for e1, e2 in pairwise(self.edges)], self.pickers)

    def method(self) -> dict[str, Any]:
        """How the intervals were drawn, for the JSON report."""
        return {"method": "block bootstrap, percentile interval", "blocks": len(self.edges) - 1,
                "block_s": self.block_s, "resamples": len(self.draws), "seed": self.seed,
                "level": LEVEL}


def _step(times: list[float], bests: list[int], blocks: list[int], t: float, best: int,
          block: int) -> None:
    """Append a change point, or overwrite the last one when it is at the same time."""
    if times and times[-1] == t:
        bests[-1], blocks[-1] = best, block
    else:
        times.append(float(t))
        bests.append(best)
        blocks.append(block)


def pickers(draws: list[list[int]]) -> list[Picker]:
    """Per draw, a function that picks its blocks' values out of a per-block list (in
    the draw's order, so their sum is the same float as a loop over the draw's blocks).

    Example:
        >>> [p([5.0, 7.0]) for p in pickers([[1, 1], [0]])]
        [(7.0, 7.0), [5.0]]
    """
    return [itemgetter(*d) if len(d) > 1 else itemgetter(slice(d[0], d[0] + 1))
            for d in draws]


def draw_sums(values: list[float],
              picks: list[Picker]) -> list[float]:
    """Per draw, the sum of ``values`` over its blocks (see :func:`pickers`).

    Example:
        >>> draw_sums([1.0, 3.0], pickers([[0, 0], [0, 1], [1, 1]]))
        [2.0, 4.0, 6.0]
    """
    return [sum(p(values)) for p in picks]


def pieces(end: float, *steps: Sequence[tuple[float, int]],
           ) -> Iterator[tuple[float, float, list[int]]]:
    """Stretches of ``[0, end)`` over which every step function is constant.

    Each step function is a list of change points ``(time, value)`` in time order
    (``-1`` before its first one; of several at one time the last counts). Yields
    ``(start, length, values)``; ``values`` is reused, so copy it to keep it.

    Example:
        >>> [(s, n, list(v)) for s, n, v in pieces(4, [(0, 1), (2.5, 0)], [(0, 7), (1, 8)])]
        [(0.0, 1.0, [1, 7]), (1.0, 1.5, [1, 8]), (2.5, 1.5, [0, 8])]
    """
    events = sorted(((t, j, v) for j, s in enumerate(steps) for t, v in s),
                    key=lambda e: e[0])
    current = [-1] * len(steps)
    prev = 0.0
    for t, j, v in events:
        if t >= end:
            break
        if t > prev:
            yield prev, t - prev, current
            prev = float(t)
        current[j] = v
    if end > prev:
        yield prev, end - prev, current


def best_available(timeline: Timeline, names: list[str]) -> list[tuple[float, int]]:
    """Change points of the best eligible rung obtainable at each tick (``-1``: none).

    ``names`` are the eligible rungs in ladder order; a rung the timeline does not trace
    is always obtainable.

    Example:
        >>> tl = Timeline(60.0, 4, ("h100",), [0, 2], [(True,), (False,)])
        >>> best_available(tl, ["h100", "cpu"])
        [(0.0, 0), (2.0, 1)]
        >>> best_available(tl, ["h100"])
        [(0.0, 0), (2.0, -1)]
    """
    cols = [timeline.names.index(n) if n in timeline.names else None for n in names]
    out: list[tuple[float, int]] = []
    known: dict[tuple[bool, ...], int] = {}  # the timeline shares one tuple per distinct row
    last = None
    for start, row in zip(timeline.starts, timeline.rows, strict=True):
        best = known.get(row)
        if best is None:
            best = known[row] = next((i for i, c in enumerate(cols) if c is None or row[c]), -1)
        if best != last:
            out.append((float(start), best))
            last = best
    return out


def block_edges(ticks: int, tick_s: float) -> tuple[list[int], float]:
    """Block edges in ticks, and the nominal block length in seconds: whole days, or ten
    equal stretches when the replay is shorter than ten days.

    Example:
        >>> block_edges(10, 100.0)
        ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 100.0)
        >>> edges, block_s = block_edges(3895, 600.0)  # 27 days and 70 minutes
        >>> len(edges) - 1, edges[-2:], block_s
        (27, [3744, 3895], 86400.0)
    """
    if ticks * tick_s < 10 * DAY_S:
        n = min(10, ticks)
        return sorted({round(j * ticks / n) for j in range(n + 1)}), ticks * tick_s / n
    per_day = DAY_S / tick_s
    edges = [round(j * per_day) for j in range(int(ticks // per_day) + 1)]
    if ticks - edges[-1] < per_day / 2:
        edges[-1] = ticks  # a short last stretch joins the day before it
    else:
        edges.append(ticks)
    return edges, DAY_S


def obtainable_by_block(timeline: Timeline, names: list[str],
                        edges: list[int]) -> list[list[float]]:
    """Per eligible rung, the ticks it is obtainable in each block.

    Example:
        >>> tl = Timeline(60.0, 4, ("h100",), [0, 1], [(True,), (False,)])
        >>> obtainable_by_block(tl, ["h100", "cpu"], [0, 2, 4])
        [[1.0, 0.0], [2.0, 2.0]]
    """
    nblocks = len(edges) - 1
    cols = [timeline.names.index(n) if n in timeline.names else None for n in names]
    # Per distinct row, its ticks in each block; then each rung's are the sums over the
    # rows that have it (whole ticks: the sums are exact in any order).
    per_row: dict[int, tuple[tuple[bool, ...], list[float]]] = {}  # id(row): rows shared
    end = float(timeline.ticks)
    cuts = iter([float(e) for e in edges[1:-1]] + [math.inf])
    cut, block, prev = next(cuts), 0, 0.0
    rows = timeline.rows
    acc = per_row.setdefault(id(rows[0]), (rows[0], [0.0] * nblocks))[1]
    # The same stretches as pieces() over the segments and the blocks, in time order.
    for start, row in zip(timeline.starts[1:] + [end], rows[1:] + [rows[-1]], strict=True):
        t = float(start)
        while cut <= t:  # block edges up to the next segment (at it: no stretch left)
            if cut > prev:
                acc[block] += cut - prev
                prev = cut
            block += 1
            cut = next(cuts)
        if t > prev:
            acc[block] += t - prev
            prev = t
        hit = per_row.get(id(row))
        acc = (hit or per_row.setdefault(id(row), (row, [0.0] * nblocks)))[1]
    out = [[0.0] * nblocks for _ in names]
    for row, spans in per_row.values():
        for i, c in enumerate(cols):
            if c is None or row[c]:
                out[i] = [a + b for a, b in zip(out[i], spans, strict=True)]
    return out


def build_reference(timeline: Timeline, names: list[str], quality: list[float], *,
                    resamples: int = RESAMPLES, seed: int = SEED) -> Reference:
    """The :class:`Reference` of a report: best available, blocks and the draws.

    Example:
        >>> tl = Timeline(100.0, 10, ("h100",), [0, 5], [(True,), (False,)])
        >>> ref = build_reference(tl, ["h100", "cpu"], [1.0, 0.5], resamples=3, seed=1)
        >>> ref.best, len(ref.edges), len(ref.draws), len(ref.draws[0])
        ([(0.0, 0), (5.0, 1)], 11, 3, 10)
    """
    edges, block_s = block_edges(timeline.ticks, timeline.tick_s)
    rng = random.Random(seed)
    population = range(len(edges) - 1)
    draws = [rng.choices(population, k=len(population)) for _ in range(resamples)]
    return Reference(ticks=timeline.ticks, tick_s=timeline.tick_s,
                     best=best_available(timeline, names), quality=list(quality),
                     edges=edges, block_s=block_s,
                     obtainable=obtainable_by_block(timeline, names, edges), draws=draws,
                     seed=seed)
