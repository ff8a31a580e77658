"""A Tune run bound to a fleet team: its grants cap its trials; its demand goes to the arbiter.

The :class:`~ray_ladder.tune.LadderScheduler` keeps one :class:`TeamBook`. Each time it
looks at its live trials it tells the book (:meth:`TeamBook.observe`), which notes which
trials hold which rung and reports each team-bound trainable's demand (at most once a
second). The scheduler then asks the book how many placements the team's grants leave a
trial (:meth:`TeamBook.free`) and whether its rung is going away for it
(:meth:`TeamBook.going`: a drain, a reclaim notice on all the team's units there, or
more of the team's trials there than the units granted and not reclaimed) or taken by the
team's spent ``demote`` budget (:meth:`TeamBook.demoted`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ray_ladder.cluster.capacity import CapacitySnapshot
from ray_ladder.cluster.grants import budget_rungs, report_demand
from ray_ladder.core.teamwork import wanted_units
from ray_ladder.tune._state import TrialState
from ray_ladder.tune.lifecycle import HELD

logger = logging.getLogger(__name__)

#: A team-bound Tune run reports its demand to the fleet arbiter at most this often.
DEMAND_EVERY_S = 1.0


def demand_user(state: TrialState) -> str:
    """The name a trainable's demand entry goes under (one per ``with_ladder`` call).

    Example:
        >>> demand_user(state)  # doctest: +SKIP
        'tune:shared:3f2a9c1b'
    """
    return state.spec.part


class TeamBook:
    """Which team-bound trials hold (or are promised) which rung, and their demand.

    Args:
        report: ``(team, user, wants)``: sends a demand entry (default: Ray's KV,
            :func:`ray_ladder.cluster.grants.report_demand`); injectable for tests.

    Example:
        >>> book = TeamBook(report=lambda team, user, wants: None)
        >>> book.observe([], now=0.0)
    """

    def __init__(self, report: Any = None) -> None:
        self._report = report
        #: team -> rung -> ids of its trials there (running, starting or promised)
        self._on: dict[str, dict[str, list[str]]] = {}
        self._reported_at = float("-inf")

    def observe(self, states: Iterable[TrialState], now: float) -> None:
        """Note where the live trials are; report demand when ``DEMAND_EVERY_S`` passed."""
        on: dict[str, dict[str, list[str]]] = {}
        users: dict[str, tuple[str, TrialState, dict[str, int], int]] = {}
        for state in states:
            team = state.spec.team
            if team is None:
                continue
            _, first, units, waiting = users.get(demand_user(state), (team, state, {}, 0))
            if state.placed is None or state.phase in HELD:
                waiting += 1  # held PAUSED by the ladder: it holds nothing now
            else:
                on.setdefault(team, {}).setdefault(state.placed, []).append(state.trial_id)
                units[state.placed] = units.get(state.placed, 0) + 1
            users[demand_user(state)] = (team, first, units, waiting)
        self._on = {team: {rung: sorted(ids) for rung, ids in rungs.items()}
                    for team, rungs in on.items()}
        if now - self._reported_at < DEMAND_EVERY_S:
            return
        self._reported_at = now
        for user, (team, state, units, waiting) in users.items():
            wants = wanted_units(units, state.selector.eligible, waiting=waiting)
            try:
                (self._report or report_demand)(team, user, wants)
            except Exception:  # the arbiter's demand is advisory: never fail a run for it
                logger.debug("demand report failed", exc_info=True)

    def free(self, snap: CapacitySnapshot, state: TrialState, rung: str, free: int) -> int:
        """Placements ``state``'s trial may take on ``rung`` (``free``: what the nodes
        leave it): none on a rung the team's view holds back or its spent budget takes
        (:meth:`budget_taken`), else no more than the
        team's units granted and not reclaimed there, less those the team's other trials
        of this run hold."""
        team = state.spec.team
        if team is not None and rung in snap.held and not snap.obtainable.get(rung):
            return 0  # held back for the team (no grant, a spent budget's demotion...)
        if rung in self.budget_taken(snap, state):
            return 0  # dearer than the floor of what it may use, its own rung counted
        granted = snap.granted.get(rung)
        if team is None or granted is None:
            return free
        others = [t for t in self._on.get(team, {}).get(rung, ()) if t != state.trial_id]
        return min(free, granted - len(others))

    def going(self, snap: CapacitySnapshot, state: TrialState) -> bool:
        """Whether the trial's rung is going away for it: its nodes drain, every unit the
        team holds there is under a reclaim notice, or the team's trials there outnumber
        its units granted and not reclaimed (the last by trial id leave)."""
        placed = state.placed
        if placed is None:
            return False
        if placed in snap.going_away:
            return True
        team = state.spec.team
        granted = snap.granted.get(placed)
        if team is None or granted is None:
            return False
        there = self._on.get(team, {}).get(placed, [])
        return state.trial_id in there[max(0, granted):]

    def demoted(self, snap: CapacitySnapshot, state: TrialState) -> bool:
        """Whether the team's spent ``demote`` budget takes the trial's rung
        (:meth:`budget_taken`): it then leaves at its next checkpoint for the cheapest
        rung it may use."""
        return state.placed is not None and state.placed in self.budget_taken(snap, state)

    @staticmethod
    def budget_taken(snap: CapacitySnapshot, state: TrialState) -> frozenset[str]:
        """The rungs the team's spent ``demote`` budget takes from the trial: the one
        rule, :func:`~ray_ladder.cluster.grants.budget_rungs`, over the trial's eligible
        compute rungs, its own rung counted obtainable (the view counts a rung the trial
        fills as busy, which would make a dearer free rung the floor and pull the trial
        back up to it)."""
        hold, placed = snap.budget, state.placed
        if hold is None or hold.action != "demote":
            return frozenset()
        ladder = state.spec.trial_ladder
        eligible = [r.name for r in ladder.rungs
                    if r.is_compute and r.name in state.selector.eligible]
        costs = {r.name: r.cost_per_hour for r in ladder.rungs}
        obtainable = {**snap.obtainable, **({placed: True} if placed else {})}
        return frozenset(budget_rungs(hold.action, costs, eligible, obtainable))
