"""Work bound to a fleet team (pure): the binding's check and what the work asks for.

A Tune run (``with_ladder(team=)``) and a Train run (``LadderTrainer(team=)``) report
their demand to the fleet arbiter with the same rule: the units they run on now, plus
what they would take on the best eligible rung while any of their work is below it (they
would climb there). Serve (``serve/demand.py``) and tasks have their own shape of it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ray_ladder.core.spec import SLUG_PATTERN


def check_team(value: Any) -> str | None:
    """``value`` if it is a fleet team's name (or ``None``: no team).

    Raises:
        ValueError: not a fleet team's name (lowercase letters, digits, ``.``, ``_``,
            ``-``).

    Example:
        >>> check_team("research")
        'research'
    """
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(SLUG_PATTERN, value):
        raise ValueError(f"team must be a fleet team's name (lowercase letters, digits, "
                         f"'.', '_', '-'), got {value!r}")
    return value


def check_fleet_team(team: str | None, fleet: str, teams: Sequence[str]) -> str | None:
    """``team`` if the fleet ``fleet`` (its teams: ``teams``) has it (or ``None``: no team).

    Raises:
        ValueError: the fleet has no such team (the message names its teams).

    Example:
        >>> check_fleet_team("a", "platform", ["a", "b"])
        'a'
        >>> check_fleet_team("nosuchteam", "platform", ["a", "b"])
        Traceback (most recent call last):
        ...
        ValueError: team 'nosuchteam' is not in fleet 'platform''s teams: a, b (the fleet \
file's teams[]). Fix: bind one of them, or add it under the fleet file's 'teams:'
    """
    if team is None or team in teams:
        return team
    raise ValueError(f"team {team!r} is not in fleet {fleet!r}'s teams: "
                     f"{', '.join(sorted(teams))} (the fleet file's teams[]). Fix: bind one "
                     f"of them, or add it under the fleet file's 'teams:'")


def wanted_units(on: Mapping[str, int], eligible: Sequence[str], *, waiting: int = 0,
                 best_units: int = 1) -> dict[str, int]:
    """Units of each eligible rung a run wants now.

    ``on``: units its work holds per rung now (a trial: one; a Train gang: its workers);
    ``waiting``: pieces of work that hold no rung now (held until one is free, or moving);
    ``best_units``: what one piece takes on the best rung (a Train gang: its workers).
    While any piece is below the best eligible rung, or waits, the run also wants
    ``best_units`` there on top of what it holds there (it would climb).

    Example:
        >>> wanted_units({"a100": 2}, ["h100", "a100"])
        {'h100': 1, 'a100': 2}
        >>> wanted_units({"h100": 2}, ["h100", "a100"], best_units=2)
        {'h100': 2, 'a100': 0}
    """
    out = {name: max(0, int(on.get(name, 0))) for name in eligible}
    if not eligible:
        return out
    best = eligible[0]
    below = any(units > 0 for name, units in out.items() if name != best)
    if below or waiting > 0:
        out[best] += best_units
    return out


def under_notice(entry: Mapping[str, Any] | None, rung: str | None) -> bool:
    """Whether a reclaim notice is in force on the team's units of ``rung`` (``entry``:
    the team's grants entry, ``None`` when no arbiter publishes one).

    Work there checkpoints now: the part that places it moves as much of it as the
    notice takes at that checkpoint, before the units go.

    Example:
        >>> under_notice({"rungs": {"h100": {"held": 2, "noticed": 1}}}, "h100")
        True
    """
    if entry is None or rung is None:
        return False
    grant = (entry.get("rungs") or {}).get(rung) or {}
    return int(grant.get("noticed", 0)) > 0
