"""The arbiter's decisions, without Ray: who holds which units of each shared rung.

One round, from plain facts (units alive per rung, each team's demand, what each holds,
the clock), answers the grants for the next period and the reclaim notices to send:

1. **Entitlement** (:func:`entitlements`): a team is entitled first to its demand up to
   its nominal quota (its own, never lent away while it wants it); then idle quota that
   others lend (up to each lender's ``lending_limit``) and capacity beyond every quota
   are shared among the teams that want more, by weight (integer water-filling: no team
   is more than one unit from its weighted share), each up to its ``borrowing_limit``.
   Lenders lend only within their cohort; a team without a cohort borrows only units
   no quota owns and lends nothing.
2. **Grants follow demand down at once** (a team that wants fewer units holds fewer:
   the demand given, whose drops the arbiter already held, :mod:`.demand_hold`),
   and **up from free units**, nominal deficits first, then by weight.
3. **Reclaim is a notice**: when a team is below its entitlement and no unit is free,
   units are reclaimed from the teams most above theirs (relative to weight); each
   reclaim carries a deadline (``now`` + the borrower's ``reclaim_grace_s``), through
   which the borrower still holds the units and moves its work off them. At the
   deadline the units go to the team that is owed them.
4. **Budgets**: spending accrues per round from held units x ``cost_per_hour``; once a
   team's window is spent, its state is its ``on_exhausted`` until the window ends.

Example:
    >>> from ray_ladder.core.fleet import Fleet
    >>> fleet = Fleet.from_dict({"fleet": "f", "rungs": {"h100": {"resources": {"g": 1}}},
    ...     "teams": [{"name": "a", "quota": {"h100": 2}, "cohort": "c"},
    ...               {"name": "b", "quota": {"h100": 2}, "cohort": "c"}]})
    >>> state = decide(fleet, Holdings(), {"h100": 4}, {"b": {"h100": 4}}, now=0.0).state
    >>> state.held["b"]["h100"]
    4
    >>> out = decide(fleet, state, {"h100": 4}, {"a": {"h100": 2}, "b": {"h100": 4}}, 1.0)
    >>> [(r.borrower, r.owed_to, r.units, r.deadline) for r in out.state.reclaims]
    [('b', 'a', 2, 31.0)]
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ray_ladder.core.fleet import Fleet, Team
from ray_ladder.core.placement import NodeState, fits

Demand = Mapping[str, Mapping[str, int]]  # team -> rung -> units wanted
BudgetState = str  # "ok" or the team's on_exhausted: "demote", "queue", "reject"


@dataclass(frozen=True, slots=True)
class Reclaim:
    """A notice: ``borrower`` gives ``units`` of ``rung`` to ``owed_to`` at ``deadline``."""

    rung: str
    borrower: str
    owed_to: str
    units: int
    deadline: float
    reason: str


@dataclass(frozen=True)
class Holdings:
    """The arbiter's state (kept in Ray's KV as JSON; a restarted arbiter resumes it).

    Attributes:
        held: Team -> rung -> units granted.
        reclaims: Notices in force.
        spent: Team -> cost spent in its current budget window.
        window_start: Team -> when its current budget window began.
        at: When the last round ran (``None`` before the first).
    """

    held: dict[str, dict[str, int]] = field(default_factory=dict)
    reclaims: tuple[Reclaim, ...] = ()
    spent: dict[str, float] = field(default_factory=dict)
    window_start: dict[str, float] = field(default_factory=dict)
    at: float | None = None

    def units(self, team: str, rung: str) -> int:
        """Units of ``rung`` that ``team`` holds."""
        return self.held.get(team, {}).get(rung, 0)

    def going(self, team: str, rung: str) -> Reclaim | None:
        """The first notice on ``team``'s units of ``rung``, if any."""
        return next((r for r in self.reclaims if r.borrower == team and r.rung == rung), None)


@dataclass(frozen=True)
class Round:
    """What one round decided.

    Attributes:
        state: The holdings after the round.
        entitled: Team -> rung -> units it is entitled to now.
        budget: Team -> ``ok`` or its ``on_exhausted`` action.
        notices: Reclaim notices sent this round.
        transferred: Reclaims whose deadline passed this round (the units moved).
        budget_until: Team -> when its spent budget window ends (wall clock), for each
            team whose ``budget`` is not ``ok`` (readers answer ``Retry-After`` from it).
    """

    state: Holdings
    entitled: dict[str, dict[str, int]]
    budget: dict[str, BudgetState]
    notices: tuple[Reclaim, ...] = ()
    transferred: tuple[Reclaim, ...] = ()
    budget_until: dict[str, float] = field(default_factory=dict)


