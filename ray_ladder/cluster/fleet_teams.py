"""The fleet's team names in Ray's KV: where a part bound to a team checks its name.

The arbiter publishes ``fleet/teams`` (namespace ``ray_ladder``) when it starts and at
every round: ``{"fleet": "platform", "teams": ["a", "b"], "time": 1733000000.0}``.
Wherever a team is bound (``build_app(team=)``, ``@ladder_task(team=)``,
``with_ladder(team=)``, ``LadderTrainer(team=)``), :func:`check_bound_team` reads it: a
name the running fleet does not have is a ``ValueError`` naming the fleet's teams, never
work that escapes arbitration. No entry (no arbiter ever ran), one not refreshed for
``TEAMS_STALE_S`` (the arbiter is gone), or a process not connected to Ray: only the
name's form is checked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from ray_ladder.cluster.grants import KV_NAMESPACE
from ray_ladder.core.fleet import Fleet
from ray_ladder.core.teamwork import check_fleet_team, check_team

TEAMS_KEY = "fleet/teams"
#: An entry older than this is from an arbiter that is gone (its names are not checked).
TEAMS_STALE_S = 30.0


def teams_entry(fleet: Fleet, now: float) -> dict[str, Any]:
    """The entry the arbiter publishes for ``fleet`` at ``now``.

    Example:
        >>> fleet = Fleet.from_dict({"fleet": "f", "rungs": {"h100": {"resources": {"g": 1}}},
        ...                          "teams": [{"name": "a"}, {"name": "b"}]})
        >>> teams_entry(fleet, 5.0)
        {'fleet': 'f', 'teams': ['a', 'b'], 'time': 5.0}
    """
    return {"fleet": fleet.fleet, "teams": [t.name for t in fleet.teams], "time": now}


def publish_teams(fleet: Fleet, now: float | None = None) -> None:
    """Write ``fleet``'s team names to Ray's KV (needs a connection to Ray)."""
    from ray_ladder.cluster import ray_private

    entry = teams_entry(fleet, time.time() if now is None else now)
    ray_private.kv_put(TEAMS_KEY, json.dumps(entry), namespace=KV_NAMESPACE)


def live_teams(entry: Mapping[str, Any] | None, now: float) -> tuple[str, list[str]] | None:
    """The fleet's name and teams from a published entry, or ``None`` when there is none
    or it is stale.

    Example:
        >>> live_teams({"fleet": "f", "teams": ["a"], "time": 100.0}, now=101.0)
        ('f', ['a'])
        >>> live_teams({"fleet": "f", "teams": ["a"], "time": 0.0}, now=101.0) is None
        True
    """
    if not entry or now - float(entry.get("time", 0.0)) > TEAMS_STALE_S:
        return None
    return str(entry.get("fleet", "")), [str(t) for t in entry.get("teams") or ()]


def fleet_teams(now: float | None = None) -> tuple[str, list[str]] | None:
    """The running fleet's name and teams, read from Ray's KV (``None``: not connected to
    Ray, or no arbiter runs)."""
    from ray_ladder.cluster import ray_private

    if not ray_private.kv_initialized():
        return None
    raw = ray_private.kv_get(TEAMS_KEY, namespace=KV_NAMESPACE)
    entry = json.loads(raw) if raw else None
    return live_teams(entry, time.time() if now is None else now)


def check_bound_team(team: Any) -> str | None:
    """``team`` if it may be bound now: a team's name, and one of the running fleet's
    teams when an arbiter runs on the cluster this process is connected to.

    Raises:
        ValueError: not a team's name, or not one of the fleet's teams (the message names
            them).

    Example:
        >>> check_bound_team("research")  # not connected to Ray: the name's form only
        'research'
    """
    name = check_team(team)
    if name is None:
        return None
    live = fleet_teams()
    return name if live is None else check_fleet_team(name, *live)
