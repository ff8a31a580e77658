"""Replay per-team demand against the fleet policy, FCFS and a Kueue-like policy.

Example:
    >>> from ray_ladder.core.fleet import Fleet
    >>> fleet = Fleet.from_dict({"fleet": "f", "rungs": {"h100": {"resources": {"g": 1}}},
    ...     "teams": [{"name": "a", "quota": {"h100": 2}, "cohort": "c"},
    ...               {"name": "b", "quota": {"h100": 2}, "cohort": "c",
    ...                "reclaim_grace_s": 5}]})
    >>> trace = DemandTrace.from_rows([(0, "b", "h100", 4), (10, "a", "h100", 2),
    ...                                (30, "b", "h100", 0)], duration_s=40)
    >>> report = simulate_teams(fleet, trace, tick_s=1, checkpoint_s=4)
    >>> [report.policy(p).teams["a"].wait_max_s for p in ("fleet", "fcfs", "kueue")]
    [5.0, 20.0, 0.0]
    >>> report.policy("kueue").teams["b"].work_lost_unit_s  # 2 units, 2 s past a checkpoint
    4.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray_ladder.core.arbiter import entitlements
from ray_ladder.core.fleet import Fleet
from ray_ladder.simulate.teams.demand import DemandTrace
from ray_ladder.simulate.teams.figures import Figures, TeamFigures
from ray_ladder.simulate.teams.policies import Fcfs, FleetPolicy, KueueLike, cloud_rung

POLICIES = ("fleet", "fcfs", "kueue")


@dataclass(frozen=True)
class TeamsPolicyReport:
    """One policy's figures: per team, and the totals over the teams."""

    policy: str
    teams: dict[str, TeamFigures]
    total: dict[str, object]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {"teams": {n: f.to_dict() for n, f in self.teams.items()},
                "total": self.total}


@dataclass(frozen=True)
class TeamsReport:
    """The whole replay: its setting and one :class:`TeamsPolicyReport` per policy."""

    fleet: str
    trace: str
    capacity: dict[str, int]
    cloud_rung: str | None
    tick_s: float
    ticks: int
    duration_s: float
    checkpoint_s: float | None
    policies: tuple[TeamsPolicyReport, ...]

    def policy(self, name: str) -> TeamsPolicyReport:
        """The report of policy ``name`` (``fleet``, ``fcfs``, ``kueue``)."""
        for p in self.policies:
            if p.policy == name:
                return p
        raise KeyError(f"no policy {name!r}; replayed: {[p.policy for p in self.policies]}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (what ``--json`` writes)."""
        return {"fleet": self.fleet, "trace": self.trace, "capacity": self.capacity,
                "cloud_rung": self.cloud_rung, "tick_s": self.tick_s, "ticks": self.ticks,
                "duration_s": self.duration_s, "checkpoint_s": self.checkpoint_s,
                "policies": {p.policy: p.to_dict() for p in self.policies}}


def default_capacity(fleet: Fleet) -> dict[str, int]:
    """On-prem units per shared rung when none are given: the sum of the quotas."""
    return {r: sum(t.quota.get(r, 0) for t in fleet.teams) for r in fleet.onprem_rungs}


def simulate_teams(fleet: Fleet, trace: DemandTrace, *,
                   capacity: Mapping[str, int] | None = None, tick_s: float | None = None,
                   checkpoint_s: float | None = 300.0,
                   policies: Sequence[str] = POLICIES) -> TeamsReport:
    """Replay ``trace`` against each policy, one step every ``tick_s`` (default: the
    fleet's ``control_period_s``) from 0 to ``trace.duration_s``.

    Args:
        capacity: On-prem units per shared rung (default: the sum of the quotas).
        checkpoint_s: The Kueue-like policy's checkpoint interval (``None``: work never
            checkpoints, so an eviction loses everything since the placement).
        policies: Any of ``fleet``, ``fcfs``, ``kueue``.

    Raises:
        ValueError: a trace row names a team or rung the fleet lacks; an unknown policy.
    """
    trace.check(fleet)
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; use some of {list(POLICIES)}")
    cap = {r: int((capacity or {}).get(r, n)) for r, n in default_capacity(fleet).items()}
    tick = float(tick_s if tick_s is not None else fleet.control_period_s)
    if tick <= 0:
        raise ValueError(f"tick_s must be > 0, got {tick}")
    ticks = max(1, math.ceil(trace.duration_s / tick - 1e-9))
    runs = [(_policy(name, fleet, cap, checkpoint_s), Figures(fleet, cap, tick))
            for name in policies]
    demand: dict[str, dict[str, int]] = {}
    entitled: dict[str, dict[str, int]] = {}
    rows, i = trace.rows, 0
    for k in range(ticks):
        now = k * tick
        changed = False
        while i < len(rows) and rows[i].time_s <= now + 1e-9:
            demand.setdefault(rows[i].team, {})[rows[i].rung] = rows[i].units
            i, changed = i + 1, True
        if changed or k == 0:
            entitled = _entitled(fleet, cap, demand)
        for policy, figures in runs:
            figures.add(now, demand, entitled, policy.step(now, demand))
    end = ticks * tick
    reports = []
    for policy, figures in runs:
        teams, total = figures.result(end)
        reports.append(TeamsPolicyReport(policy.name, teams, total))
    return TeamsReport(fleet.fleet, trace.source, cap, cloud_rung(fleet), tick, ticks, end,
                       checkpoint_s, tuple(reports))


def _policy(name: str, fleet: Fleet, capacity: dict[str, int],
            checkpoint_s: float | None) -> FleetPolicy | Fcfs:
    if name == "fleet":
        return FleetPolicy(fleet, capacity)
    if name == "fcfs":
        return Fcfs(fleet, capacity)
    return KueueLike(fleet, capacity, checkpoint_s)


def _entitled(fleet: Fleet, capacity: Mapping[str, int],
              demand: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """The weighted fair entitlement of every team on every on-prem rung."""
    out: dict[str, dict[str, int]] = {t.name: {} for t in fleet.teams}
    for rung in fleet.onprem_rungs:
        want = {t.name: demand.get(t.name, {}).get(rung, 0) for t in fleet.teams}
        for team, n in entitlements(fleet, rung, capacity.get(rung, 0), want).items():
            out[team][rung] = n
    return out