def _cap(limit: int | None) -> float:
    return math.inf if limit is None else float(limit)


def water_fill(wants: Mapping[str, float], weights: Mapping[str, float], units: int,
               start: Mapping[str, int] | None = None) -> dict[str, int]:
    """Share ``units`` among ``wants`` (each a most) by weight, in whole units: each gets
    ``min(want, level x weight)`` for one level, the last units to the largest remainders
    (ties to the heavier team, then by name), so no one is more than one unit from its
    weighted share.

    Example:
        >>> water_fill({"a": 10, "b": 10}, {"a": 1.0, "b": 3.0}, 8)
        {'a': 2, 'b': 6}
        >>> water_fill({"a": 1, "b": 10}, {"a": 1.0, "b": 1.0}, 8)
        {'a': 1, 'b': 7}
    """
    names = sorted(n for n, w in wants.items() if w > 0)
    out = {n: 0 for n in wants}
    total_want = sum(wants[n] for n in names)
    if units <= 0 or not names:
        return out
    if total_want <= units:
        return {n: int(wants[n]) if n in names else 0 for n in wants}
    level = _level(wants, weights, names, units)
    exact = {n: min(wants[n], level * weights[n]) for n in names}
    for n in names:
        out[n] = int(math.floor(exact[n] + 1e-9))
    left = units - sum(out.values())
    order = sorted((n for n in names if out[n] < wants[n]),
                   key=lambda n: (-round(exact[n] - out[n], 9), -weights[n], n))
    for n in order[:max(0, left)]:
        out[n] += 1
    return out


def _level(wants: Mapping[str, float], weights: Mapping[str, float], names: list[str],
           units: int) -> float:
    """The level where ``sum(min(want, level x weight)) == units`` (``units`` is below
    the total want): teams saturate in order of ``want / weight``, the rest share what
    is left by weight. One sort, not a bisection (100 teams a round at 10,000 nodes)."""
    left, wsum = float(units), sum(weights[n] for n in names)
    for n in sorted(names, key=lambda n: wants[n] / weights[n]):
        if wants[n] / weights[n] * wsum > left:  # n and the rest do not saturate
            break
        left -= wants[n]
        wsum -= weights[n]
    return left / wsum if wsum > 1e-12 else math.inf


def entitlements(fleet: Fleet, rung: str, capacity: int,
                 demand: Mapping[str, int]) -> dict[str, int]:
    """Units of ``rung`` each team is entitled to now (rule 1 of the module doc)."""
    teams = fleet.teams
    want = {t.name: max(0, int(demand.get(t.name, 0))) for t in teams}
    weights = {t.name: t.weight for t in teams}
    nominal = {t.name: t.quota.get(rung, 0) for t in teams}
    own = {n: min(want[n], nominal[n]) for n in want}
    if sum(own.values()) > capacity:  # fewer units alive than quotas ask: share by weight
        return water_fill(own, weights, capacity)
    entitled = dict(own)
    unowned = max(0, capacity - sum(nominal.values()))
    lend = {t.name: min(nominal[t.name] - own[t.name], _cap(t.limit("lending", rung)))
            if t.cohort is not None else 0.0 for t in teams}
    extra = {t.name: min(want[t.name] - own[t.name], _cap(t.limit("borrowing", rung)))
             for t in teams}
    for cohort in sorted({t.cohort for t in teams if t.cohort is not None}):
        members = [t for t in teams if t.cohort == cohort]
        pool = int(sum(lend[t.name] for t in members))  # idle quota is there only if alive
        _lend(entitled, members, extra, weights, min(pool, capacity - sum(entitled.values())))
    _lend(entitled, teams, extra, weights, min(unowned, capacity - sum(entitled.values())))
    return entitled


def _lend(entitled: dict[str, int], teams: list[Team], extra: dict[str, float],
          weights: Mapping[str, float], pool: int) -> None:
    shares = water_fill({t.name: extra[t.name] for t in teams}, weights, pool)
    for name, units in shares.items():
        entitled[name] += units
        extra[name] -= units


