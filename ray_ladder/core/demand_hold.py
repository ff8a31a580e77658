"""Demand that does not flicker (pure): a drop in what a part reports is held for a window.

Every part of a team (a Serve app, a task, a Tune or Train run) reports what it wants
about once a second; a steady workload's report still dips now and then (two calls in
flight, both done for a moment). The arbiter acts on the **held** demand instead of the
last report:

- a **rise** counts at once (the part wants more now);
- a **drop** counts only once it has lasted the fleet's hold window
  (:attr:`~ray_ladder.core.fleet.Fleet.hold_window_s`: ``demand_hold_s``, at least two
  control periods): a part's held demand of a rung is the largest it reported in the
  rounds of the last window. A dip shorter than the window changes nothing, so it never
  withdraws a reclaim notice (whose deadline then stands) nor hands a unit back;
- a part whose entry is **gone** (removed when it stopped, e.g. a deleted Serve app, or
  not refreshed for ``DEMAND_STALE_S``) wants nothing at once: it is not a dip.

Each part is held on its own, then the parts of a team are summed. The samples are the
arbiter's rounds (its clock), never the reporters' clocks.

:func:`grace_restarts` counts what the hold is there to prevent: a new notice for a
lender whose earlier notice on the same rung was withdrawn before its deadline, with a
later deadline than that one (the lender's wait started again).

Example:
    >>> hold = DemandHold()
    >>> held, hold = held_demand({("a", "app"): {"h100": 2}}, hold, now=0.0, window_s=3.0)
    >>> held
    {'a': {'h100': 2}}
    >>> held_demand({("a", "app"): {"h100": 0}}, hold, now=1.0, window_s=3.0)[0]
    {'a': {'h100': 2}}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from ray_ladder.core.arbiter import Reclaim, Round
from ray_ladder.core.ledger import Claim

#: A part's report: (team, user) -> rung -> units (``user`` names the app, task or run).
Reports = Mapping[tuple[str, str], Mapping[str, int]]
#: One round's sample of a part's demand of a rung: (the round's time, units).
Sample = tuple[float, int]


@dataclass(frozen=True)
class DemandHold:
    """What the arbiter remembers of the parts' recent reports (not persisted: a restarted
    arbiter holds from the reports it reads next).

    Attributes:
        peaks: (team, user, rung) -> the samples of the last window that may still be the
            largest, oldest first, their units strictly decreasing (a max-queue: a sample
            that a later, larger one outlives can never be the largest again).
    """

    peaks: Mapping[tuple[str, str, str], tuple[Sample, ...]] = field(default_factory=dict)
    #: (team, user, rung) -> the round since which the part has wanted the rung without
    #: a break (its *placement*, the team ledger's order: ``core/ledger.py``).
    since: Mapping[tuple[str, str, str], float] = field(default_factory=dict)

    def claims(self) -> dict[str, dict[str, list[Claim]]]:
        """Team -> rung -> each part's held demand there, as the team ledger's claims.

        Example:
            >>> hold = held_demand({("b", "app"): {"h100": 1}}, DemandHold(), 0.0, 3.0)[1]
            >>> hold.claims()
            {'b': {'h100': [Claim(part='app', units=1, since=0.0)]}}
        """
        out: dict[str, dict[str, list[Claim]]] = {}
        for (team, user, rung), samples in sorted(self.peaks.items()):
            out.setdefault(team, {}).setdefault(rung, []).append(
                Claim(user, samples[0][1], self.since.get((team, user, rung), 0.0)))
        return out


def hold_samples(samples: Sequence[Sample], now: float, units: int,
                 window_s: float) -> tuple[Sample, ...]:
    """``samples`` with this round's ``units`` added and those older than the window
    dropped; the first is the held value.

    Example:
        >>> hold_samples([(0.0, 4), (1.0, 2)], 2.0, 3, window_s=3.0)
        ((0.0, 4), (2.0, 3))
        >>> hold_samples([(0.0, 4), (2.0, 3)], 3.5, 0, window_s=3.0)
        ((2.0, 3), (3.5, 0))
    """
    out = [s for s in samples if s[1] > units]  # a later, at least as large one outlives them
    out.append((now, units))
    first = next(i for i, s in enumerate(out) if s[0] >= now - window_s)
    return tuple(out[first:])


def held_demand(reports: Reports, hold: DemandHold, now: float,
                window_s: float) -> tuple[dict[str, dict[str, int]], DemandHold]:
    """Team -> rung -> units the arbiter acts on this round, and the hold to keep.

    ``reports`` has one entry per part whose demand entry is there and fresh; a part
    that is not in it is gone and wants nothing from now on (its samples are dropped).

    Example:
        >>> hold = DemandHold()
        >>> _, hold = held_demand({("a", "x"): {"h100": 2}}, hold, 0.0, 3.0)
        >>> held_demand({("a", "x"): {"h100": 1}}, hold, 3.5, 3.0)[0]  # a real drop
        {'a': {'h100': 1}}
        >>> held_demand({}, hold, 1.0, 3.0)[0]  # the part is gone: nothing held
        {}
    """
    peaks: dict[tuple[str, str, str], tuple[Sample, ...]] = {}
    since: dict[tuple[str, str, str], float] = {}
    out: dict[str, dict[str, int]] = {}
    for (team, user), wants in reports.items():
        rungs = set(wants) | {r for (t, u, r) in hold.peaks if (t, u) == (team, user)}
        for rung in sorted(rungs):
            key = (team, user, rung)
            samples = hold_samples(hold.peaks.get(key, ()), now,
                                   max(0, int(wants.get(rung, 0))), window_s)
            if samples[0][1] > 0:  # a part that wants none of a rung keeps no samples
                peaks[key] = samples
                since[key] = hold.since.get(key, now)
                totals = out.setdefault(team, {})
                totals[rung] = totals.get(rung, 0) + samples[0][1]
    return out, DemandHold(peaks, since)


def grace_restarts(before: Sequence[Reclaim], out: Round, now: float,
                   withdrawn: Sequence[Reclaim]) -> tuple[list[Reclaim], tuple[Reclaim, ...]]:
    """The notices of round ``out`` that restart a lender's grace, and the withdrawn
    notices to remember.

    A notice in ``before`` (the notices in force before the round) whose deadline has not
    passed but whose units the round dropped was **withdrawn** (the lender wanted less,
    or a unit came free). A new notice for the same lender and rung with a later
    deadline than a withdrawn one, sent before that deadline, restarts the lender's wait:
    it is counted, and the withdrawn units it covers are used up. Withdrawn notices are
    kept until their deadline.

    Example:
        >>> from ray_ladder.core.arbiter import Holdings
        >>> old = Reclaim("h100", "b", "a", 1, 30.0, "")
        >>> gone = Round(Holdings(), {}, {})  # a's demand dipped: the notice was withdrawn
        >>> restarted, kept = grace_restarts([old], gone, 2.0, ())
        >>> restarted, [r.deadline for r in kept]
        ([], [30.0])
        >>> new = Reclaim("h100", "b", "a", 1, 33.0, "")
        >>> again = Round(Holdings(reclaims=(new,)), {}, {}, notices=(new,))
        >>> [r.deadline for r in grace_restarts([], again, 3.0, kept)[0]]
        [33.0]
    """
    standing: Counter[tuple[str, str, str, float]] = Counter()
    for r in out.state.reclaims:
        standing[(r.rung, r.borrower, r.owed_to, r.deadline)] += r.units
    pending = [r for r in withdrawn if r.deadline > now]
    for r in before:
        key = (r.rung, r.borrower, r.owed_to, r.deadline)
        kept = min(r.units, standing[key])
        standing[key] -= kept
        if r.deadline > now and r.units > kept:
            pending.append(replace(r, units=r.units - kept))
    restarted: list[Reclaim] = []
    for notice in out.notices:
        left = notice.units
        for i, w in enumerate(pending):
            if left > 0 and (w.rung, w.owed_to) == (notice.rung, notice.owed_to) \
                    and w.units > 0 and w.deadline < notice.deadline:
                used = min(left, w.units)
                pending[i] = replace(w, units=w.units - used)
                left -= used
        if left < notice.units:
            restarted.append(notice)
    return restarted, tuple(w for w in pending if w.units > 0)
