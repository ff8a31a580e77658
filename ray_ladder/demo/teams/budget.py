"""The teams scenario's budget moment, for ``bench/teams.py``: on the story's cluster,
team b's Serve app (its ladder ``h100 -> l4 -> shed``) under load holds h100 units with a
tiny ``demote`` budget; once the arbiter marks it spent, how long until b answers from
``l4`` (``budget_exhausted_to_demoted_s``, measured as ``docs/teams.md`` "Budgets" says,
with :mod:`ray_ladder.fleet.budget_watch`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ray_ladder.core.fleet import Fleet
from ray_ladder.demo.teams.scenario import CONTROL_PERIOD_S, H100_UNITS, LOWER, SHARED, Load

#: b's budget: the fleet prices an h100 unit at 1 per second, so one unit spends it in
#: about this many seconds of holding.
BUDGET = 6


def budget_fleet(max_cost: float = BUDGET) -> Fleet:
    """b owns both h100 units and a ``demote`` budget that runs out within seconds."""
    return Fleet.from_yaml(f"""
fleet: teams-budget
control_period_s: {CONTROL_PERIOD_S}
rungs: {{h100: {{resources: {{ladder/h100: 1}}, cost_per_hour: 3600}}}}
teams:
  - {{name: b, quota: {{h100: {H100_UNITS}}}, cohort: onprem,
     budget: {{max_cost: {max_cost}, window_s: 3600, on_exhausted: demote}}}}
""")


@dataclass(frozen=True)
class BudgetRun:
    """What the budget run saw (wall-clock times).

    Attributes:
        spent: The arbiter round that first published b's budget as spent.
        answers: ``(answered at, status, X-Ladder-Rung)`` of each of b's requests.
    """

    spent: float
    answers: list[tuple[float, int, str | None]]

    def figures(self) -> dict[str, Any]:
        """``budget_exhausted_to_demoted_s`` and what backs it: b's answers before (from
        h100: the budget was spent while b served there) and after (from l4), failures."""
        from ray_ladder.fleet.budget_watch import exhausted_to_demoted_s

        cheap = LOWER["b"]
        before = [r for t, code, r in self.answers if t < self.spent and code == 200]
        after = [r for t, code, r in self.answers if t >= self.spent and code == 200]
        return {
            "budget_exhausted_to_demoted_s": exhausted_to_demoted_s(
                self.spent, [(t, r) for t, _, r in self.answers], {cheap}),
            "budget_goal_s": CONTROL_PERIOD_S,
            "budget_answers_on_h100_before_spent": before.count(SHARED),
            "budget_answers_on_h100_after_spent": after.count(SHARED),
            "budget_failed_requests": sum(code != 200 for _, code, _ in self.answers),
            "budget_requests": len(self.answers)}


def run_budget(url: str, rate_hz: float = 20.0, timeout_s: float = 120.0) -> BudgetRun:
    """Deploy b's app bound to team b behind an arbiter with :func:`budget_fleet`, load it
    at ``rate_hz`` until it answered from l4 after the budget was spent, clean up."""
    from ray_ladder.demo.teams.script import _answers, _clean_up, _deploy, _until
    from ray_ladder.fleet import start_arbiter
    from ray_ladder.fleet.budget_watch import spent_at

    arbiter = start_arbiter(budget_fleet())
    load = None
    try:
        _deploy("b", "b", blocking=True)
        _until(lambda: _answers(f"{url}/b", SHARED), timeout_s, "b's app on h100")
        load = Load("b", f"{url}/b", time.time, rate_hz)
        spent = spent_at("b", timeout_s=timeout_s)
        _until(lambda: any(r.answered is not None and r.answered >= spent
                           and r.rung == LOWER["b"] for r in list(load.records)),
               timeout_s, "b's answers from l4 after its budget was spent")
        time.sleep(1.0)  # a second of answers after the move: none from h100
        load.stop()
        return BudgetRun(spent, [(r.t if r.answered is None else r.answered, r.status, r.rung)
                                 for r in list(load.records)])
    finally:
        if load is not None:
            load.stop()
        _clean_up(arbiter)
