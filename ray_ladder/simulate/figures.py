"""The figures every policy shares, computed one way for all: served time, bills, flaps.

A policy *serves* while it is on a rung that answers: a compute rung, or the cache rung
(recent answers). The shed rung answers "try later" and serves nothing, as does having
no rung at all (a cold start, an exhausted ladder, a baseline with nothing placed). One
definition for the ladder, the oracle and every baseline: :func:`serving_rungs` says which
rungs serve, :func:`served_hours` and :func:`cost_per_served_hour` turn a replay's time
per rung into the figures.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Iterator
from itertools import chain, pairwise

from ray_ladder.core.spec import Ladder
from ray_ladder.simulate.replay import Replay


def serving_rungs(ladder: Ladder, names: list[str]) -> list[bool]:
    """Per rung (``names`` order): whether time on it is *served* time.

    A compute or cache rung serves; a shed rung ("try later") does not.

    Example:
        >>> lad = Ladder.from_dict({"name": "t", "rungs": [
        ...     {"name": "gpu", "num_gpus": 1}, {"name": "shed", "kind": "shed"}]})
        >>> serving_rungs(lad, ["gpu", "shed"])
        [True, False]
    """
    return [ladder.rung(n).kind != "shed" for n in names]


def served_hours(units: list[float], serves: list[bool], tick_s: float) -> float:
    """Hours served: ticks on each serving rung (``units``), in hours.

    Time on a rung that does not serve (shed) and time with no rung are left out.

    Example:
        >>> served_hours([2.0, 1.0, 3.0], [True, True, False], tick_s=1800)
        1.5
    """
    return sum((u for u, s in zip(units, serves, strict=True) if s), 0.0) * tick_s / 3600.0


def cost_per_served_hour(total_cost: float, hours_served: float) -> float | None:
    """The whole bill per hour served (``None`` when nothing was ever served).

    Example:
        >>> cost_per_served_hour(10.0, 2.5)
        4.0
        >>> cost_per_served_hour(3.0, 0.0) is None
        True
    """
    return total_cost / hours_served if hours_served > 1e-12 else None


def intervals(changes: list[tuple[float, int]], end: float) -> list[tuple[float, float, int]]:
    """``(start, length, index)`` for each non-empty stretch between change points."""
    bounds = changes + [(end, -1)]
    return [(t, t2 - t, idx) for (t, idx), (t2, _) in pairwise(bounds) if t2 > t]


def p95(values: list[float]) -> float:
    """95th percentile by nearest rank (0 for no values).

    Example:
        >>> p95([float(i) for i in range(1, 101)])
        95.0
    """
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


NO_CLIMB = math.nan
"""No climb to pair a fall with: ``t - NO_CLIMB <= window`` is false for every window."""


def count_flaps(target: list[tuple[float, int]], n: int, window_ticks: float,
                lost: list[float] | tuple[float, ...] = ()) -> int:
    """Climbs whose next fall comes at most ``window_ticks`` later, the fall counted at
    the loss.

    ``target`` is a decision log (``(time, rung index)``, ``-1`` for none, below every
    rung); a decision at time 0 is the start, not a move. ``lost`` lists the times the
    policy lost the rung it served: a fall counts from the loss, not from the later
    decision where to go (a provisioning policy decides only once a re-placement is
    made, seconds or minutes after the loss), so every policy's flaps count alike.

    Example:
        >>> count_flaps([(0, 1), (3, 0), (4, 1), (10, 0), (20, 1)], n=2, window_ticks=2)
        1
        >>> count_flaps([(0, 1), (3, 0), (9, 1)], n=2, window_ticks=2, lost=[5])
        1
    """
    window = window_ticks + 1e-9
    flaps = _flaps_in_order(target, n, window, lost)
    if flaps is None:  # a log out of time order: sort the moves (ties: losses first)
        flaps = 0
        climb_at: float | None = None
        for t, up in _with_losses(_decisions(target, n), list(lost), False):
            if up:
                climb_at = t
            else:
                if climb_at is not None and t - climb_at <= window:
                    flaps += 1
                climb_at = None
    return flaps


def _flaps_in_order(target: list[tuple[float, int]], n: int, window: float,
                    lost: list[float] | tuple[float, ...]) -> int | None:
    """:func:`count_flaps` in one merge of the two logs (a year of churn has ~1e5 moves);
    ``None`` as soon as either log turns out not to be in time order."""
    flaps, climb_at = 0, NO_CLIMB
    j, nl = 0, len(lost)
    prev, started, last_t, last_loss = -1, False, -math.inf, -math.inf
    for t, idx in target:
        if t < last_t:
            return None
        last_t = t
        if t == 0 and not started and prev == -1:
            prev, started = idx, True  # the start, not a move
            continue
        started = True
        while j < nl and lost[j] <= t:  # a loss before the decisions of its tick
            loss = lost[j]
            if loss < last_loss:
                return None
            flaps += loss - climb_at <= window
            climb_at, last_loss = NO_CLIMB, loss
            j += 1
        if (idx if idx >= 0 else n) < (prev if prev >= 0 else n):
            climb_at = t
        else:
            flaps += t - climb_at <= window
            climb_at = NO_CLIMB
        prev = idx
    for loss in lost[j:]:
        if loss < last_loss:
            return None
        flaps += loss - climb_at <= window
        climb_at, last_loss = NO_CLIMB, loss
    return flaps


def _decisions(target: list[tuple[float, int]], n: int) -> Iterator[tuple[float, bool]]:
    """``(time, up)`` per decision of ``target``, the start (a decision at 0) left out."""
    prev = -1
    started = False
    for t, idx in target:
        if t == 0 and not started and prev == -1:
            prev, started = idx, True  # the start
            continue
        started = True
        yield t, (idx if idx >= 0 else n) < (prev if prev >= 0 else n)
        prev = idx


def _with_losses(decisions: Iterable[tuple[float, bool]], lost: list[float],
                 in_order: bool) -> Iterator[tuple[float, bool]]:
    """Decisions and losses (``up`` False) in time order, a loss before the decisions of
    its tick: a merge of the two logs when both are in time order, else a sort."""
    if not in_order or any(map(operator.gt, lost, lost[1:])):
        keyed = [(t, 1, up) for t, up in decisions] + [(t, 0, False) for t in lost]
        keyed.sort(key=lambda m: (m[0], m[1]))
        yield from ((t, up) for t, _, up in keyed)
        return
    j, nl = 0, len(lost)
    for t, up in decisions:
        while j < nl and lost[j] <= t:
            yield lost[j], False
            j += 1
        yield t, up
    yield from ((t, False) for t in lost[j:])


def time_per_rung(rep: Replay) -> tuple[list[float], float, list[float]]:
    """Ticks each rung served, ticks with no rung, and the seconds of each degraded
    episode (any time off the top rung), from a replay's change points."""
    ticks, tick = rep.ticks, rep.tick_s
    units = [0.0] * len(rep.names)
    unserved = 0.0
    episodes: list[float] = []
    episode_start: float | None = None
    changes = chain(rep.served, [(float(ticks), -1)])
    start, idx = next(changes)
    for t2, following in changes:  # each stretch: (start, idx) until the next change
        if t2 > start:
            length = t2 - start
            if idx >= 0:
                units[idx] += length
            else:
                unserved += length
            if idx != 0:
                if episode_start is None:
                    episode_start = start
            elif episode_start is not None:
                episodes.append((start - episode_start) * tick)
                episode_start = None
        start, idx = t2, following
    if episode_start is not None:
        episodes.append((ticks - episode_start) * tick)
    # Switches inside a tick leave float noise (21340.999999999894 s): keep milliseconds.
    return units, unserved, [round(e, 3) for e in episodes]


def start_and_standby_bills(rep: Replay, units: list[float], cost_per_hour: list[float],
                            standby_per_hour: list[float] | None,
                            obtainable_ticks: list[int] | None,
                            ) -> tuple[float, dict[str, float]]:
    """The bill of replicas starting (not yet serving), and of idle standby by rung."""
    hours = rep.tick_s / 3600.0
    starting_units = [0.0] * len(rep.names)
    changes = chain(rep.starting, [(float(rep.ticks), -1)])
    t, idx = next(changes)
    for t2, following in changes:
        if idx >= 0 and t2 > t:
            starting_units[idx] += t2 - t
        t, idx = t2, following
    starting = sum((c * u * hours for c, u in zip(cost_per_hour, starting_units, strict=True)),
                   0.0)
    standby = {name: 0.0 for name in rep.names}
    if standby_per_hour is not None and obtainable_ticks is not None:
        # A rung serves or starts only while obtainable, so the rest of its obtainable
        # time is time its standby replicas idle.
        for name, rate, ok, u, su in zip(rep.names, standby_per_hour, obtainable_ticks,
                                         units, starting_units, strict=True):
            standby[name] = rate * max(0.0, ok - u - su) * hours
    return starting, standby