def decide(fleet: Fleet, state: Holdings, capacity: Mapping[str, int], demand: Demand,
           now: float) -> Round:
    """One arbiter round (the module doc's rules 1-4) over the on-prem shared rungs."""
    budget, until = _budgets(fleet, state, now)
    demand = _after_budget(fleet, _within_bounds(fleet, demand), budget)
    held = {t.name: dict(state.held.get(t.name, {})) for t in fleet.teams}
    reclaims: list[Reclaim] = []
    transferred: list[Reclaim] = []
    notices: list[Reclaim] = []
    entitled: dict[str, dict[str, int]] = {t.name: {} for t in fleet.teams}
    for rung in fleet.onprem_rungs:
        want = {t.name: int(demand.get(t.name, {}).get(rung, 0)) for t in fleet.teams}
        units = entitlements(fleet, rung, int(capacity.get(rung, 0)), want)
        for team, n in units.items():
            entitled[team][rung] = n
        done, kept, sent = _rung(fleet, rung, held, units, want,
                                 [r for r in state.reclaims if r.rung == rung],
                                 int(capacity.get(rung, 0)), now)
        transferred += done
        reclaims += kept + sent
        notices += sent
    spent = _spend(fleet, state, held, now)
    new = Holdings(held={t: {r: n for r, n in h.items() if n} for t, h in held.items()},
                   reclaims=tuple(reclaims), spent=spent[0], window_start=spent[1], at=now)
    return Round(new, entitled, budget, tuple(notices), tuple(transferred), until)


def _rung(fleet: Fleet, rung: str, held: dict[str, dict[str, int]],
          entitled: Mapping[str, int], want: Mapping[str, int], reclaims: list[Reclaim],
          capacity: int, now: float) -> tuple[list[Reclaim], list[Reclaim], list[Reclaim]]:
    """Rules 2-3 on one rung; ``held`` is updated in place."""
    teams = {t.name: t for t in fleet.teams}
    weights = {t.name: t.weight for t in fleet.teams}
    have = {t: held[t].get(rung, 0) for t in held}
    done = [r for r in reclaims if r.deadline <= now]
    kept = [r for r in reclaims if r.deadline > now]
    for r in done:  # the deadline passed: the units go
        have[r.borrower] = max(0, have[r.borrower] - r.units)
    for team in have:  # grants follow demand down at once (a borrower that moved frees)
        have[team] = min(have[team], want[team])
    free = max(0, capacity - sum(have.values()))
    # rule 2: free units to deficits, nominal first, then by weight
    nominal = {t.name: min(want[t.name], t.quota.get(rung, 0)) for t in fleet.teams}
    for stage in (nominal, entitled):
        gaps = {t: max(0, min(stage[t], entitled[t]) - have[t]) for t in have}
        for team, n in water_fill(gaps, weights, free).items():
            have[team] += n
            free -= n
    kept = _still_owed(kept, have, entitled)
    # rule 3: notices for what is still owed, from the teams most above their share
    coming: Counter[str] = Counter()
    noticed: Counter[str] = Counter()
    for r in kept:
        coming[r.owed_to] += r.units
        noticed[r.borrower] += r.units
    owed = {t: entitled[t] - have[t] - coming[t] for t in have}
    excess = {t: have[t] - entitled[t] - noticed[t] for t in have}  # not yet noticed
    sent: list[Reclaim] = []
    for team in sorted((t for t in owed if owed[t] > 0), key=lambda t: (-weights[t], t)):
        sent += _notices(teams, rung, team, owed[team], excess, entitled, now)
    for team, n in have.items():
        held[team][rung] = n
    return done, kept, sent


def _still_owed(reclaims: list[Reclaim], have: Mapping[str, int],
               entitled: Mapping[str, int]) -> list[Reclaim]:
    """Notices in force, trimmed to what the borrower still holds above its share and
    what is still owed (a borrower that moved, or units that came free, end them)."""
    out: list[Reclaim] = []
    owed = {t: entitled[t] - have[t] for t in have}
    over = {t: have[t] - entitled[t] for t in have}
    for r in reclaims:
        units = min(r.units, owed[r.owed_to], over[r.borrower])
        if units > 0:
            out.append(replace(r, units=units))
            owed[r.owed_to] -= units
            over[r.borrower] -= units
    return out


