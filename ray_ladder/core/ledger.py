"""One ledger per team (pure): the team's granted units of a shared rung, shared out
among its parts.

The fleet arbiter grants a *team* units of an on-prem shared rung (``core/arbiter.py``);
a team runs several *parts* at once (Serve apps, task ladders, Tune and Train runs, each
reporting its own demand). Were each part to cap itself at the team's grant, two parts
would together run on twice the units granted, and a lender's reclaimed unit would stay
busy after its deadline (issue 44). So the arbiter shares each team's grant out among
its parts in the same round, and each part caps itself at its own share.

The rule, one place:

1. **Held**: a part keeps the units it held last round, up to what it wants now (no
   part of a team takes a unit from another without a notice); the team's other held
   units go to its parts in order of *placement*: the part that has wanted the rung
   longest first (``since``; ties by part name), each up to the units it wants (its
   held demand, ``core/demand_hold.py``). When the team holds fewer units than its
   parts kept (a notice's deadline passed), the most recently placed give them up
   first. A part's share never exceeds what it wants; the shares never sum to more than
   the team holds.
2. **Noticed**: a reclaim notice on ``k`` of the team's units falls on the **most
   recently placed** parts, each up to its share: the noticed units sum to ``k``, so
   exactly ``k`` units' worth of work moves, and at the deadline (rule 1's cut, same
   order) the parts that keep work there run on no more than the team then holds.

The order is the arbiter's memory (not persisted): a restarted arbiter shares out by
part name until it has seen the parts again.

A part reads the team's entry narrowed to its share (:func:`part_entry`): ``held`` and
``noticed`` become its own, so every consumer's existing cap (Serve replicas, task
attempts, Tune trials, a Train gang) is per part without knowing of the others.

Example:
    >>> shares = allot(2, 1, [Claim("tune:b", 1, since=5.0), Claim("app-b", 1, since=1.0)])
    >>> shares["app-b"], shares["tune:b"]
    (PartGrant(held=1, noticed=0), PartGrant(held=1, noticed=1))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray_ladder.core.arbiter import Holdings


@dataclass(frozen=True, slots=True)
class Claim:
    """What one part of a team wants of a rung.

    Attributes:
        part: The part's name (its demand entry's ``user``: the app, ``task:<name>``,
            ``tune:<ladder>:<uid>``, ``train:...``).
        units: Units it wants (its held demand).
        since: When it began wanting the rung (the arbiter's clock): the earlier, the
            longer it keeps its units.
    """

    part: str
    units: int
    since: float


@dataclass(frozen=True, slots=True)
class PartGrant:
    """A part's share of its team's units of a rung.

    Attributes:
        held: Units it may run on.
        noticed: How many of them are under the team's reclaim notice (they go at the
            notice's deadline).
    """

    held: int
    noticed: int


def placement_order(claims: Sequence[Claim]) -> list[Claim]:
    """``claims``, the longest-placed first (ties by part name)."""
    return sorted(claims, key=lambda c: (c.since, c.part))


def allot(held: int, noticed: int, claims: Sequence[Claim],
          before: Mapping[str, int] | None = None) -> dict[str, PartGrant]:
    """Each part's share of the team's ``held`` units of a rung, ``noticed`` of them under
    a notice (the module doc's rule; ``before``: each part's share last round). Every
    claim gets an entry (``held=0`` when the grant runs out before it).

    Example:
        >>> allot(1, 0, [Claim("x", 2, 0.0), Claim("y", 1, 1.0)])
        {'x': PartGrant(held=1, noticed=0), 'y': PartGrant(held=0, noticed=0)}
        >>> allot(1, 0, [Claim("x", 2, 0.0), Claim("y", 1, 1.0)], before={"y": 1})
        {'x': PartGrant(held=0, noticed=0), 'y': PartGrant(held=1, noticed=0)}
    """
    order = placement_order(claims)
    share = {c.part: min(max(0, c.units), max(0, (before or {}).get(c.part, 0)))
             for c in order}
    over = sum(share.values()) - max(0, held)
    for claim in reversed(order):  # fewer units than kept: the most recent give up first
        cut = min(max(0, over), share[claim.part])
        share[claim.part] -= cut
        over -= cut
    left = max(0, held) - sum(share.values())
    for claim in order:  # the rest in placement order
        more = min(max(0, claim.units) - share[claim.part], left)
        share[claim.part] += more
        left -= more
    going = min(max(0, noticed), max(0, held))
    out: dict[str, PartGrant] = {}
    for claim in reversed(order):  # the notice falls on the most recently placed
        n = min(going, share[claim.part])
        going -= n
        out[claim.part] = PartGrant(share[claim.part], n)
    return {c.part: out[c.part] for c in order}


def share_out(state: Holdings, rungs: Sequence[str],
              claims: Mapping[str, Mapping[str, Sequence[Claim]]],
              before: Mapping[str, Mapping[str, Mapping[str, int]]] | None = None,
              ) -> dict[str, dict[str, dict[str, PartGrant]]]:
    """Team -> rung -> part -> share, for every team that holds units or has claims
    (``state``: the round's holdings and notices; ``claims`` and ``before``: team -> rung
    -> ...).

    Example:
        >>> from ray_ladder.core.arbiter import Holdings
        >>> share_out(Holdings(held={"b": {"h100": 1}}), ["h100"],
        ...           {"b": {"h100": [Claim("app", 1, 0.0)]}})
        {'b': {'h100': {'app': PartGrant(held=1, noticed=0)}}}
    """
    out: dict[str, dict[str, dict[str, PartGrant]]] = {}
    for team in sorted(set(state.held) | set(claims)):
        for rung in rungs:
            noticed = sum(r.units for r in state.reclaims
                          if r.borrower == team and r.rung == rung)
            out.setdefault(team, {})[rung] = allot(
                state.units(team, rung), noticed, (claims.get(team) or {}).get(rung, ()),
                ((before or {}).get(team) or {}).get(rung))
    return out


def part_entry(entry: Mapping[str, Any] | None, part: str | None) -> Mapping[str, Any] | None:
    """The team's grants ``entry`` as the part ``part`` reads it: each shared rung's
    ``held`` and ``noticed`` are the part's share (:func:`allot`); the team's own figures
    stay under ``team_held`` and ``team_noticed``. A rung whose entry has no ``parts``
    (an arbiter from before the ledger), no part, or no entry: ``entry`` unchanged. A part
    the arbiter has not shared out to yet (it has not reported its demand) holds nothing.

    Example:
        >>> entry = {"team": "b", "rungs": {"h100": {"held": 2, "noticed": 1,
        ...          "deadline": 9.0, "parts": {"app-b": {"held": 1, "noticed": 0},
        ...                                     "tune:b": {"held": 1, "noticed": 1}}}}}
        >>> part_entry(entry, "tune:b")["rungs"]["h100"]["noticed"]
        1
        >>> part_entry(entry, "app-b")["rungs"]["h100"]["held"]
        1
        >>> part_entry(entry, "new")["rungs"]["h100"]["held"]
        0
    """
    if entry is None or part is None:
        return entry
    rungs: dict[str, Any] = {}
    for rung, grant in (entry.get("rungs") or {}).items():
        parts = grant.get("parts") if isinstance(grant, Mapping) else None
        if not isinstance(parts, Mapping):
            rungs[rung] = grant
            continue
        mine = parts.get(part) or {}
        rungs[rung] = {**grant, "held": int(mine.get("held", 0)),
                       "noticed": int(mine.get("noticed", 0)),
                       "team_held": grant.get("held", 0), "team_noticed": grant.get("noticed", 0)}
    return {**entry, "rungs": rungs}
