"""The figures of a teams replay, per team and policy, accumulated tick by tick.

- **share error**: ``|held - entitled|`` summed over the on-prem rungs, in units, where
  ``entitled`` is the weighted fair entitlement of the arbiter's rules
  (:func:`ray_ladder.core.arbiter.entitlements`) for that tick's demand: the same yardstick
  for every policy. Max and mean over ticks.
- **queue wait**: per unit of demand, the time it waits without an on-prem unit of its
  rung (on the cloud or served nowhere), counted per team in FIFO order (the oldest
  waiting unit is served first; the total is exact, the distribution assumes FIFO). A
  unit that loses its placement (a reclaim) waits again. Waits still open at the end
  count to the end. p50, p99 (nearest rank) and max over those waits.
- **work lost**: unit-seconds of work since its last checkpoint, on units taken away.
- **cloud node-hours**: cloud units bought (one unit, one node), and those bought while
  the on-prem rung had free units (``min(team's cloud units, free units)`` each tick).
- **budget overrun**: cost (held on-prem units and cloud units x ``cost_per_hour``) beyond
  ``max_cost`` in each budget window ``[k x window_s, (k + 1) x window_s)``, summed.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from ray_ladder.core.fleet import Fleet
from ray_ladder.simulate.teams.policies import Placed, cloud_rung


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1) of ``values`` (0 for none).

    Example:
        >>> percentile([0, 0, 0, 0, 20, 20], 0.5), percentile([0, 0, 0, 0, 20, 20], 0.99)
        (0, 20)
    """
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class _Waits:
    """One team's waiting units on one rung (start times, oldest first)."""

    def __init__(self) -> None:
        self.queue: deque[float] = deque()
        self.done: list[float] = []
        self.demand = 0

    def tick(self, now: float, demand: int, served: int) -> None:
        self.queue.extend([now] * max(0, demand - self.demand))
        self.demand = demand
        target = max(0, demand - served)
        while len(self.queue) > target:
            self.done.append(now - self.queue.popleft())
        self.queue.extend([now] * (target - len(self.queue)))

    def all(self, end: float) -> list[float]:
        return self.done + [end - start for start in self.queue]


