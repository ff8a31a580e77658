"""The router's state without Ray: observations in, rung choices out (clock passed in)."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ray_ladder.core.backoff import Backoff
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.events import TransitionEvent
from ray_ladder.core.placement import RungWhy, going_away_reason, held_back, standby_replicas
from ray_ladder.core.selector import Decision, Selector
from ray_ladder.core.spec import Ladder
from ray_ladder.serve.health import MAX_COOLDOWN_S, RungHealth

_DEFAULT_KEY: tuple[object, ...] = ("<none>",)
#: A released rung stays warm for a constrained selector only while that selector has
#: had a request this recently (selectors live on after their traffic stops).
RECENT_USE_S = 60.0
__all__ = ["MAX_COOLDOWN_S", "RECENT_USE_S", "RouterState"]


class RouterState:
    """Which rung each request gets, from what the router observes.

    A compute rung is *obtainable* when the router has not just seen it fail (a failure
    marks it down for ``down_cooldown_s``), the capacity view says an alive node can host
    it, and either its deployment has a RUNNING replica or it keeps no standby replica
    (a *cold* rung: the first request waits for a replica to start). A rung with standby
    replicas counts only once one of them runs and, for one that started under the
    router, answered a ping through the router's handle: the ladder never climbs onto a
    replica its requests cannot reach yet.

    Every decision is made by :class:`~ray_ladder.Selector`: one for requests without
    constraints (its transitions are the ladder's events and metrics) and one per
    distinct set of constraints seen (bounded, least recently used dropped). All of them
    are fed the same observations.

    Args:
        ladder: The ladder.
        down_cooldown_s: A failure's cooldown (doubles on a repeat, to max_cooldown_s).
        on_event: Called with each event of the unconstrained selector.
        max_selectors: Most constrained selectors kept.
        max_events: Recent events kept for :meth:`snapshot`.
        replica_counts_max_age_s: Re-read RUNNING replica counts at least this often
            (see :meth:`needs_replica_counts`).

    Example:
        >>> state = RouterState(ladder, down_cooldown_s=2.0)  # doctest: +SKIP
        >>> state.observe({"h100": 1}, {"h100": True}, now=0.0).rung  # doctest: +SKIP
        'h100'
    """

    def __init__(
        self,
        ladder: Ladder,
        *,
        down_cooldown_s: float,
        on_event: Callable[[TransitionEvent], None] | None = None,
        max_selectors: int = 256,
        max_events: int = 100, max_cooldown_s: float = MAX_COOLDOWN_S,
        replica_counts_max_age_s: float = 5.0,
    ) -> None:
        if down_cooldown_s <= 0:
            raise ValueError(f"down_cooldown_s must be > 0, got {down_cooldown_s}")
        self.ladder = ladder
        self.down_cooldown_s = down_cooldown_s
        self._on_event = on_event
        self._standby = {r.name: standby_replicas(ladder, r) for r in ladder.rungs}
        self._compute = [r.name for r in ladder.rungs if r.is_compute]
        self._running: dict[str, int] = {}
        self._running_at: float | None = None
        self.replica_counts_max_age_s = replica_counts_max_age_s
        self._placeable: dict[str, bool] = {}
        #: One health record per compute rung (down, failure streak, probation).
        self._health = {name: RungHealth() for name in self._compute}
        self._backoff = Backoff(base_s=down_cooldown_s,
                                cap_s=max(max_cooldown_s, down_cooldown_s))
        self._obtainable: dict[str, bool] = {}
        #: Rungs the autoscaler hook released while a better rung is up (see observe).
        self._held: frozenset[str] = frozenset()
        #: Rungs going away (a preemption notice) -> drain deadline (wall clock or None).
        self._going: dict[str, float | None] = {}
        self.events: deque[TransitionEvent] = deque(maxlen=max_events)
        self._max_selectors = max_selectors
        self._selectors: OrderedDict[tuple[object, ...], Selector] = OrderedDict()
        self._decisions: dict[tuple[object, ...], Decision] = {}
        self._selectors[_DEFAULT_KEY] = Selector(ladder, None, on_event=self._record)
        self._used: dict[tuple[object, ...], float] = {}
        self.observations = 0
        #: Compute rungs the last observation found no longer obtainable (requests still
        #: waiting on them should go elsewhere).
        self.lost: list[str] = []
        #: Going-away rungs (a preemption notice) the unconstrained selector has left:
        #: the rung below is warm, so open streams there move before the kill.
        self.leaving: list[str] = []

    # --- observations ------------------------------------------------------------------

    def _record(self, event: TransitionEvent) -> None:
        self.events.append(event)
        if self._on_event is not None:
            self._on_event(event)

    def obtainable(self, now: float) -> dict[str, bool]:
        """Rung name -> obtainable now, as fed to the selectors."""
        out = {}
        for name in self._compute:
            if not self._health[name].counts(now):
                out[name] = False  # down, or failed and no replica has answered since
            elif not self._placeable.get(name, False):
                out[name] = False  # no alive node can host it (a RUNNING count may lag)
            else:
                out[name] = self._running.get(name, 0) > 0 or self._standby[name] == 0
        return out

    def _observe_all(self, now: float) -> Decision:
        before = self._obtainable
        self._obtainable = self.obtainable(now)
        self.lost = [n for n in self._compute if before.get(n) and not self._obtainable[n]]
        self.observations += 1
        why = {n: self.why_unobtainable(n, now) for n in self._compute
               if not self._obtainable[n]}  # words for a fall's event, never an input
        why.update({n: going_away_reason(d, now) for n, d in self._going.items()})
        slow = {n for n, h in self._health.items() if h.slow and h.is_down(now)}
        why.update({n: f"slow: {self._health[n].reason}" for n in slow})
        for key, selector in self._selectors.items():
            self._decisions[key] = selector.observe(self._view(selector), now, why,
                                                    going=self._going, slow=slow)
        default = self._view(self._selectors[_DEFAULT_KEY])
        self.leaving = [n for n in self._going if n in self._compute and not default.get(n)]
        return self._decisions[_DEFAULT_KEY]

    def _view(self, selector: Selector) -> Mapping[str, bool]:
        """What ``selector`` may use: a held rung is left out only where a better rung
        eligible for that selector is obtainable (an eu-only request keeps its eu rung
        even when the hook released it because a better, non-eu rung came up).

        A going-away rung (its nodes drain) is left out too, except for a selector that
        is on it while no lower compute rung it may use is warm: its requests keep the
        draining replica until the next rung runs (:meth:`to_prime` starts it), so the
        move costs no replica start. A selector never climbs to a going-away rung.
        """
        if not self._held and not self._going:
            return self._obtainable
        view = dict(self._obtainable)
        for name in held_back(selector.eligible, self._held, self._obtainable):
            view[name] = False
        for name in self._going:
            if name in view and not (selector.current == name
                                     and self._next_warm(selector, name) is None):
                view[name] = False
        return view

    def _below(self, selector: Selector, rung: str) -> str | None:
        """The best compute rung below ``rung`` that ``selector`` may use and is
        obtainable (warm or not), leaving out other going-away rungs."""
        names = selector.eligible
        for name in names[names.index(rung) + 1:]:
            if name in self._compute and name not in self._going \
                    and self._obtainable.get(name):
                return name
        return None

    def _next_warm(self, selector: Selector, rung: str) -> str | None:
        below = self._below(selector, rung)
        return below if below is not None and self.is_warm(below) else None

    def held_everywhere(self, now: float) -> set[str]:
        """Held rungs that no selector with a request in the last ``RECENT_USE_S`` may use
        (nothing should keep them warm: their node is being given back)."""
        recent = [s for k, s in self._selectors.items()
                  if now - self._used.get(k, float("-inf")) <= RECENT_USE_S]
        return {n for n in self._held if all(not self._view(s).get(n, False) for s in recent)}

    def needs_replica_counts(self, placeable: Mapping[str, bool], now: float) -> bool:
        """Whether the next probe must re-read RUNNING replica counts.

        Reading them (``serve.status()``) is the probe's dearest part, so a probe skips
        it while nothing can change the choice: every compute rung an alive node can host
        and that keeps standby replicas already has one running, capacity is what it was
        at the last probe, and the last read is younger than ``replica_counts_max_age_s``.
        A node that joins or leaves, or a standby replica still starting (the climb back
        waits for it) makes every probe read them again.
        """
        if self._running_at is None or now - self._running_at >= self.replica_counts_max_age_s:
            return True
        if dict(placeable) != self._placeable or self._going:
            return True  # a notice: read counts until the next rung's replica runs
        return any(placeable.get(n, False) and self._standby[n] > 0
                   and self._running.get(n, 0) == 0 for n in self._compute)

    def observe(self, running: Mapping[str, int] | None, placeable: Mapping[str, bool],
                now: float, alive: Iterable[str] = (), held: Iterable[str] = (),
                going_away: Mapping[str, float | None] | None = None) -> Decision:
        """Feed one probe: RUNNING replicas per rung and capacity per rung.

        ``running=None`` keeps the last counts (see :meth:`needs_replica_counts`).
        ``alive`` names rungs whose replicas answered the router since the last probe:
        such a rung has a running replica whatever the last count said.
        ``held`` names rungs the autoscaler hook released while a better rung is up and
        ready (``CapacitySnapshot.held``); ``placeable`` counts them as hostable, and each
        selector leaves them out only when a better rung it may use is obtainable.
        ``going_away`` names rungs whose nodes drain (``CapacitySnapshot.going_away``);
        ``placeable`` counts them as hostable too (requests in flight there finish, so
        they are not "lost"), and :meth:`_view` says who may still use them.

        Returns the unconstrained selector's decision.
        """
        alive = list(alive)  # read twice below
        if running is not None:
            if self._running_at is not None:  # a replica that started under the router:
                for name in self._started(running, alive):
                    self._health[name] = self._health[name].on_probation()
            self._running = dict(running)
            self._running_at = now
        for name in alive:
            if self._running.get(name, 0) == 0:
                self._running[name] = 1
            if name in self._health:
                self._health[name] = self._health[name].answered(now)
        self._placeable = dict(placeable)
        for name in self._compute:  # no node, no replica (Serve's count lags a lost node)
            if not self._placeable.get(name, False):
                self._running[name] = 0
        # A rung whose nodes are all gone starts afresh when capacity returns: its new
        # replica proves itself by answering a ping (_started), not its old failure.
        for name, health in self._health.items():
            if health.probation and not self._placeable.get(name, False):
                self._health[name] = health.forgotten()
        self._held = frozenset(held)
        self._going = dict(going_away or {})
        return self._observe_all(now)

    def _started(self, running: Mapping[str, int], alive: Iterable[str]) -> list[str]:
        """Standby rungs whose replica just started: they count once a ping through the
        router's handle answered (Serve reports RUNNING before the handle can route)."""
        return [n for n in self._compute if self._standby[n] > 0 and running.get(n, 0) > 0
                and self._running.get(n, 0) == 0 and n not in set(alive)]

    def mark_down(self, rung: str, reason: str, now: float,
                  retry_after_s: float | None = None) -> Decision:
        """A request saw ``rung`` fail: unobtainable for the cooldown, re-observe at once.

        The cooldown doubles each time the rung fails again within one applied cooldown
        of the last one's end (a backend that stays down), up to ``MAX_COOLDOWN_S``
        (:class:`~ray_ladder.core.backoff.Backoff`, which cannot overflow); a rung that
        stayed up that long starts again from ``down_cooldown_s``; a backend's
        ``retry_after_s`` when longer, at most the cap (``RungHealth.failed``).
        """
        self._health[rung] = self._health[rung].failed(reason, now, self._backoff, retry_after_s)
        return self._observe_all(now)

    def mark_slow(self, rung: str, reason: str, until: float, now: float) -> Decision:
        """``rung`` was found slow (``serve/load.py``): unobtainable until ``until``, its
        retry; re-observe at once (the selectors fall off it with cause ``slow``)."""
        self._health[rung] = self._health[rung].slowed(reason, until)
        return self._observe_all(now)

    def best_compute(self, selector: Selector, exclude: set[str]) -> str | None:
        """The best obtainable eligible compute rung of ``selector`` not in ``exclude``
        (where a request goes on to, or a copy of it). Reads the state only; the ladder
        itself moves by the selectors' decisions."""
        return selector.best_obtainable(self._view(selector), compute_only=True,
                                        exclude=exclude)

    def can_come_back(self, selector: Selector) -> bool:
        """Whether an eligible compute rung of ``selector`` has an alive node to host it
        and no preemption notice: one that is unobtainable now only because its replica
        restarts or its failure cooldown runs comes back without new capacity."""
        return any(n in self._standby and self.ladder.rung(n).is_compute
                   and self._placeable.get(n, False) and n not in self._going
                   for n in selector.eligible)

    def why_unobtainable(self, rung: str, now: float) -> str:
        """A short reason why compute ``rung`` is not obtainable (for logs and state)."""
        why = self.why_not(rung, now)
        return "obtainable" if why is None else why["reason"]

    def why_not(self, rung: str, now: float) -> RungWhy | None:
        """Why compute ``rung`` is not obtainable, as data and words (``None``: it is)."""
        going = going_away_reason(self._going[rung], now) if rung in self._going else None
        return self._health[rung].why_not(now, placeable=self._placeable.get(rung, False),
                                          running=self._running.get(rung, 0),
                                          held=rung in self._held, going=going)

    def on_probation(self, now: float) -> list[str]:
        """Rungs past their cooldown that must answer once before they count again (the
        router pings them: an external backend that is still down fails the ping)."""
        return [n for n, h in self._health.items() if h.probation
                and not h.is_down(now) and self._placeable.get(n, False)]

    def is_down(self, rung: str, now: float) -> bool:
        """Whether a failure marked ``rung`` down and its cooldown is still running."""
        health = self._health.get(rung)
        return health is not None and health.is_down(now)

    # --- choices -----------------------------------------------------------------------

    def selector(self, constraints: Constraints | None, now: float) -> Selector:
        """The selector for ``constraints`` (created and fed the last observation)."""
        key = _DEFAULT_KEY if constraints is None or constraints.empty else constraints.key()
        self._used[key] = now
        selector = self._selectors.get(key)
        if selector is None:
            selector = Selector(self.ladder, constraints)
            self._decisions[key] = selector.observe(self._view(selector), now,
                                                    going=self._going)
            self._selectors[key] = selector
            while len(self._selectors) > self._max_selectors + 1:
                for old in self._selectors:
                    if old != _DEFAULT_KEY:
                        del self._selectors[old]
                        self._decisions.pop(old, None)
                        self._used.pop(old, None)
                        break
        elif key != _DEFAULT_KEY:
            self._selectors.move_to_end(key)
        return selector

    def degraded_s(self, constraints: Constraints | None) -> float:
        """Seconds below the best eligible rung for ``constraints``, at the last observation."""
        key = _DEFAULT_KEY if constraints is None or constraints.empty else constraints.key()
        decision = self._decisions.get(key)
        return decision.degraded_s if decision is not None else 0.0

    def replicas(self, rung: str) -> int:
        """RUNNING replicas of ``rung`` at the last probe."""
        return self._running.get(rung, 0)

    def is_warm(self, rung: str) -> bool:
        """Whether ``rung`` had a RUNNING replica at the last probe."""
        return self._running.get(rung, 0) > 0

    def to_prime(self) -> list[str]:
        """Cold rungs worth starting: obtainable, no RUNNING replica, and above a
        selector's current rung (so the ladder can climb to a warm replica), or the rung
        that takes over from a current rung going away (a preemption notice)."""
        wanted: set[str] = set()
        for selector in self._selectors.values():
            current = selector.current
            if current in self._going:  # a notice: warm the rung that takes over, now
                below = self._below(selector, current)
                if below is not None and not self.is_warm(below):
                    wanted.add(below)
            view = self._view(selector)
            for name in selector.eligible:
                if name == current:
                    break
                if name in self._standby and view.get(name) \
                        and not self.is_warm(name):
                    wanted.add(name)
        return [n for n in self._compute if n in wanted]

    # --- reporting ---------------------------------------------------------------------

    def selectors_in_use(self) -> list[Selector]:
        """Every selector, the unconstrained one first (for ``ray-ladder status``)."""
        return list(self._selectors.values())

    @property
    def current(self) -> str | None:
        """The unconstrained selector's rung."""
        return self._selectors[_DEFAULT_KEY].current

    def snapshot(self, now: float) -> dict[str, Any]:
        """JSON-ready state for ``GET /-/ladder``."""
        default = self._selectors[_DEFAULT_KEY]
        rungs = []
        for rung in self.ladder.rungs:
            health = self._health.get(rung.name, RungHealth())
            rungs.append({
                "name": rung.name,
                "kind": rung.kind,
                "obtainable": True if not rung.is_compute
                else self._obtainable.get(rung.name, False),
                "running_replicas": self._running.get(rung.name, 0) if rung.is_compute
                else None,
                "standby_replicas": self._standby[rung.name] if rung.is_compute else None,
                "down_for_s": round(health.down_for_s(now), 3),
                "down_reason": health.reason if health.is_down(now) else None,
                "slow": health.slow and health.is_down(now),
                "released_by_hook": rung.name in self._held,
                "going_away": rung.name in self._going,
                "streak": default.streak(rung.name) if rung.name in default.eligible else 0,
            })
        current = default.current
        return {
            "ladder": self.ladder.name,
            "current": current,
            "current_index": self.ladder.index(current) if current is not None else -1,
            "degraded_s": round(self.degraded_s(None), 3),
            "promotion_hysteresis": default.hysteresis,
            "probe_interval_s": self.ladder.policy.probe_interval_s,
            "observations": self.observations,
            "rungs": rungs,
            "events": [e.to_dict() for e in self.events],
        }
