"""The report's hand-merged passes give exactly (bit for bit) what the generic definitions
over :func:`~ray_ladder.simulate.reference.pieces` give: stretches cut at every distinct
change time, summed in time order."""

from __future__ import annotations

import random

import pytest

from ray_ladder.simulate.align import Timeline
from ray_ladder.simulate.figures import count_flaps
from ray_ladder.simulate.reference import build_reference, obtainable_by_block, pieces
from ray_ladder.simulate.replay import Replay
from ray_ladder.simulate.spread import _served_pass, _starting_by_block


def _log(rng: random.Random, ticks: int, n: int, start_at_zero: bool) -> list[tuple[float, int]]:
    """A change log in time order: ints and floats, repeated times, values -1..n-1."""
    out: list[tuple[float, int]] = [(0.0, -1)] if start_at_zero else []
    t: float = 0
    while True:
        t += rng.choice([0, 0, 1, 2, 0.5, 0.25, 3])
        if t >= ticks:
            return out
        out.append((t if rng.random() < 0.5 else float(t), rng.randrange(-1, n)))


def _timeline(rng: random.Random, ticks: int, traced: int) -> Timeline:
    rows = [tuple(rng.random() < 0.5 for _ in range(traced)) for _ in range(4)]
    starts = [0] + sorted(rng.sample(range(1, ticks), min(ticks - 1, rng.randrange(1, 30))))
    return Timeline(600.0, ticks, tuple(f"r{j}" for j in range(traced)), starts,
                    [rng.choice(rows) for _ in starts])


def _old_served_pass(rep: Replay, ref, cost, serves):  # type: ignore[no-untyped-def]
    nblocks, q, hours = len(ref.edges) - 1, ref.quality, ref.tick_s / 3600.0
    units = [[0.0] * nblocks for _ in rep.names]
    served, regret, bill = [0.0] * nblocks, [0.0] * nblocks, [0.0] * nblocks
    below = lost = 0.0
    for _, length, (idx, best, block) in pieces(float(ref.ticks), rep.served, ref.best,
                                                ref.blocks):
        if idx >= 0:
            units[idx][block] += length
            bill[block] += cost[idx] * length * hours
            if serves[idx]:
                served[block] += length
        if best >= 0 and (idx < 0 or idx > best):
            below += length
            gap = q[best] - (q[idx] if idx >= 0 else 0.0)
            if gap > 0:
                lost += gap * length
                regret[block] += gap * length
    return below, lost, units, served, regret, bill


@pytest.mark.parametrize("seed", range(40))
def test_the_merged_passes_match_pieces(seed: int) -> None:
    rng = random.Random(seed)
    ticks = rng.choice([7, 30, 200, 1500])
    names = ["a", "b", "c", "d"]
    tl = _timeline(rng, ticks, 3)
    quality = [rng.choice([1.0, 0.7, 0.9, 0.3]) for _ in names]
    ref = build_reference(tl, names[:3] + ["zz"], quality, resamples=5)
    cost, serves = [3.3, 1.7, 0.1, 0.0], [True, True, True, False]
    rep = Replay(names, ticks, 600.0, None, 0.0, 0.0, [],
                 served=_log(rng, ticks, 4, rng.random() < 0.5),
                 starting=_log(rng, ticks, 4, False))
    assert _served_pass(rep, ref, cost, serves) == _old_served_pass(rep, ref, cost, serves)
    bill, old_bill = [0.5] * (len(ref.edges) - 1), [0.5] * (len(ref.edges) - 1)
    old = [[0.0] * (len(ref.edges) - 1) for _ in names]
    for _, length, (idx, block) in pieces(float(ticks), rep.starting, ref.blocks):
        if idx >= 0:
            old[idx][block] += length
            old_bill[block] += cost[idx] * length * (600.0 / 3600.0)
    assert _starting_by_block(rep, ref, cost, bill) == old and bill == old_bill


@pytest.mark.parametrize("seed", range(20))
def test_obtainable_by_block_matches_pieces(seed: int) -> None:
    rng = random.Random(seed)
    tl = _timeline(rng, rng.choice([9, 50, 700]), 2)
    names = ["r0", "x", "r1"]
    edges = sorted({0, tl.ticks, *rng.sample(range(1, tl.ticks), 4)})
    old = [[0.0] * (len(edges) - 1) for _ in names]
    segments = [(float(s), i) for i, s in enumerate(tl.starts)]
    blocks = [(float(e), j) for j, e in enumerate(edges[:-1])]
    for _, length, (seg, block) in pieces(float(tl.ticks), segments, blocks):
        for i, name in enumerate(names):
            if name not in tl.names or tl.rows[seg][tl.names.index(name)]:
                old[i][block] += length
    assert obtainable_by_block(tl, names, edges) == old


def test_flaps_merge_losses_in_or_out_of_order() -> None:
    target = [(0, 1), (3, 0), (4, 1), (10, 0), (20, 1), (21, 0)]
    assert count_flaps(target, 2, 2, lost=[4, 20.5]) == count_flaps(target, 2, 2,
                                                                    lost=[20.5, 4])
    assert count_flaps(target, 2, 2, lost=[4, 20.5]) == 1
    # A decision log out of time order is sorted the old way (ties: losses first): the
    # climb at 3 then the fall at 4 flap; the fall at 5, after the fall at 4, does not.
    assert count_flaps([(0, 0), (5, 1), (3, 0), (4, 1)], 2, 2) == 1
    assert count_flaps([(0, 1), (5, 0), (3, 1), (4, 0)], 2, 2, lost=[4, 1]) == 0


@pytest.mark.parametrize("seed", range(30))
def test_flaps_one_merge_matches_the_sorted_moves(seed: int) -> None:
    # The merge in one loop (logs in time order) against the general path: every move
    # and loss sorted by time, losses first in a tick.
    from ray_ladder.simulate.figures import _decisions, _with_losses

    rng = random.Random(seed)
    for _ in range(200):
        n = rng.randint(1, 4)
        target = _log(rng, 40, n, rng.random() < 0.5)
        lost = sorted(rng.choice([0, 0.5, 1, 2, 3.25, 7, 12, 30]) for _ in range(5))
        window = rng.choice([0.0, 1.0, 2.5, float("inf")])
        flaps, climb_at = 0, None
        for t, up in _with_losses(_decisions(target, n), list(lost), False):
            if up:
                climb_at = t
            else:
                flaps += climb_at is not None and t - climb_at <= window + 1e-9
                climb_at = None
        assert count_flaps(target, n, window, lost) == flaps