def _notices(teams: Mapping[str, Team], rung: str, owed_to: str, owed: int,
             excess: dict[str, int], entitled: Mapping[str, int],
             now: float) -> list[Reclaim]:
    """Notices for ``owed`` units, from the teams most above their share; ``excess``
    (units held above the share and not yet under a notice) is updated in place."""
    out: list[Reclaim] = []
    for team in sorted((t for t in excess if excess[t] > 0 and t != owed_to),
                       key=lambda t: (-excess[t] / teams[t].weight, t)):
        if owed <= 0:
            break
        units = min(owed, excess[team])
        why = "its nominal quota" if entitled[owed_to] <= teams[owed_to].quota.get(rung, 0) \
            else "its weighted share"
        out.append(Reclaim(rung, team, owed_to, units,
                           now + teams[team].reclaim_grace_s,
                           f"team {owed_to} reclaims {units} {rung} unit(s) from team "
                           f"{team} ({why})"))
        excess[team] -= units
        owed -= units
    return out


def _budgets(fleet: Fleet, state: Holdings,
             now: float) -> tuple[dict[str, BudgetState], dict[str, float]]:
    """Each team's budget state, and when the window of each spent one ends."""
    out: dict[str, BudgetState] = {}
    until: dict[str, float] = {}
    for team in fleet.teams:
        b = team.budget
        start = state.window_start.get(team.name, now)
        fresh = b is None or now - start >= b.window_s
        spent = 0.0 if fresh else state.spent.get(team.name, 0.0)
        out[team.name] = "ok" if b is None or spent < b.max_cost else b.on_exhausted
        if b is not None and out[team.name] != "ok":
            until[team.name] = start + b.window_s
    return out, until


def _within_bounds(fleet: Fleet, demand: Demand) -> Demand:
    """A team wants no unit of a rung its bound constraints exclude (an EU-bound team
    is never granted a non-EU unit, borrowed or its own quota's)."""
    teams = {t.name: t for t in fleet.teams}
    return {team: {r: n for r, n in wants.items()
                   if team not in teams or r not in fleet.rungs
                   or teams[team].may_use(fleet.rungs[r])}
            for team, wants in demand.items()}


def _after_budget(fleet: Fleet, demand: Demand, budget: Mapping[str, BudgetState]) -> Demand:
    """A team whose budget is spent wants no priced unit (its work demotes, queues or is
    rejected by its own ladder: the adapters read ``Round.budget``)."""
    out: dict[str, Mapping[str, int]] = {}
    for team, wants in demand.items():
        if budget.get(team, "ok") == "ok":
            out[team] = wants
        else:
            out[team] = {r: n for r, n in wants.items()
                         if r in fleet.rungs and fleet.rungs[r].cost_per_hour == 0}
    return out


def _spend(fleet: Fleet, state: Holdings, held: Mapping[str, Mapping[str, int]],
           now: float) -> tuple[dict[str, float], dict[str, float]]:
    spent, starts = dict(state.spent), dict(state.window_start)
    dt_h = 0.0 if state.at is None else max(0.0, now - state.at) / 3600.0
    for team in fleet.teams:
        start = starts.setdefault(team.name, now)
        if team.budget is not None and now - start >= team.budget.window_s:
            starts[team.name], spent[team.name] = now, 0.0
        cost = sum(n * fleet.rungs[r].cost_per_hour for r, n in
                   state.held.get(team.name, {}).items() if r in fleet.rungs)
        spent[team.name] = spent.get(team.name, 0.0) + cost * dt_h
    return spent, starts


def shared_capacity(fleet: Fleet, nodes: list[NodeState]) -> dict[str, int]:
    """Units of each on-prem shared rung on alive, not draining nodes (read once per
    round for every ladder on the cluster).

    Example:
        >>> from ray_ladder.core.fleet import Fleet
        >>> fleet = Fleet.from_dict({"fleet": "f", "rungs": {"h100": {"resources":
        ...     {"ladder/h100": 1}}}, "teams": [{"name": "a"}]})
        >>> shared_capacity(fleet, [NodeState("n1", True, {"ladder/h100": 8}, {}),
        ...                         NodeState("n2", False, {"ladder/h100": 8}, {})])
        {'h100': 8}
    """
    out = {name: 0 for name in fleet.onprem_rungs}
    keys = sorted({k for name in out for k in fleet.rungs[name].resources})
    # nodes of one shape count once (a 10,000-node table has a few shapes)
    shapes = Counter(tuple([node.total.get(k, 0.0) for k in keys]) for node in nodes
                     if node.alive and not node.draining)
    for shape, count in shapes.items():
        total = dict(zip(keys, shape, strict=True))
        for name in out:
            out[name] += count * fits(fleet.rungs[name].resources, total)
    return out


def with_reclaims(state: Holdings, reclaims: tuple[Reclaim, ...]) -> Holdings:
    """``state`` with its notices replaced (for tests and the adapter's restore)."""
    return replace(state, reclaims=reclaims)
