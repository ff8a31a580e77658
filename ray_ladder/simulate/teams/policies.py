"""Three ways to share the scarce rungs, one step per tick: the fleet's arbiter,
first-come-first-served (plain Ray) and a Kueue-like quota policy that reclaims by
eviction.

Each policy's :meth:`step` takes the clock and every team's demand (team -> on-prem
rung -> units) and answers a :class:`Placed`: the on-prem units each team holds, those
its work runs on, the cloud units it bought for the rest, and the work it lost.

Example:
    >>> from ray_ladder.core.fleet import Fleet
    >>> fleet = Fleet.from_dict({"fleet": "f", "rungs": {"h100": {"resources": {"g": 1}}},
    ...     "teams": [{"name": "a", "quota": {"h100": 2}, "cohort": "c"},
    ...               {"name": "b", "quota": {"h100": 2}, "cohort": "c"}]})
    >>> fcfs = Fcfs(fleet, {"h100": 4})
    >>> fcfs.step(0.0, {"b": {"h100": 4}}).held["b"]
    {'h100': 4}
    >>> fcfs.step(1.0, {"a": {"h100": 2}, "b": {"h100": 4}}).held["a"]  # it waits
    {'h100': 0}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from ray_ladder.core.arbiter import Demand, Holdings, decide
from ray_ladder.core.fleet import Fleet

PerTeam = dict[str, dict[str, int]]  # team -> on-prem rung -> units


@dataclass
class Placed:
    """What a policy placed for one tick.

    Attributes:
        held: On-prem units each team holds (counted against capacity and its share).
        serving: Of those, the units its work runs on (the fleet policy's units under a
            reclaim notice hold no work: it moved down the ladder at the notice).
        cloud: Cloud units bought for the demand on each on-prem rung.
        lost_unit_s: Work lost to reclaim this tick (unit-seconds since the checkpoint).
        reclaimed: Units reclaimed this tick (under a new notice, or evicted), per team
            they were taken from.
        spending: ``ok`` or the team's budget state (the fleet policy; others: ``ok``).
    """

    held: PerTeam
    serving: PerTeam
    cloud: PerTeam
    lost_unit_s: dict[str, float] = field(default_factory=dict)
    reclaimed: dict[str, int] = field(default_factory=dict)
    spending: dict[str, str] = field(default_factory=dict)


def _most(limit: int | None) -> float:
    return math.inf if limit is None else float(limit)


def cloud_rung(fleet: Fleet) -> str | None:
    """The cloud rung a team's demand spills to (the fleet's first), if any."""
    return next((name for name, r in fleet.rungs.items() if r.cloud), None)


class FleetPolicy:
    """The arbiter's rounds (:func:`ray_ladder.core.arbiter.decide`) every tick.

    A borrower keeps noticed units until the deadline, but its work moves down its ladder
    at the notice (to the cloud rung when the fleet has one and its entitlement is spent),
    so nothing is lost. A team buys cloud units only for demand beyond what it is entitled
    to on-prem, and gives them back as soon as on-prem units are granted (climb home).
    Cloud units are reported to the arbiter as held, so budgets count them.
    """

    name = "fleet"

    def __init__(self, fleet: Fleet, capacity: Mapping[str, int]) -> None:
        self.fleet, self.capacity = fleet, dict(capacity)
        self.rungs = fleet.onprem_rungs
        self.state = Holdings()
        self.cloud = cloud_rung(fleet)
        self._bought: dict[str, int] = {}

    def step(self, now: float, demand: Demand) -> Placed:
        """One arbiter round, then the cloud units each team buys."""
        held = {t: dict(h) for t, h in self.state.held.items()}
        if self.cloud is not None:
            for t in self.fleet.teams:
                held.setdefault(t.name, {})[self.cloud] = self._bought.get(t.name, 0)
        out = decide(self.fleet, replace(self.state, held=held), self.capacity, demand, now)
        self.state = out.state
        placed = Placed({}, {}, {}, spending=dict(out.budget))
        for r in out.notices:
            placed.reclaimed[r.borrower] = placed.reclaimed.get(r.borrower, 0) + r.units
        for t in self.fleet.teams:
            self._team(t.name, demand, out.entitled[t.name], out.budget[t.name], placed)
        return placed

    def _team(self, team: str, demand: Demand, entitled: Mapping[str, int], budget: str,
              placed: Placed) -> None:
        held, serving, cloud = {}, {}, {}
        for rung in self.rungs:
            units = self.state.units(team, rung)
            noticed = sum(r.units for r in self.state.reclaims
                          if r.borrower == team and r.rung == rung)
            held[rung], serving[rung] = units, units - noticed
            want = int(demand.get(team, {}).get(rung, 0))
            reach = max(entitled.get(rung, 0), serving[rung])
            ok = self.cloud is not None and budget == "ok"
            cloud[rung] = max(0, want - reach) if ok else 0
        placed.held[team], placed.serving[team], placed.cloud[team] = held, serving, cloud
        self._bought[team] = sum(cloud.values())


@dataclass
class _Units:
    """One team on one rung: on-prem placements (start times), cloud units, pending."""

    onprem: list[float] = field(default_factory=list)
    cloud: int = 0
    pending: list[float] = field(default_factory=list)  # arrival times, oldest first

    def follow(self, want: int, now: float) -> None:
        """New demand joins the queue; less demand leaves the queue, then the cloud,
        then the newest on-prem placements (work that finished loses nothing)."""
        extra = want - len(self.onprem) - self.cloud - len(self.pending)
        if extra > 0:
            self.pending += [now] * extra
            return
        drop = -extra
        for _ in range(min(drop, len(self.pending))):
            self.pending.pop()
            drop -= 1
        gone = min(drop, self.cloud)
        self.cloud -= gone
        del self.onprem[len(self.onprem) - (drop - gone):]


class Fcfs:
    """Plain Ray: whoever holds a unit keeps it; free units go to the oldest waiting
    demand; demand that cannot be placed is bought in the cloud (when the fleet has a
    cloud rung) and stays there (nothing moves it back)."""

    name = "fcfs"

    def __init__(self, fleet: Fleet, capacity: Mapping[str, int]) -> None:
        self.fleet, self.capacity = fleet, dict(capacity)
        self.rungs = fleet.onprem_rungs
        self.cloud = cloud_rung(fleet)
        self.units = {t.name: {r: _Units() for r in fleet.onprem_rungs} for t in fleet.teams}

    def step(self, now: float, demand: Demand) -> Placed:
        """Follow demand, place the queue on free units, spill the rest to the cloud."""
        placed = Placed({}, {}, {})
        for rung in self.rungs:
            on = {t: u[rung] for t, u in self.units.items()}
            for team, u in on.items():
                u.follow(int(demand.get(team, {}).get(rung, 0)), now)
            self._admit(rung, on, now, placed)
            for u in on.values():
                if self.cloud is not None:
                    u.cloud += len(u.pending)
                    u.pending.clear()
        for team, per in self.units.items():
            placed.held[team] = {r: len(u.onprem) for r, u in per.items()}
            placed.serving[team] = dict(placed.held[team])
            placed.cloud[team] = {r: u.cloud for r, u in per.items()}
        return placed

    def _admit(self, rung: str, on: dict[str, _Units], now: float, placed: Placed) -> None:
        self._fifo(rung, on, now, lambda team: True)

    def _free(self, rung: str, on: Mapping[str, _Units]) -> int:
        return self.capacity.get(rung, 0) - sum(len(u.onprem) for u in on.values())

    def _fifo(self, rung: str, on: Mapping[str, _Units], now: float,
              may: Callable[[str], bool]) -> None:
        """Free units, one at a time, to the oldest waiting unit of a team ``may`` allow."""
        free = self._free(rung, on)
        while free > 0:
            ready = [(u.pending[0], t) for t, u in on.items() if u.pending and may(t)]
            if not ready:
                return
            _, team = min(ready)
            on[team].pending.pop(0)
            on[team].onprem.append(now)
            free -= 1


class KueueLike(Fcfs):
    """Kueue's ClusterQueues without a ladder: a team's pending demand within its
    nominal quota is admitted on free units or by **evicting** borrowers of its cohort
    (the newest placements first; their work since the last checkpoint is lost and they
    queue again); beyond its quota it borrows idle quota of its cohort (up to
    ``borrowing_limit`` and the lenders' ``lending_limit``), oldest demand first. Units
    no quota owns are not used. Demand it cannot place is bought in the cloud and stays
    there."""

    name = "kueue"

    def __init__(self, fleet: Fleet, capacity: Mapping[str, int],
                 checkpoint_s: float | None = 300.0) -> None:
        super().__init__(fleet, capacity)
        self.checkpoint_s = checkpoint_s

    def _admit(self, rung: str, on: dict[str, _Units], now: float, placed: Placed) -> None:
        teams = {t.name: t for t in self.fleet.teams}
        quota = {t: teams[t].quota.get(rung, 0) for t in on}
        for team in sorted((t for t in on if on[t].pending), key=lambda t: on[t].pending[0]):
            u = on[team]
            need = min(len(u.pending), quota[team] - len(u.onprem))
            take = min(max(0, need), max(0, self._free(rung, on)))
            for _ in range(take):
                u.onprem.append(now)
                u.pending.pop(0)
            for _ in range(max(0, need - take)):
                victim = self._victim(teams[team].cohort, on, quota)
                if victim is None:
                    break
                start = on[victim].onprem.pop()  # the newest placement
                placed.lost_unit_s[victim] = placed.lost_unit_s.get(victim, 0.0) + \
                    self._lost(now - start)
                placed.reclaimed[victim] = placed.reclaimed.get(victim, 0) + 1
                on[victim].pending.append(now)  # requeued at its eviction
                u.onprem.append(now)
                u.pending.pop(0)

        def may(team: str) -> bool:
            t = teams[team]
            borrowed = len(on[team].onprem) - quota[team]
            limit = t.limit("borrowing", rung)
            return t.cohort is not None and borrowed >= 0 and \
                (limit is None or borrowed < limit) and self._room(t.cohort, on, quota, rung)

        self._fifo(rung, on, now, may)

    def _victim(self, cohort: str | None, on: Mapping[str, _Units],
                quota: Mapping[str, int]) -> str | None:
        if cohort is None:
            return None
        over = [(len(on[t].onprem) - quota[t], t) for t in on
                if self._cohort(t) == cohort and len(on[t].onprem) > quota[t]]
        return min(over, key=lambda x: (-x[0], x[1]))[1] if over else None

    def _cohort(self, team: str) -> str | None:
        return self.fleet.team(team).cohort

    def _room(self, cohort: str, on: Mapping[str, _Units], quota: Mapping[str, int],
              rung: str) -> bool:
        """Whether the cohort has idle quota left to lend (one more unit)."""
        members = [t for t in self.fleet.teams if t.cohort == cohort]
        lent = sum(max(0, len(on[t.name].onprem) - quota[t.name]) for t in members)
        idle = sum(min(max(0, quota[t.name] - len(on[t.name].onprem)),
                       _most(t.limit("lending", rung))) for t in members)
        return lent < idle

    def _lost(self, age_s: float) -> float:
        """Work since the last checkpoint of a placement ``age_s`` old."""
        if not self.checkpoint_s:
            return age_s
        return age_s % self.checkpoint_s