@dataclass(frozen=True)
class TeamFigures:
    """One team's figures under one policy (seconds, units, node-hours, cost)."""

    share_error_max_units: float
    share_error_mean_units: float
    wait_p50_s: float
    wait_p99_s: float
    wait_max_s: float
    waits: int
    work_lost_unit_s: float
    reclaimed_units: int
    cloud_node_h: float
    cloud_node_h_while_onprem_free: float
    unserved_unit_s: float
    cost: float
    budget_overrun: float | None

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able dict (floats rounded to 6 digits)."""
        return {k: round(v, 6) if isinstance(v, float) else v
                for k, v in asdict(self).items()}


@dataclass
class _Team:
    err_max: float = 0.0
    err_sum: float = 0.0
    lost: float = 0.0
    reclaimed: int = 0
    cloud_s: float = 0.0
    cloud_free_s: float = 0.0
    unserved_s: float = 0.0
    windows: dict[int, float] = field(default_factory=dict)
    waits: dict[str, _Waits] = field(default_factory=dict)


class Figures:
    """Accumulates one policy's ticks; :meth:`result` answers per team and in total."""

    def __init__(self, fleet: Fleet, capacity: Mapping[str, int], tick_s: float) -> None:
        self.fleet, self.capacity, self.tick_s = fleet, dict(capacity), tick_s
        cloud = cloud_rung(fleet)
        self.cloud_cost = fleet.rungs[cloud].cost_per_hour if cloud is not None else 0.0
        self.rungs = fleet.onprem_rungs
        self.cost = {r: fleet.rungs[r].cost_per_hour for r in self.rungs}
        self.teams = {t.name: _Team(waits={r: _Waits() for r in self.rungs})
                      for t in fleet.teams}
        self.budgets = {t.name: t.budget for t in fleet.teams}
        self.ticks = 0
        self.cloud_free_total_s = 0.0

    def add(self, now: float, demand: Mapping[str, Mapping[str, int]],
            entitled: Mapping[str, Mapping[str, int]], placed: Placed) -> None:
        """Count one tick ``[now, now + tick_s)`` of ``placed``."""
        dt = self.tick_s
        self.ticks += 1
        for rung in self.rungs:
            free = self.capacity.get(rung, 0) - sum(h.get(rung, 0) for h in placed.held.values())
            cloud = sum(c.get(rung, 0) for c in placed.cloud.values())
            self.cloud_free_total_s += min(cloud, max(0, free)) * dt
            for name, acc in self.teams.items():
                c = placed.cloud.get(name, {}).get(rung, 0)
                acc.cloud_s += c * dt
                acc.cloud_free_s += min(c, max(0, free)) * dt
        for t in self.fleet.teams:
            self._team(t.name, now, demand.get(t.name, {}), entitled.get(t.name, {}), placed)

    def _team(self, name: str, now: float, want: Mapping[str, int],
              entitled: Mapping[str, int], placed: Placed) -> None:
        acc, dt = self.teams[name], self.tick_s
        held, serving = placed.held.get(name, {}), placed.serving.get(name, {})
        cloud = placed.cloud.get(name, {})
        err = sum(abs(held.get(r, 0) - entitled.get(r, 0)) for r in self.rungs)
        acc.err_max, acc.err_sum = max(acc.err_max, float(err)), acc.err_sum + err
        cost = 0.0
        for rung in self.rungs:
            d, s = want.get(rung, 0), min(serving.get(rung, 0), want.get(rung, 0))
            acc.waits[rung].tick(now, d, s)
            acc.unserved_s += max(0, d - s - cloud.get(rung, 0)) * dt
            cost += held.get(rung, 0) * self.cost[rung]
            cost += cloud.get(rung, 0) * self.cloud_cost
        acc.lost += placed.lost_unit_s.get(name, 0.0)
        acc.reclaimed += placed.reclaimed.get(name, 0)
        budget = self.budgets[name]
        window = int(now // budget.window_s) if budget is not None else 0
        acc.windows[window] = acc.windows.get(window, 0.0) + cost * dt / 3600.0

    def result(self, end: float) -> tuple[dict[str, TeamFigures], dict[str, object]]:
        """Per-team figures and the totals over all teams."""
        out: dict[str, TeamFigures] = {}
        every: list[float] = []
        for name, acc in self.teams.items():
            waits = [w for book in acc.waits.values() for w in book.all(end)]
            every += waits
            budget = self.budgets[name]
            over = None if budget is None else sum(
                max(0.0, c - budget.max_cost) for c in acc.windows.values())
            out[name] = TeamFigures(
                acc.err_max, acc.err_sum / max(1, self.ticks), percentile(waits, 0.5),
                percentile(waits, 0.99), max(waits, default=0.0), len(waits), acc.lost,
                acc.reclaimed, acc.cloud_s / 3600.0, acc.cloud_free_s / 3600.0,
                acc.unserved_s, sum(acc.windows.values()), over)
        total: dict[str, object] = {
            "share_error_max_units": max((f.share_error_max_units for f in out.values()),
                                         default=0.0),
            "wait_p50_s": percentile(every, 0.5), "wait_p99_s": percentile(every, 0.99),
            "work_lost_unit_s": round(sum(f.work_lost_unit_s for f in out.values()), 6),
            "reclaimed_units": sum(f.reclaimed_units for f in out.values()),
            "cloud_node_h": round(sum(f.cloud_node_h for f in out.values()), 6),
            "cloud_node_h_while_onprem_free": round(self.cloud_free_total_s / 3600.0, 6),
            "budget_overrun": round(sum(f.budget_overrun or 0.0 for f in out.values()), 6),
        }
        return out, total
