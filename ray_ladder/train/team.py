"""A Train run bound to a fleet team: its grants as gang limits, its demand, its reclaim move,
and its spent budget's demotion.

:class:`~ray_ladder.train.LadderScalingPolicy` keeps one :class:`TeamRun` when the run
is bound to a team (``LadderTrainer(team=)``). A rung a gang runs on is one unit of the
fleet's shared rung of the same name per worker. The rules are pure
(:func:`gang_limits`, :func:`budget_taken`, :func:`ray_ladder.core.teamwork.wanted_units`
and :func:`ray_ladder.train.lifecycle.on_reclaim`); this class reads the team's grants
entry, reports the run's demand at most once a second and asks the planner where to move.
A rung the team's spent ``demote`` budget takes is left the way a reclaimed one is: the
workers stop at their next checkpoint and the group restarts on the rung that fits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ray_ladder.cluster.grants import (
    GrantReader,
    GrantSource,
    budget_hold,
    budget_rungs,
    report_demand,
)
from ray_ladder.core.events import TransitionCause
from ray_ladder.core.ledger import part_entry
from ray_ladder.core.placement import NodeState
from ray_ladder.core.teamwork import wanted_units
from ray_ladder.train import lifecycle
from ray_ladder.train.channel import Channel
from ray_ladder.train.gang import GangCapacity, Held, gang_size
from ray_ladder.train.planner import GangPlanner

logger = logging.getLogger(__name__)

#: A team-bound Train run reports its demand to the fleet arbiter at most this often.
DEMAND_EVERY_S = 1.0


@dataclass(frozen=True)
class GangLimits:
    """What a team's grants entry means for one run's gangs.

    Attributes:
        denied: Shared rungs where the team's units granted and not reclaimed are fewer
            than the rung's gang (not obtainable for a new group, never climbed to).
        going: A reclaim notice stands on the team's units of the rung the group runs
            on: it moves at its next checkpoint (a run cannot tell which of the team's
            units are its own, so every run of the team there moves).
        deadline: The notice's deadline (wall clock; ``None``: none given).
    """

    denied: frozenset[str] = frozenset()
    going: bool = False
    deadline: float | None = None


def gang_limits(entry: Mapping[str, Any] | None, gangs: Mapping[str, int],
                placed: str | None) -> GangLimits:
    """The limits of the team's grants ``entry`` for gangs of ``gangs`` workers per rung,
    the group running on ``placed`` (``None``: none runs). No entry: no limits.

    Example:
        >>> entry = {"rungs": {"h100": {"held": 2, "noticed": 2, "deadline": 30.0}}}
        >>> gang_limits(entry, {"h100": 2, "a100": 2}, "h100")
        GangLimits(denied=frozenset({'h100'}), going=True, deadline=30.0)
    """
    if entry is None:
        return GangLimits()
    denied: set[str] = set()
    going, deadline = False, None
    for rung, grant in (entry.get("rungs") or {}).items():
        if rung not in gangs:
            continue
        held, noticed = int(grant.get("held", 0)), int(grant.get("noticed", 0))
        if held - noticed < gangs[rung]:
            denied.add(rung)
        if rung == placed and noticed > 0:
            going, deadline = True, grant.get("deadline")
    return GangLimits(frozenset(denied), going, deadline)


def budget_taken(entry: Mapping[str, Any] | None, costs: Mapping[str, float],
                 eligible: Sequence[str], fits: Mapping[str, bool],
                 placed: str | None) -> frozenset[str]:
    """The rungs a spent ``demote`` budget in the team's grants ``entry`` takes from a run
    (the one rule, :func:`~ray_ladder.cluster.grants.budget_rungs`, over ``eligible``
    with ``fits``: whose gang fits now; the running group's rung ``placed`` counts as
    fitting). ``queue`` and ``reject`` take nothing from a Train run (docs/teams.md).

    Example:
        >>> entry = {"team": "d", "budget": "demote"}
        >>> costs = {"a100": 4.0, "cpu": 0.5}
        >>> sorted(budget_taken(entry, costs, ["a100", "cpu"], {"cpu": True}, "a100"))
        ['a100']
        >>> budget_taken(entry, costs, ["a100", "cpu"], {"cpu": False}, "a100")
        frozenset()
    """
    hold = budget_hold(entry)
    if hold is None or hold.action != "demote":
        return frozenset()
    obtainable = {**fits, **({placed: True} if placed else {})}
    return frozenset(budget_rungs(hold.action, costs, eligible, obtainable))


class TeamRun:
    """One Train run of a fleet team: reads the team's grants, reports its demand, and
    asks its workers to stop at their next checkpoint on a reclaim notice.

    Args:
        team: The fleet team (the operator's binding).
        user: The name its demand entry goes under (``train:<run>``).
        planner: The run's planner (its rungs, gangs and selector).
        channel: The run's channel to its workers.
        grant_source: ``team -> its grants entry or None`` (default: Ray's KV).
        report: ``(team, user, wants)`` (default: :func:`grants.report_demand`).
        wall_clock: For the demand's rate limit.

    Example:
        >>> run = TeamRun("b", "train:r1", planner, Channel("r1"),
        ...               grant_source=lambda t: None, report=print)  # doctest: +SKIP
    """

    def __init__(self, team: str, user: str, planner: GangPlanner, channel: Channel, *,
                 grant_source: GrantSource | None = None,
                 report: Callable[[str, str, dict[str, int]], None] | None = None,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.team, self.user, self.planner, self.channel = team, user, planner, channel
        self._grants = grant_source or GrantReader().get
        self._report = report or report_demand
        self._wall = wall_clock
        self._reported_at = float("-inf")
        self.gangs = {name: gang_size(planner.train_ladder.rung(name))
                      for name in planner.eligible}
        self.costs = {r.name: r.cost_per_hour for r in planner.train_ladder.rungs}
        #: The last move asked for was off a rung the spent budget takes (not a reclaim).
        self.demoting = False

    @classmethod
    def of(cls, team: str | None, run: str, planner: GangPlanner,
           channel: Channel) -> TeamRun | None:
        """The run's team part (``None``: the run is bound to no team)."""
        return None if team is None else cls(team, f"train:{run}", planner, channel)

    def denied(self, placed: str | None,
               capacity: Mapping[str, GangCapacity]) -> frozenset[str]:
        """The team's rungs the run may not take now: its shared rungs without enough
        units granted (:attr:`GangLimits.denied`) and those its spent budget takes
        (:func:`budget_taken`, ``capacity``: the planner's, now), ``placed``'s group
        running (``None``: none); reports the run's demand first."""
        self.report(placed)
        entry = self._entry()
        return (gang_limits(entry, self.gangs, placed).denied
                | self._budget(entry, placed, capacity))

    def limits(self, placed: str | None) -> GangLimits:
        """The team's grants as limits now (the last entry read while the arbiter is down)."""
        return gang_limits(self._entry(), self.gangs, placed)

    def _entry(self) -> Mapping[str, Any] | None:
        """The team's entry narrowed to this run's share (the team ledger)."""
        try:
            return part_entry(self._grants(self.team), self.user)
        except Exception:  # the KV may be slow; no entry read is no limit
            logger.debug("grants read failed", exc_info=True)
            return None

    def _budget(self, entry: Mapping[str, Any] | None, placed: str | None,
                capacity: Mapping[str, GangCapacity]) -> frozenset[str]:
        fits = {name: c.obtainable for name, c in capacity.items()}
        return budget_taken(entry, self.costs, self.planner.eligible, fits, placed)

    def report(self, placed: str | None) -> None:
        """Tell the arbiter what the run wants (at most every ``DEMAND_EVERY_S``): its
        gang's units where it runs, and a gang on the best rung while below it or waiting."""
        now = self._wall()
        if now - self._reported_at < DEMAND_EVERY_S:
            return
        self._reported_at = now
        on = {placed: self.gangs[placed]} if placed in self.gangs else {}
        wants = wanted_units(on, self.planner.eligible, waiting=0 if on else 1,
                             best_units=self.gangs[self.planner.top])
        try:
            self._report(self.team, self.user, wants)
        except Exception:  # the arbiter's demand is advisory: never fail a run for it
            logger.debug("demand report failed", exc_info=True)

    def move_why(self, placed: str, state: lifecycle.RunState,
                 wall: float) -> tuple[str, TransitionCause, str]:
        """The event reason, the cause and the span's end (``""``: the resize says) of
        the move :meth:`step` asked for: off a rung the budget takes, or reclaimed."""
        if self.demoting:  # as the other ladders say it: the rung is unobtainable
            why = lifecycle.budget_reason(self.team)
            return f"{placed} unobtainable: {why}", "lost", why
        reason = lifecycle.reclaim_reason(self.team, state, wall)
        return f"{placed} {reason}", "preemption_notice", ""

    def step(self, state: lifecycle.RunState, placed: str, nodes: Iterable[NodeState],
             held: Held, now: float) -> lifecycle.Step:
        """While ``placed``'s group runs: the reclaim step (:func:`lifecycle.on_reclaim`),
        going when a reclaim notice stands or the spent budget takes ``placed``
        (:attr:`demoting`), its target the best eligible rung whose gang fits now, the
        team's denied and budget-taken rungs and ``placed`` left out. A ``notice`` or
        ``cancel`` is written to the workers here; the caller acts on a ``move``."""
        self.report(placed)
        entry = self._entry()
        limits = gang_limits(entry, self.gangs, placed)
        nodes = list(nodes)
        taken = self._budget(entry, placed, self.planner.capacity(nodes, held=held))
        demoted = placed in taken
        going = limits.going or demoted
        parked = self.channel.parked() if lifecycle.awaits_park(state) else None
        target = None
        if going or isinstance(state, lifecycle.Noticed):
            target = self.planner.place(nodes, now, held=held,
                                        deny=limits.denied | taken | {placed}).rung
        self.demoting = demoted and not limits.going
        step = lifecycle.on_reclaim(state, going=going,
                                    deadline=limits.deadline if limits.going else None,
                                    parked=parked, target=target)
        if step.kind == "notice":
            self.channel.ask_climb(step.request, step.rung, notice=True)
        elif step.kind == "cancel":
            self.channel.cancel_climb(step.request)
        return step
