"""Figures against the best available rung (regret, time below it) and the spread of the
headline figures, from one pass over a replay.

**Regret** is the quality-weighted availability a policy gave up against the best rung
obtainable at each moment (:mod:`ray_ladder.simulate.reference`):

    regret = (1 / T) x integral over t of max(0, q_best(t) - q_policy(t)) dt

with ``q`` a rung's quality (0 with no rung; shed's own, 0 by default) and ``T`` the
time replayed. It is a share of time in the units of ``quality_weighted_availability``,
and never negative: a tick on which a model serves beyond the traces (GKE's
``ScaleUpAnyway`` node) adds nothing rather than cancelling a loss elsewhere. For every
policy that never serves beyond the traces it equals the oracle's quality-weighted
availability minus the policy's; the oracle's is 0. ``regret_hours`` is the same
integral in hours (quality-weighted hours lost).

**Below the best available**: time on a rung worse than the best one obtainable, or with
no rung while one could be had.

**Spread.** Per block of the reference (whole days), each figure is a ratio of sums:
served ticks / ticks, (bill + standby) / served hours, regret / ticks. Resampling the
blocks with replacement (the reference's shared, seeded draws) and taking the 5th and
95th percentile of each ratio gives a 90 % interval: how much the figure rests on which
days the traces happened to cover. Days are not independent (capacity is correlated
across days), so the interval is a floor on the uncertainty, not a bound; it does not
cover other zones or months, which need their own traces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import chain

from ray_ladder.simulate.reference import LEVEL, Reference, draw_sums, pickers
from ray_ladder.simulate.replay import Replay

Interval = tuple[float, float]


@dataclass(frozen=True)
class Against:
    """One policy measured against the :class:`~ray_ladder.simulate.reference.Reference`.

    Attributes:
        below_best_ticks: Ticks below the best available rung.
        regret_ticks: Quality-weighted ticks lost against it.
        spread: ``served_fraction``, ``cost_per_served_hour`` and ``regret`` -> their
            bootstrap interval ``(low, high)``, ``None`` where undefined (nothing served).
    """

    below_best_ticks: float
    regret_ticks: float
    spread: dict[str, Interval | None]


def percentile_interval(values: list[float], level: float = LEVEL) -> Interval | None:
    """The central ``level`` interval of ``values`` by nearest rank (``None``: no values).

    Example:
        >>> percentile_interval([float(i) for i in range(1, 101)])
        (5.0, 95.0)
    """
    if not values:
        return None
    ordered = sorted(values)
    tail = (1 - level) / 2
    lo = ordered[max(0, math.ceil(tail * len(ordered)) - 1)]
    hi = ordered[max(0, math.ceil((1 - tail) * len(ordered)) - 1)]
    return lo, hi


def ratio_interval(num: list[float], den: list[float], draws: list[list[int]],
                   scale: float = 1.0) -> Interval | None:
    """Bootstrap interval of ``scale x sum(num) / sum(den)`` over resampled blocks.

    A resample whose denominator is 0 has no ratio and is left out; ``None`` when more
    than half of them are.

    Example:
        >>> ratio_interval([1.0, 3.0], [2.0, 2.0], [[0, 0], [0, 1], [1, 1]])
        (0.5, 1.5)
    """
    picks = pickers(draws)
    return interval_of_sums(draw_sums(num, picks), draw_sums(den, picks), scale)


def interval_of_sums(num: list[float], den: list[float], scale: float = 1.0,
                     ) -> Interval | None:
    """The interval of ``scale x num / den`` over the draws (their sums, per draw); a
    draw whose denominator is 0 is left out, ``None`` when more than half are.

    Example:
        >>> interval_of_sums([2.0, 4.0, 6.0], [4.0, 4.0, 4.0])
        (0.5, 1.5)
    """
    values = [scale * n / d for n, d in zip(num, den, strict=True) if d > 1e-12]
    return percentile_interval(values) if 2 * len(values) >= len(den) else None


def _served_pass(rep: Replay, ref: Reference, cost_per_hour: list[float],
                 serves: list[bool]) -> tuple[float, float, list[list[float]], list[float],
                                              list[float], list[float]]:
    """Below-best ticks, regret ticks, and per block: ticks on each rung, served ticks,
    regret ticks and the serving bill.

    The stretches are those of :func:`~ray_ladder.simulate.reference.pieces` over the
    served rung, the best rung and the blocks (a cut at each distinct time of any), in
    time order, merged by hand: a year of churn has ~1e6 of them.
    """
    nblocks = len(ref.edges) - 1
    hours = ref.tick_s / 3600.0
    units = [[0.0] * nblocks for _ in rep.names]
    served, regret, bill = [0.0] * nblocks, [0.0] * nblocks, [0.0] * nblocks
    gaps = _gaps(ref.quality, len(rep.names))
    end = float(ref.ticks)
    times, bests, blocks = ref.steps
    steps = zip(chain(times, [math.inf]), chain(bests, [-1]), chain(blocks, [-1]), strict=True)
    changes = chain(rep.served, [(math.inf, -1)])
    tr, best_next, block_next = next(steps)
    ta, idx_next = next(changes)
    idx = best = block = -1
    prev = below = lost = 0.0
    while True:
        t = ta if ta <= tr else tr
        if t >= end:
            break
        if t > prev:
            length = t - prev
            if idx >= 0:
                units[idx][block] += length
                bill[block] += cost_per_hour[idx] * length * hours
                if serves[idx]:
                    served[block] += length
            gap = gaps[idx][best]
            if gap is not None:  # below the best available
                below += length
                if gap > 0:
                    lost += gap * length
                    regret[block] += gap * length
            prev = float(t)
        if ta == t:
            idx = idx_next
            ta, idx_next = next(changes)
        else:
            best, block = best_next, block_next
            tr, best_next, block_next = next(steps)
    if end > prev:
        length = end - prev
        if idx >= 0:
            units[idx][block] += length
            bill[block] += cost_per_hour[idx] * length * hours
            if serves[idx]:
                served[block] += length
        gap = gaps[idx][best]
        if gap is not None:
            below += length
            if gap > 0:
                lost += gap * length
                regret[block] += gap * length
    return below, lost, units, served, regret, bill


def _gaps(q: list[float], n: int) -> list[list[float | None]]:
    """``[served][best]`` (``-1``, none, is the last of each): the quality lost against
    the best available rung when below it, ``None`` when not below it."""
    out: list[list[float | None]] = []
    for idx in [*range(n), -1]:
        out.append([q[best] - (q[idx] if idx >= 0 else 0.0)
                    if best >= 0 and (idx < 0 or idx > best) else None
                    for best in [*range(n), -1]])
    return out


def _starting_by_block(rep: Replay, ref: Reference, cost_per_hour: list[float],
                       bill: list[float]) -> list[list[float]]:
    """Per rung and block, the ticks its replicas were starting (their bill added to
    ``bill``): the stretches of ``pieces()`` over the starting rung and the blocks."""
    nblocks = len(ref.edges) - 1
    hours = ref.tick_s / 3600.0
    starting = [[0.0] * nblocks for _ in rep.names]
    end = float(ref.ticks)
    cuts = iter([float(e) for e in ref.edges[1:-1]] + [math.inf])
    cut, block, idx, prev = next(cuts), 0, -1, 0.0
    for ta, value in chain(rep.starting, [(end, -1)]):
        while cut < ta:  # block edges before the next change
            if cut > prev and idx >= 0:
                starting[idx][block] += cut - prev
                bill[block] += cost_per_hour[idx] * (cut - prev) * hours
            prev = cut if cut > prev else prev
            block += 1
            cut = next(cuts)
        if ta >= end:
            break
        if ta > prev:
            if idx >= 0:
                starting[idx][block] += ta - prev
                bill[block] += cost_per_hour[idx] * (ta - prev) * hours
            prev = float(ta)
        idx = value
    if end > prev and idx >= 0:
        starting[idx][block] += end - prev
        bill[block] += cost_per_hour[idx] * (end - prev) * hours
    return starting


def against(rep: Replay, ref: Reference, *, cost_per_hour: list[float], serves: list[bool],
            standby_per_hour: list[float] | None = None) -> Against:
    """Regret, time below the best available rung, and the spread of the headline
    figures of one replay.

    Example:
        >>> from ray_ladder.simulate.align import Timeline
        >>> from ray_ladder.simulate.reference import build_reference
        >>> tl = Timeline(3600.0, 4, ("gpu",), [0, 2], [(True,), (False,)])
        >>> ref = build_reference(tl, ["gpu", "cpu"], [1.0, 0.5], resamples=50)
        >>> rep = Replay(["gpu", "cpu"], 4, 3600.0, 1, 0.0, 0.0, [],
        ...              served=[(0.0, 1), (3.0, 1)])  # on cpu all along
        >>> a = against(rep, ref, cost_per_hour=[4.0, 1.0], serves=[True, True])
        >>> a.below_best_ticks, a.regret_ticks, a.spread["served_fraction"]
        (2.0, 1.0, (1.0, 1.0))
    """
    nblocks = len(ref.edges) - 1
    below, lost, units, served, regret, bill = _served_pass(rep, ref, cost_per_hour, serves)
    hours = ref.tick_s / 3600.0
    starting = _starting_by_block(rep, ref, cost_per_hour, bill)
    for i, rate in enumerate(standby_per_hour or []):
        if rate:
            for b in range(nblocks):
                idle = ref.obtainable[i][b] - units[i][b] - starting[i][b]
                bill[b] += rate * max(0.0, idle) * hours
    # Each list summed once per draw; the blocks' lengths once for every policy.
    picks, span = ref.pickers, ref.span_sums
    served_sums = draw_sums(served, picks)
    spread = {
        "served_fraction": interval_of_sums(served_sums, span),
        "cost_per_served_hour": interval_of_sums(draw_sums(bill, picks), served_sums,
                                                 1.0 / hours),
        "regret": interval_of_sums(draw_sums(regret, picks), span),
    }
    return Against(below_best_ticks=below, regret_ticks=lost, spread=spread)
