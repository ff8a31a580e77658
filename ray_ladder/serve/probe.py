"""The router's probe: what it reads from Ray and Serve every ``probe_interval_s``, and the
pings it sends (cold rungs to start, rungs on probation, standby rungs to keep warm)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from ray_ladder.cluster.capacity import CapacitySnapshot, CapacityView
from ray_ladder.cluster.grants import (
    HARD_HOLDS,
    GrantReader,
    acted_on,
    report_demand,
    withdraw_demand,
)
from ray_ladder.core.placement import standby_replicas
from ray_ladder.serve.calls import RungCaller
from ray_ladder.serve.demand import wanted_units
from ray_ladder.serve.errors import RungFailed
from ray_ladder.serve.metrics import LadderMetrics
from ray_ladder.serve.scaling import publish_primes, publish_spill
from ray_ladder.serve.state import RouterState

logger = logging.getLogger("ray_ladder.serve")
#: A team-bound app reports its demand to the fleet arbiter at most this often.
DEMAND_EVERY_S = 1.0
#: A team-bound router reads its team's grants entry this often between probes and
#: probes at once when what it acts on changed (a spent budget, a reclaim notice), so it
#: moves within a fraction of the fleet's control period, not a whole probe interval.
TEAM_WATCH_S = 0.05
_UNSET = object()

#: Replica states that take requests: a replica on a draining node is PENDING_MIGRATION
#: and still serves until Serve stops it (before the drain deadline).
SERVING_STATES = frozenset({"RUNNING", "PENDING_MIGRATION"})


def running_replicas(app_name: str, deployments: Mapping[str, str]) -> dict[str, int]:
    """Serving replicas per rung (rung -> its deployment's name) of Serve app
    ``app_name``, from the Serve controller (``serve.status()``: one call)."""
    from ray import serve

    app = serve.status().applications.get(app_name)
    running: dict[str, int] = {}
    for rung, deployment in deployments.items():
        status = app.deployments.get(deployment) if app is not None else None
        states = status.replica_states if status is not None else {}
        running[rung] = sum(n for s, n in states.items()
                            if getattr(s, "value", s) in SERVING_STATES)
    return running


def hard_holds(snapshot: CapacitySnapshot) -> set[str]:
    """Rungs this app may not place work on at all: a spent budget demotes them, or its
    team has no unit of them granted (``grants.HARD_HOLDS``; docs/teams.md)."""
    return {r for r, kind in snapshot.held_kind.items() if kind in HARD_HOLDS}


def placeable_rungs(snapshot: CapacitySnapshot) -> dict[str, bool]:
    """Rung -> whether the router may count it as hostable. Softly held rungs (a hook's
    release) stay hostable: RouterState leaves them out per selector, since a
    constrained request may have no better rung than the released one. Hard holds do
    not: a borrower whose units went back must not climb onto them while its own
    replica still runs there.

    Example:
        >>> snap = CapacitySnapshot(0.0, {}, {"h100": False, "a100": False, "l4": True},
        ...     held={"h100": "no h100 unit granted to team b", "a100": "released"},
        ...     held_kind={"h100": "grant"})
        >>> placeable_rungs(snap)
        {'h100': False, 'a100': True, 'l4': True}
    """
    hard = hard_holds(snapshot)
    return {r: ok or (r in snapshot.held and r not in hard)
            for r, ok in snapshot.obtainable.items()}


class GrantWatch:
    """Between two probes, read a team's grants entry every ``every_s`` and say when what
    the team's parts act on (:func:`ray_ladder.cluster.grants.acted_on`) changed.

    Args:
        read: Returns the team's entry, or ``None`` (blocking: run in a thread).
        every_s: How often to read it.
    """

    def __init__(self, read: Callable[[], Mapping[str, Any] | None],
                 every_s: float = TEAM_WATCH_S) -> None:
        self._read, self.every_s = read, every_s
        self._seen: Any = _UNSET

    async def sleep_until(self, due: float) -> bool:
        """Sleep until the loop's time ``due``; ``True`` when woken early by a change
        (the first entry read only sets what was seen)."""
        loop = asyncio.get_running_loop()
        while (left := due - loop.time()) > 0:
            await asyncio.sleep(min(self.every_s, left))
            try:
                seen = acted_on(await asyncio.to_thread(self._read))
            except Exception:  # the KV is unreachable: the probe keeps the last grants
                logger.debug("grants watch read failed", exc_info=True)
                continue
            changed = self._seen is not _UNSET and seen != self._seen
            self._seen = seen
            if changed:
                return True
        return False


class Prober:
    """The router's background half: every ``probe_interval_s`` it reads capacity (the
    :class:`~ray_ladder.CapacityView`) and, when needed, running replicas, feeds them to
    the :class:`~ray_ladder.serve.state.RouterState`, and pings rungs: a cold rung a
    selector wants (it starts a replica), a rung on probation (it must answer once), a
    warm standby rung nobody called lately (its handle stays warm).

    Args:
        state: The router's state.
        caller: The rung caller (pings, ``alive_within``, ``signal_lost``).
        view: The capacity view.
        metrics: The router's metrics.
        deployments: Rung -> its deployment's name.
        app: Returns the Serve app's name.
        failed: Called with ``(rung, RungFailed)`` when a ping got an error.
        spawn: Runs a coroutine in the background (keeping a reference).
        clock: Wall clock.
        team: The fleet team the app is bound to: its demand goes to the arbiter, and its
            grants entry is watched between probes (:class:`GrantWatch`).
    """

    def __init__(self, state: RouterState, caller: RungCaller, view: CapacityView,
                 metrics: LadderMetrics, deployments: Mapping[str, str], *,
                 app: Callable[[], str], failed: Callable[[str, RungFailed], None],
                 spawn: Callable[[Coroutine[Any, Any, Any]], None],
                 clock: Callable[[], float] = time.time, team: str | None = None) -> None:
        self._state, self._caller, self._view, self._metrics = state, caller, view, metrics
        self._ladder = state.ladder
        self._deployments = dict(deployments)
        self._app, self._failed, self._spawn, self._clock = app, failed, spawn, clock
        self._pinging: set[str] = set()
        self._primed: dict[str, float] = {}  # cold rung -> when the router asked for it
        #: Done at the end of each probe (then replaced): requests waiting for a rung.
        self.probed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._team = team
        self._reported_at = float("-inf")
        # Demand writes and the final withdrawal, one at a time: no write lands after it.
        self._demand_lock = threading.Lock()
        self._demand_at: float | None = None  # the time of the last demand entry written
        self._closed = False
        self._spill_published: dict[str, int] = {}
        self._spill_at = float("-inf")
        self.errors = 0
        self.last_s = 0.0
        self.max_lag_s = 0.0
        reader = GrantReader()
        self._watch = None if team is None else GrantWatch(lambda: reader.get(team))

    async def probe(self) -> None:
        """One probe: observe, move the selectors, start pings, wake waiting requests."""
        started = time.monotonic()
        snapshot = await asyncio.to_thread(self._view.refresh)
        demoted = hard_holds(snapshot)
        placeable = placeable_rungs(snapshot)
        now = self._clock()
        running = None
        if self._state.needs_replica_counts(placeable, now):
            running = await asyncio.to_thread(running_replicas, self._app(), self._deployments)
            now = self._clock()
        interval = self._ladder.policy.probe_interval_s
        alive = [r for r in self._deployments if self._caller.alive_within(r, interval)]
        self.last_s = time.monotonic() - started
        going = snapshot.going_away  # a preemption notice: read from Ray's node table
        held = {r: why for r, why in snapshot.held.items()
                if r not in going and r not in demoted}
        decision = self._state.observe(running, placeable, now, alive, held=held,
                                       going_away=going)
        for rung in self._state.lost:
            logger.warning("rung %s lost: %s", rung, self._state.why_unobtainable(rung, now))
        self._caller.signal_lost(self._state.lost)
        self._caller.signal_leaving(self._state.leaving)
        self._caller.set_replicas({r: self._state.replicas(r) for r in self._deployments})
        self._metrics.decision(decision)
        self._metrics.observed(self._state, now)  # `ray-ladder status`, gauges, replica-hours
        self._start_pings(now)
        self._report_demand(now)
        self._report_spill(now)
        probed, self.probed = self.probed, asyncio.get_running_loop().create_future()
        probed.set_result(None)

    def _report_demand(self, now: float) -> None:
        """A team-bound app tells the fleet arbiter what it wants (at most once a second)."""
        if self._team is None or self._closed or now - self._reported_at < DEMAND_EVERY_S:
            return
        self._reported_at = now
        self._spawn(asyncio.to_thread(self._put_demand, self._team, self._app(),
                                      wanted_units(self._state), now))

    def _put_demand(self, team: str, app: str, wants: dict[str, int], now: float) -> None:
        with self._demand_lock:
            if not self._closed:
                report_demand(team, app, wants, now)
                self._demand_at = now

    def close(self) -> None:
        """The router stops (Serve stops its replica: the app was deleted or redeployed):
        no more demand reports, and the app's demand entry is removed, unless another
        router of the app wrote it since, so its units go back at the arbiter's next
        round rather than after ``DEMAND_STALE_S``."""
        with self._demand_lock:
            if self._closed:
                return
            self._closed = True
            if self._team is not None and self._demand_at is not None:
                withdraw_demand(self._team, self._app(), written_at=self._demand_at)

    @property
    def spill_wanted(self) -> dict[str, int]:
        """Rung -> replicas it needs for its sustained spill, as last published."""
        return dict(self._spill_published)

    def _report_spill(self, now: float) -> None:
        """Publish the replicas rungs need for their sustained spill (StandbyPolicy reads
        them), when it changed or every ``DEMAND_EVERY_S`` while there is some."""
        book = self._caller.book
        if book is None:
            return
        running = {r: self._state.replicas(r) for r in self._deployments}
        wanted = book.wanted_replicas(running, now)
        if wanted == self._spill_published and (not wanted
                                                or now - self._spill_at < DEMAND_EVERY_S):
            return
        self._spill_published, self._spill_at = wanted, now
        if wanted:
            logger.info("sustained spill: rungs want replicas %s", wanted)
        self._spawn(asyncio.to_thread(publish_spill, self._app(), wanted, now,
                                      self._ladder.name))

    async def loop(self) -> None:
        """Probe every ``probe_interval_s`` until the replica stops."""
        interval = self._ladder.policy.probe_interval_s
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            # Keep the cadence: a slow probe shortens the wait before the next one.
            due = max(due + interval, loop.time())
            if self._watch is not None and await self._watch.sleep_until(due):
                due = loop.time()  # the team's grants changed: probe now, cadence from here
            else:
                await asyncio.sleep(max(0.0, due - loop.time()))
                # How late the loop woke up: a blocked event loop delays every request.
                self.max_lag_s = max(self.max_lag_s, loop.time() - due)
            try:
                await self.probe()
            except RuntimeError as err:
                if "shutdown" in str(err):  # the replica is stopping
                    return
                self.errors += 1
                logger.warning("ladder probe failed", exc_info=True)
            except Exception:  # keep the last observation; a later probe may work
                self.errors += 1
                logger.warning("ladder probe failed", exc_info=True)

    async def _ping(self, rung: str, timeout_s: float) -> None:
        """Reach ``rung``: starts a cold replica, keeps a standby's handle warm."""
        try:
            await self._caller.ping(rung, timeout_s)
        except RungFailed as failed:
            if not failed.timeout:  # an error, not silence: the rung is gone
                self._failed(rung, failed)
        except Exception:  # a user __init__ bug shows on real requests; keep probing
            logger.debug("ping of %s failed", rung, exc_info=True)
        finally:
            self._pinging.discard(rung)

    def _ping_once(self, rung: str, timeout_s: float) -> bool:
        if rung in self._pinging:
            return False
        self._pinging.add(rung)
        self._spawn(self._ping(rung, timeout_s))
        return True

    def _start_pings(self, now: float) -> None:
        policy = self._ladder.policy
        short = max(1.0, 4 * self._caller.assign_timeout_s)
        for rung in self._state.to_prime():
            if self._ping_once(rung, policy.pending_timeout_s):
                self._primed[rung] = now  # StandbyPolicy starts a replica now
                self._spawn(asyncio.to_thread(publish_primes, self._app(), dict(self._primed)))
        for rung in self._state.on_probation(now):  # prove it answers again
            self._ping_once(rung, short)
        idle = self._state.held_everywhere(now)  # pings would keep them busy
        for rung, ok in self._state.obtainable(now).items():
            # Only rungs kept warm: a cold rung's replica goes once unused, and a ping to
            # one the counts still show (they lag) would start a new one.
            if (ok and rung not in idle and self._state.is_warm(rung)
                    and standby_replicas(self._ladder, self._ladder.rung(rung)) > 0
                    and not self._caller.alive_within(rung, policy.probe_interval_s)):
                self._ping_once(rung, short)
