"""Routing state of one ``@ladder_task`` option set: selector, capacity, lanes, retries."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import ray

from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.cluster.grants import budget_rungs, report_demand
from ray_ladder.core.context import RungContext
from ray_ladder.core.events import Direction, TransitionEvent
from ray_ladder.core.exceptions import (
    Attempt,
    AttemptCause,
    BudgetExhaustedError,
    LadderExhaustedError,
)
from ray_ladder.core.placement import RungWhy, rung_why
from ray_ladder.core.selector import Selector
from ray_ladder.task.options import TaskSpec, attempt_options, effective_ladder
from ray_ladder.task.orchestrator.calls import Call
from ray_ladder.task.orchestrator.lanes import Lane
from ray_ladder.task.orchestrator.nodes import NodeCache
from ray_ladder.task.policy import admit
from ray_ladder.task.runner import make_batch_runner

logger = logging.getLogger("ray_ladder.task")
#: A team-bound task reports its demand to the fleet arbiter at most this often.
DEMAND_EVERY_S = 1.0
EWMA_ALPHA = 0.2


@dataclass(frozen=True)
class Ports:
    """What a task's state may ask of its orchestrator: narrow callbacks, no back-reference.

    Attributes:
        nodes: The orchestrator's node cache (shared by every task).
        emit: ``(family, task name, event)``: record and log one transition event.
        spawn: Run a coroutine in the background (the orchestrator keeps a reference).
        count: Add one to a named counter of the orchestrator's stats.
        refresh_all: Re-observe capacity in every task (a node just became suspect).
    """

    nodes: NodeCache
    emit: Callable[[str, str, TransitionEvent], None]
    spawn: Callable[[Coroutine[Any, Any, Any]], None]
    count: Callable[[str], None]
    refresh_all: Callable[[], None]


class TaskState:
    """Routing state of one registered ladder task (one option set).

    The rung of each call comes from the shared :class:`Selector`, observed once per
    capacity refresh and again on every failure it sees; a call that already fell from
    a rung (pending timeout, a ``fallback_on`` error) asks the same selector for the best
    obtainable rung at or below its floor (:meth:`Selector.best_obtainable`).
    """

    def __init__(self, ports: Ports, key: str, spec: TaskSpec) -> None:
        self.ports = ports
        self.key = key
        self.family = spec.family
        self.name = spec.name
        opts = spec.options
        self.ladder = effective_ladder(spec.ladder, opts.ray)
        self.constraints = opts.constraints
        self.fallback_on = opts.fallback_on
        self.pending_timeout_s = opts.pending_timeout(spec.ladder)
        self.max_attempts = opts.attempts_allowed(spec.ladder)
        self.probe_s = self.ladder.policy.probe_interval_s
        self.index = {r.name: i for i, r in enumerate(self.ladder.rungs)}
        self.selector = Selector(self.ladder, self.constraints, on_event=self._on_event)
        ports.nodes.follow(self.ladder.name)
        #: The fleet team the task is bound to (docs/teams.md); None: no fleet.
        self.team = opts.team
        #: Its name in the team's ledger and demand entries.
        self.part = f"task:{self.name}"
        self._demand_at = float("-inf")
        self.view = CapacityView(self.ladder, refresh_interval_s=self.probe_s,
                                 node_source=ports.nodes.nodes,
                                 constraints=self.constraints,
                                 hook_source=ports.nodes.hook_roles, team=self.team,
                                 part=self.part)
        eligible = [r for r in self.ladder.eligible(self.constraints) if r.is_compute]
        contexts = {r.name: RungContext.of(self.ladder, r.name) for r in eligible}
        runner = ray.remote(make_batch_runner(spec.fn, spec.name, contexts))
        self.runners = {r.name: runner.options(num_returns="streaming",
                                               **attempt_options(r, opts.ray, spec.name))
                        for r in eligible}
        self.lanes = {r.name: Lane(self, r.name) for r in eligible}
        self.congested: dict[str, float] = {}  # rung -> when an attempt timed out pending
        self.large_answers = False  # an answer was large: no batching (see Lane._single)
        self.obtainable: dict[str, bool] = {}
        #: Calls a spent ``queue`` budget keeps off their priced rung (dispatched again
        #: once the budget is ``ok``: they neither fall nor fail).
        self.parked: list[Call] = []
        self._costs = {r.name: r.cost_per_hour for r in self.ladder.rungs}
        self.ewma: float | None = None
        self.snapshot: Any = None
        self._seen_version = -1
        self.refresh(force=True)

    # --- capacity and decisions ----------------------------------------------------------

    def _on_event(self, event: TransitionEvent) -> None:
        self.ports.emit(self.family, self.name, event)

    def refresh(self, force: bool = False) -> None:
        """Observe capacity once per node refresh (and on each failure, with ``force``)."""
        nodes = self.ports.nodes
        if not force and self._seen_version == nodes.version:
            return
        self._seen_version = nodes.version
        snap = self.snapshot = self.view.refresh()
        for rung, since in list(self.congested.items()):
            if nodes.refreshed_at > since and snap.rungs[rung].available > 0:
                del self.congested[rung]
        self.obtainable = {n: ok and n not in self.congested
                           for n, ok in snap.obtainable.items()}
        self.selector.observe(self.obtainable, now=time.time(), why=snap.held,
                              going=snap.going_away)

    def why_unobtainable(self) -> dict[str, RungWhy]:
        """Rung -> why it is unobtainable for this task, where known (``ray-ladder
        status``): the capacity view's reason, else a pending timeout's congestion."""
        snap = self.snapshot
        out = snap.why_unobtainable() if snap is not None else {}
        for rung in self.congested:
            if not self.obtainable.get(rung, True) and rung not in out:
                out[rung] = rung_why("busy", "an attempt waited past its pending timeout; "
                                             "it counts again once a node has room")
        return out

    def wanted_units(self) -> dict[str, int]:
        """What the task wants of each rung now: its attempts and queued calls there, and
        one on the best eligible rung while it runs below it (it would climb)."""
        wants = {rung: len(lane.batches) + len(lane.queue) for rung, lane in self.lanes.items()}
        best = next(iter(self.lanes), None)
        if best is not None and any(wants.values()):
            wants[best] = max(wants[best], 1)
        return wants

    def _report_demand(self) -> None:
        """A team-bound task tells the fleet arbiter what it wants (at most once a second)."""
        now = time.time()
        if self.team is None or now - self._demand_at < DEMAND_EVERY_S:
            return
        self._demand_at = now
        try:
            report_demand(self.team, self.part, self.wanted_units(), now)
        except Exception:  # the arbiter's demand is advisory: never fail the task for it
            logger.debug("demand report failed", exc_info=True)

    def tick(self) -> None:
        """After a node refresh: observe, then move work off rungs that are gone."""
        self._report_demand()
        self.refresh(force=True)
        self._unpark()
        for lane in self.lanes.values():
            if self.obtainable.get(lane.rung):
                lane.pump()
            else:  # the reason names a preemption notice (or the hook) when it is one
                why = self.snapshot.held.get(lane.rung)
                lane.evacuate(f"{lane.rung} became unobtainable" + (f" ({why})" if why else ""),
                              "unobtainable")

    def lower_obtainable(self, rung: str) -> bool:
        """Whether an eligible compute rung below ``rung`` is obtainable now."""
        i = self.index[rung]
        return any(self.obtainable.get(n) and self.index[n] > i for n in self.lanes)

    def route(self, call: Call) -> str | None:
        """The rung for ``call`` now, or ``None`` when no eligible rung is obtainable."""
        self.refresh()
        current = self.selector.current
        if current in self.lanes and call.floor <= self.index[current]:
            return current
        if current not in self.lanes:
            return None
        start = max(call.floor, self.index[current])
        if start >= len(self.ladder.rungs):
            return None
        pick = self.selector.best_obtainable(self.obtainable, compute_only=True,
                                             at_or_below=self.ladder.rungs[start].name)
        return pick if pick in self.lanes else None

    def state_of(self, rung: str) -> str:
        """Why ``rung`` is or is not obtainable, for attempt records."""
        if rung in self.congested:
            return "busy: an attempt waited past pending_timeout_s"
        if rung in self.snapshot.held:
            return self.snapshot.held[rung]
        if not self.obtainable.get(rung):
            return "absent: no alive node can host it"
        return f"{self.snapshot.rungs[rung].state}, but above where this call could go"

    # --- calls ---------------------------------------------------------------------------

    def dispatch(self, call: Call, came_from: str | None = None, reason: str = "") -> None:
        """Send ``call`` to the lane of its rung, or fail it with LadderExhaustedError."""
        if call.done:
            return
        rung = self.route(call) if call.submitted < self.max_attempts else None
        action = admit(call.submitted, self.max_attempts, routable=rung is not None)
        if action.kind == "exhaust" or rung is None:
            self.exhaust(call, action.reason, action.cause)
            return
        if self._budget_holds(call, rung):
            return
        if came_from is not None:
            a, b = self.index[came_from], self.index[rung]
            direction: Direction | None = "down" if b > a else "up" if b < a else None
            self.ports.emit(self.family, self.name, TransitionEvent(
                time.time(), self.ladder.name, came_from, rung, direction, f"call: {reason}",
                kind="call", cause="other"))  # one call's move; its attempt has the cause
        self.lanes[rung].enqueue(call)

    def _budget_holds(self, call: Call, rung: str) -> bool:
        """A spent ``queue`` or ``reject`` budget keeps ``call`` off priced ``rung``
        (``grants.budget_rungs``): parked, or failed with BudgetExhaustedError."""
        hold = self.snapshot.budget if self.snapshot is not None else None
        if hold is None or hold.action == "demote" \
                or not budget_rungs(hold.action, self._costs, [rung], {}):
            return False
        if hold.action == "queue":
            self.parked.append(call)
            return True
        now = time.time()
        call.attempts.append(Attempt(rung, hold.reason(now), now, cause="budget"))
        self.fail(call, BudgetExhaustedError(
            self.ladder.name, list(call.attempts),
            hold.retry_after_s(now, self.ladder.policy.retry_after_s), team=hold.team,
            until=hold.until))
        return True

    def _unpark(self) -> None:
        """Parked calls go on once the budget no longer queues (a new window)."""
        hold = self.snapshot.budget if self.snapshot is not None else None
        if self.parked and (hold is None or hold.action != "queue"):
            parked, self.parked = self.parked, []
            for call in parked:
                self.dispatch(call)

    def retry(self, call: Call, rung: str, reason: str, *, fall: bool,
              cause: AttemptCause, error: str | None = None) -> None:
        """Record a failed attempt on ``rung`` (``reason`` for people, ``cause`` and
        ``error`` as data) and send the call on (one rung down if ``fall``)."""
        if call.done:
            return
        call.attempts.append(Attempt(rung, reason, time.time(), cause=cause, error=error))
        if fall:
            call.floor = max(call.floor, self.index[rung] + 1)
        self.dispatch(call, came_from=rung, reason=reason)

    def exhaust(self, call: Call, reason: str, cause: AttemptCause) -> None:
        attempts = list(call.attempts)
        tried = {a.rung for a in attempts}
        now = time.time()
        for name in self.lanes:
            if name not in tried:
                attempts.append(Attempt(name, f"not used ({self.state_of(name)})", now,
                                        cause="not_used"))
        attempts.append(Attempt(None, reason, now, cause=cause))
        call.attempts = attempts
        self.fail(call, LadderExhaustedError(self.ladder.name, attempts,
                                             self.ladder.policy.retry_after_s))

    def succeed(self, call: Call, rung: str, value: Any) -> None:
        if not call.done:
            call.rung = rung
            call.future.set_result(value)

    def fail(self, call: Call, err: BaseException, rung: str | None = None) -> None:
        if not call.done:
            call.rung = rung
            call.future.set_exception(err)

    def cancel(self, call: Call) -> None:
        """The caller cancelled: drop the call; stop its attempt if it runs alone."""
        lane, batch = call.lane, call.batch
        if lane is not None and call in lane.queue:
            lane.queue.remove(call)
        if batch is not None and batch.cancel_reason is None \
                and all(c.done for c in batch.calls):
            # Ray's soft cancel does not interrupt a running streaming task: force it.
            batch.cancel("cancelled by the caller", "other")

    def suspect(self, node_id: str, ttl_s: float) -> None:
        """Count ``node_id`` dead for ``ttl_s`` (it just killed an attempt), everywhere."""
        self.ports.nodes.suspect(node_id, ttl_s)
        self.ports.refresh_all()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run ``coro`` (an attempt's driver) in the orchestrator's background."""
        self.ports.spawn(coro)

    def count(self, stat: str) -> None:
        """Add one to the orchestrator's counter ``stat``."""
        self.ports.count(stat)

    def observe_duration(self, seconds: float) -> None:
        e = self.ewma
        self.ewma = seconds if e is None else e + EWMA_ALPHA * (seconds - e)
