"""The fleet arbiter's grants as every part reads them: small entries in Ray's KV.

The arbiter (``ray_ladder.fleet``) publishes one entry per team after each round, and
keeps its whole state under one key, so a restarted arbiter resumes where it stopped;
parts report their demand under their own keys. Readers never call the arbiter: while
it is down, every part keeps the grants it last read and new work waits on its own
ladder, as it does without a fleet.

``budget`` is ``ok`` or the team's ``on_exhausted`` (``demote``, ``queue``, ``reject``);
``budget_until`` is when a spent window ends (``null`` while ``ok``; an entry written
before it existed reads as "no end known"). :func:`budget_hold` reads both and
:func:`budget_rungs` says which rungs of a ladder the spent budget takes.

Entry of a team (``fleet/grants/<team>``)::

    {"fleet": "platform", "team": "research", "time": 1733000000.0, "budget": "ok",
     "budget_until": null, "shared": ["h100"], "cloud": ["a100-cloud"],
     "rungs": {"h100": {"held": 2, "noticed": 1, "deadline": 1733000030.0,
                        "entitled": 1, "wanted": 3}}}

``rungs`` has the on-prem shared rungs (``shared``) only: a cloud rung takes no quota and
is granted no unit, so a team's view never denies it; the autoscaler hook buys it for the
team only while ``entitled`` (units the team holds or gets within a grace, for its
``wanted`` units) is 0 on every on-prem shared rung of its ladder (docs/teams.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray_ladder.core.arbiter import BudgetState, Holdings, Round
from ray_ladder.core.ledger import PartGrant

KV_NAMESPACE = "ray_ladder"
GRANTS_PREFIX = "fleet/grants/"
DEMAND_PREFIX = "fleet/demand/"
STATE_KEY = "fleet/state"
#: A demand entry older than this is from a part that is gone (its units are released).
DEMAND_STALE_S = 30.0
#: How long a reader that found no grants entry waits before asking the KV again.
ABSENT_RECHECK_S = 5.0

GrantSource = Callable[[str], "Mapping[str, Any] | None"]


def team_entry(fleet: str, team: str, out: Round, shared: list[str], now: float,
               cloud: Iterable[str] = (),
               demand: Mapping[str, Mapping[str, int]] | None = None,
               parts: Mapping[str, Mapping[str, PartGrant]] | None = None,
               ) -> dict[str, Any]:
    """The entry the arbiter publishes for ``team`` after round ``out`` (``shared``: the
    on-prem shared rungs, ``cloud``: the cloud ones, ``demand``: the round's demand,
    ``parts``: the team ledger's shares, rung -> part -> share). With ``parts``, each
    rung's ``parts`` has every part's share of the team's units (``core/ledger.py``; a
    part reads it through :func:`ray_ladder.core.ledger.part_entry`).

    Example:
        >>> from ray_ladder.core.arbiter import Holdings, Round
        >>> state = Holdings(held={"a": {"h100": 2}})
        >>> team_entry("f", "a", Round(state, {"a": {"h100": 2}}, {"a": "ok"}), ["h100"],
        ...            5.0, demand={"a": {"h100": 3}})["rungs"]
        {'h100': {'held': 2, 'noticed': 0, 'deadline': None, 'entitled': 2, 'wanted': 3}}
    """
    rungs: dict[str, Any] = {}
    wanted = (demand or {}).get(team, {})
    for rung in shared:
        notices = [r for r in out.state.reclaims if r.borrower == team and r.rung == rung]
        rungs[rung] = {"held": out.state.units(team, rung),
                       "noticed": sum(r.units for r in notices),
                       "deadline": min((r.deadline for r in notices), default=None),
                       "entitled": out.entitled.get(team, {}).get(rung, 0),
                       "wanted": int(wanted.get(rung, 0))}
        if parts is not None:
            rungs[rung]["parts"] = {part: {"held": g.held, "noticed": g.noticed}
                                    for part, g in (parts.get(rung) or {}).items()}
    return {"fleet": fleet, "team": team, "time": now, "budget": out.budget.get(team, "ok"),
            "budget_until": out.budget_until.get(team), "shared": list(shared),
            "cloud": list(cloud), "rungs": rungs}


def team_limits(entry: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, float | None]]:
    """What a team's entry means for its ladders: shared rungs it may not use now
    (rung -> why) and shared rungs going away for it (rung -> the notice's deadline).

    A rung with no unit granted is not obtainable for the team; one whose every held
    unit is under a reclaim notice is *going away* for it, exactly as a rung whose nodes
    drain: its work moves to the next rung before the units go.

    Example:
        >>> team_limits({"team": "b", "rungs": {"h100": {"held": 2, "noticed": 2,
        ...     "deadline": 30.0}, "a100": {"held": 0, "noticed": 0, "deadline": None}}})
        ({'a100': 'no a100 unit granted to team b'}, {'h100': 30.0})
    """
    denied: dict[str, str] = {}
    going: dict[str, float | None] = {}
    team = entry.get("team")
    for rung, grant in (entry.get("rungs") or {}).items():
        held, noticed = int(grant.get("held", 0)), int(grant.get("noticed", 0))
        if held <= 0:
            denied[rung] = f"no {rung} unit granted to team {team}"
        elif noticed >= held:
            going[rung] = grant.get("deadline")
    return denied, going


def budget_state(entry: Mapping[str, Any] | None) -> BudgetState:
    """``ok`` or the team's ``on_exhausted`` action (``ok`` without an entry)."""
    return str((entry or {}).get("budget", "ok"))


@dataclass(frozen=True, slots=True)
class BudgetHold:
    """A team's spent budget, as its ladders act on it.

    Attributes:
        team: The team.
        action: Its ``on_exhausted``: ``demote``, ``queue`` or ``reject``.
        until: When the spent window ends (wall clock; ``None``: not known, an entry
            from an older arbiter).
    """

    team: str
    action: BudgetState
    until: float | None

    def retry_after_s(self, now: float, default: float) -> float:
        """Seconds to the window's end (``default`` when it is not known)."""
        return default if self.until is None else max(0.0, self.until - now)

    def reason(self, wall: float) -> str:
        """The sentence for people (the data is :data:`BUDGET_HELD`, the action, until)."""
        end = "" if self.until is None else f" for {max(0.0, self.until - wall):.0f} s more"
        return f"team {self.team}'s budget is spent ({self.action}){end}"


def acted_on(entry: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    """What of a team's entry its parts act on: the budget's state and end, and per
    shared rung the units held, under notice and the notice's deadline. Two entries with
    the same value place work the same way (the round's time and demand do not count).

    Example:
        >>> a = {"time": 1.0, "budget": "ok", "rungs": {"h100": {"held": 1, "wanted": 2}}}
        >>> acted_on(a) == acted_on({**a, "time": 2.0})
        True
        >>> acted_on(a) == acted_on({**a, "budget": "demote"})
        False
    """
    if entry is None:
        return None
    rungs = entry.get("rungs") or {}
    return (budget_state(entry), entry.get("budget_until"),
            tuple(sorted((name, g.get("held", 0), g.get("noticed", 0), g.get("deadline"))
                         for name, g in rungs.items())))


#: The held kind of a rung the team's spent budget takes (``CapacitySnapshot.held_kind``).
BUDGET_HELD = "budget"
#: The held kind of a shared rung the fleet arbiter grants the team no unit of (none yet,
#: or its units went back to their owner at a reclaim's deadline).
GRANT_HELD = "grant"
#: Holds no consumer may soften: the team may not place work there at all (a hook's
#: release only holds a rung while a better one is up; these hold it whatever is up).
HARD_HOLDS = frozenset({BUDGET_HELD, GRANT_HELD})


def budget_hold(entry: Mapping[str, Any] | None) -> BudgetHold | None:
    """The team's spent budget from its entry, or ``None`` while it is ``ok``.

    Example:
        >>> budget_hold({"team": "b", "budget": "reject", "budget_until": 90.0})
        BudgetHold(team='b', action='reject', until=90.0)
        >>> budget_hold({"team": "b", "budget": "ok"}) is None
        True
    """
    action = budget_state(entry)
    if entry is None or action == "ok":
        return None
    until = entry.get("budget_until")
    return BudgetHold(str(entry.get("team")), action,
                      None if until is None else float(until))


def budget_rungs(action: BudgetState, costs: Mapping[str, float], eligible: Sequence[str],
                 obtainable: Mapping[str, bool]) -> list[str]:
    """The rungs of ``eligible`` (compute rungs, best first) that a spent budget takes now.

    ``costs`` is each rung's ``cost_per_hour`` (the ladder's). ``demote``: every
    obtainable rung dearer than the cheapest obtainable one (the *floor*), so the work
    falls to the cheapest rungs it may use now and no further: constraints already
    chose ``eligible``, the budget never widens them, and a rung of cost 0 is never
    taken. ``queue`` and ``reject``: every priced rung (cost > 0), where the work
    waits or is refused instead of falling. ``ok``: none.

    Example:
        >>> costs = {"h100": 12.0, "a100": 4.0, "cpu": 0.5}
        >>> budget_rungs("demote", costs, ["h100", "a100", "cpu"],
        ...              {"h100": True, "a100": True, "cpu": True})
        ['h100', 'a100']
        >>> budget_rungs("demote", costs, ["h100", "a100", "cpu"],
        ...              {"h100": True, "a100": True, "cpu": False})
        ['h100']
        >>> budget_rungs("queue", costs, ["h100", "cpu"], {"h100": True, "cpu": True})
        ['h100', 'cpu']
    """
    if action == "ok":
        return []
    if action != "demote":
        return [n for n in eligible if costs.get(n, 0.0) > 0]
    live = [n for n in eligible if obtainable.get(n)]
    floor = min((costs.get(n, 0.0) for n in live), default=0.0)
    return [n for n in live if costs.get(n, 0.0) > floor]


class GrantReader:
    """``team -> its grants entry or None``, from Ray's KV (absent entries re-checked
    every ``ABSENT_RECHECK_S``, so a cluster without a fleet pays one read now and then)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._absent: dict[str, float] = {}

    def get(self, team: str) -> Mapping[str, Any] | None:
        """The last published entry of ``team`` (kept while the arbiter is down)."""
        from ray_ladder.cluster import ray_private

        now = self._clock()
        if now - self._absent.get(team, -ABSENT_RECHECK_S) < ABSENT_RECHECK_S:
            return None
        raw = ray_private.kv_get(GRANTS_PREFIX + team, namespace=KV_NAMESPACE) \
            if ray_private.kv_initialized() else None
        if raw is None:
            self._absent[team] = now
            return None
        self._absent.pop(team, None)
        return json.loads(raw)


def report_demand(team: str, user: str, wants: Mapping[str, int],
                  now: float | None = None) -> None:
    """A part of ``team`` (``user``: its app, ladder or run) wants ``wants`` units."""
    from ray_ladder.cluster import ray_private

    entry = {"team": team, "user": user, "time": time.time() if now is None else now,
             "wants": {r: int(n) for r, n in wants.items()}}
    ray_private.kv_put(f"{DEMAND_PREFIX}{team}/{user}", json.dumps(entry),
                       namespace=KV_NAMESPACE)


def demand_reports(entries: Iterable[Mapping[str, Any]],
                   now: float) -> dict[tuple[str, str], dict[str, int]]:
    """(team, user) -> rung -> units, from the fresh demand entries (one per part: the
    arbiter holds each part's drops on its own, ``core/demand_hold.py``).

    Example:
        >>> demand_reports([{"team": "a", "user": "app", "time": 9.0, "wants": {"h100": 1}},
        ...                 {"team": "b", "user": "x", "time": -50.0, "wants": {"h100": 4}}],
        ...                now=10.0)
        {('a', 'app'): {'h100': 1}}
    """
    out: dict[tuple[str, str], dict[str, int]] = {}
    for entry in entries:
        if now - float(entry.get("time", 0.0)) > DEMAND_STALE_S:
            continue
        wants = out.setdefault((str(entry["team"]), str(entry.get("user", ""))), {})
        for rung, units in (entry.get("wants") or {}).items():
            wants[rung] = wants.get(rung, 0) + int(units)
    return out


def withdraw_demand(team: str, user: str, written_at: float | None = None) -> bool:
    """Remove the demand entry of a part that stopped (a deleted Serve app): the arbiter
    takes it as gone, and its units go back at the next round, with no hold.

    ``written_at``: remove it only if it is still the one this part wrote then (another
    process of the same part, e.g. the router of a redeployed app, may have written it
    since). Returns whether the entry was removed.
    """
    from ray_ladder.cluster import ray_private

    if not ray_private.kv_initialized():
        return False
    key = f"{DEMAND_PREFIX}{team}/{user}"
    if written_at is not None:
        raw = ray_private.kv_get(key, namespace=KV_NAMESPACE)
        if raw is None or json.loads(raw).get("time") != written_at:
            return False
    ray_private.kv_del(key, namespace=KV_NAMESPACE)
    return True


def holdings_to_json(state: Holdings) -> str:
    """The arbiter's state as one JSON document (for Ray's KV)."""
    return json.dumps({
        "held": state.held, "spent": state.spent, "window_start": state.window_start,
        "at": state.at,
        "reclaims": [{"rung": r.rung, "borrower": r.borrower, "owed_to": r.owed_to,
                      "units": r.units, "deadline": r.deadline, "reason": r.reason}
                     for r in state.reclaims]})


def holdings_from_json(text: str | bytes) -> Holdings:
    """The inverse of :func:`holdings_to_json`."""
    from ray_ladder.core.arbiter import Reclaim

    data = json.loads(text)
    return Holdings(held={t: {r: int(n) for r, n in h.items()} for t, h in data["held"].items()},
                    reclaims=tuple(Reclaim(**r) for r in data.get("reclaims", ())),
                    spent={t: float(v) for t, v in data.get("spent", {}).items()},
                    window_start={t: float(v) for t, v in data.get("window_start", {}).items()},
                    at=data.get("at"))
