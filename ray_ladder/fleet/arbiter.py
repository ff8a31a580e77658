"""The fleet arbiter: one restartable Ray actor per cluster that grants rung units to teams.

Every ``node_table_period_s`` it reads Ray's node table once for every ladder on the
cluster and publishes it (:mod:`ray_ladder.cluster.node_table`: the parts read it there
instead of the GCS while it is fresh). Each round (every ``control_period_s``) it also
reads the demand the parts reported in Ray's KV, holds each part's drops for the fleet's
hold window (:mod:`ray_ladder.core.demand_hold`), asks the pure
:func:`ray_ladder.core.arbiter.decide`, then writes its whole state, one grants entry
per team and the fleet's team names back to the KV (:mod:`ray_ladder.cluster.grants`,
:mod:`ray_ladder.cluster.fleet_teams`). A SIGKILL loses no grant: Ray
restarts the actor (``max_restarts=-1``), which resumes from the KV; meanwhile every part
keeps the grants it last read.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ray_ladder.cluster import fleet_teams, grants, metrics, node_table, ray_private
from ray_ladder.cluster.capacity import NodeSource, resolve_node_source
from ray_ladder.cluster.event_log import log_event
from ray_ladder.core.arbiter import Holdings, Reclaim, Round, decide, shared_capacity
from ray_ladder.core.demand_hold import DemandHold, grace_restarts, held_demand
from ray_ladder.core.events import TransitionEvent
from ray_ladder.core.fleet import Fleet, load_fleet
from ray_ladder.core.ledger import share_out
from ray_ladder.core.placement import NodeState

logger = logging.getLogger("ray_ladder.fleet")
ARBITER_NAME = "ray_ladder_arbiter"
ARBITER_NAMESPACE = "ray_ladder"
#: Ray's resource on the head node only (the Serve router is pinned the same way).
HEAD_NODE_RESOURCE = "node:__internal_head__"


class FleetArbiter:
    """Grants rung units to the teams of ``fleet`` (the actor's class; use
    :func:`start_arbiter`).

    Args:
        fleet_json: The fleet file as JSON (``Fleet.model_dump_json()``).
        node_source: Node table reader (default: Ray's GCS; only what it reads from the
            GCS is published for the other parts).
        clock: Wall clock.
        loop: Run rounds in the background (``False``: only when :meth:`step` is called).
    """

    def __init__(self, fleet_json: str, node_source: NodeSource | None = None,
                 clock: Callable[[], float] = time.time, loop: bool = True) -> None:
        self.fleet = Fleet.model_validate_json(fleet_json)
        self._nodes = resolve_node_source(node_source, "FleetArbiter")
        self._publishes = node_source is None
        #: Seconds between node-table reads (rounds run on every tick a round is due).
        self.tick_s = min(self.fleet.node_table_period_s, self.fleet.control_period_s)
        self.published = 0
        self._clock = clock
        raw = ray_private.kv_get(grants.STATE_KEY, namespace=grants.KV_NAMESPACE)
        self.state = grants.holdings_from_json(raw) if raw else Holdings()
        self.restored = raw is not None
        self.last: Round | None = None
        self.rounds = 0
        self.errors = 0
        self.round_s = 0.0
        #: Each part's recent demand reports: drops are held (``core/demand_hold.py``).
        self._hold = DemandHold()
        #: Team -> rung -> part -> units: each part's share last round (core/ledger.py).
        self._shares: dict[str, dict[str, dict[str, int]]] = {}
        #: Notices withdrawn before their deadline (a new one for the same lender restarts
        #: its grace), and the count of such restarts per lender.
        self._withdrawn: tuple[Reclaim, ...] = ()
        self.grace_restarts: dict[str, int] = {t.name: 0 for t in self.fleet.teams}
        fleet_teams.publish_teams(self.fleet)  # readers compare with their wall clock
        self._task: asyncio.Task[None] | None = None
        if loop:
            self._task = asyncio.get_event_loop().create_task(self._loop())

    async def _loop(self) -> None:
        due = 0.0  # monotonic time of the next round
        while True:
            began = time.monotonic()
            try:
                if began >= due:
                    due = began + self.fleet.control_period_s
                    await asyncio.to_thread(self.step)
                else:
                    await asyncio.to_thread(self.read_nodes)
            except Exception:  # keep the last grants; the next round may work
                self.errors += 1
                logger.warning("arbiter round failed", exc_info=True)
            await asyncio.sleep(max(0.0, self.tick_s - (time.monotonic() - began)))

    def read_nodes(self) -> list[NodeState]:
        """Read the node table once and publish it for every ladder on the cluster."""
        nodes = list(self._nodes())
        if self._publishes:
            node_table.publish(nodes, time.time(), self.tick_s)
            self.published += 1
        return nodes

    def step(self) -> dict[str, Any]:
        """One round: observe, decide, persist, publish. Returns :meth:`status`."""
        started = time.perf_counter()
        now = self._clock()
        capacity = shared_capacity(self.fleet, self.read_nodes())
        reports = grants.demand_reports(self._demand_entries(), now)
        demand, self._hold = held_demand(reports, self._hold, now, self.fleet.hold_window_s)
        out = decide(self.fleet, self.state, capacity, demand, now)
        restarted, self._withdrawn = grace_restarts(self.state.reclaims, out, now,
                                                    self._withdrawn)
        for r in restarted:
            self.grace_restarts[r.owed_to] = self.grace_restarts.get(r.owed_to, 0) + 1
        self.round_s = time.perf_counter() - started
        ray_private.kv_put(grants.STATE_KEY, grants.holdings_to_json(out.state),
                           namespace=grants.KV_NAMESPACE)
        shared = self.fleet.onprem_rungs
        cloud = [name for name in self.fleet.rungs if name not in shared]
        # The team ledgers: each team's units shared out among its parts.
        shares = share_out(out.state, shared, self._hold.claims(), self._shares)
        self._shares = {team: {rung: {part: g.held for part, g in parts.items()}
                               for rung, parts in rungs.items()}
                        for team, rungs in shares.items()}
        for team in self.fleet.teams:
            entry = grants.team_entry(self.fleet.fleet, team.name, out, shared, now,
                                      cloud=cloud, demand=demand,
                                      parts=shares.get(team.name, {}))
            entry["grace_restarts"] = self.grace_restarts.get(team.name, 0)  # as a lender
            ray_private.kv_put(grants.GRANTS_PREFIX + team.name, json.dumps(entry),
                               namespace=grants.KV_NAMESPACE)
        fleet_teams.publish_teams(self.fleet)
        self._events(out, now)
        self.state, self.last = out.state, out
        self.rounds += 1
        self._capacity, self._demand = capacity, demand
        status = self.status()
        self._export(status, out)
        return status

    def _export(self, status: dict[str, Any], out: Round) -> None:
        """Per team metrics (``ladder`` = the fleet's name; the one metric table)."""
        name = self.fleet.fleet
        for team, entry in status["teams"].items():
            for rung, units in entry["rungs"].items():
                for state, value in units.items():
                    metrics.set_gauge("ladder_team_units", float(value), ladder=name, team=team,
                                      rung=rung, state=state)
            metrics.set_gauge("ladder_team_budget_spent", float(entry["spent"]), ladder=name,
                              team=team)
        if self.rounds == 1:  # every series from the first round (a restart starts at 0)
            for team in self.fleet.teams:
                for rung in self.fleet.onprem_rungs:
                    metrics.inc("ladder_team_reclaims", 0.0, ladder=name, team=team.name,
                                rung=rung)
        for r in out.notices:
            metrics.inc("ladder_team_reclaims", float(r.units), ladder=name, team=r.borrower,
                        rung=r.rung)

    def _demand_entries(self) -> list[dict[str, Any]]:
        keys = ray_private.kv_list(grants.DEMAND_PREFIX, namespace=grants.KV_NAMESPACE)
        out = []
        for key in keys:
            raw = ray_private.kv_get(key.decode(), namespace=grants.KV_NAMESPACE)
            if raw:
                out.append(json.loads(raw))
        return out

    def _events(self, out: Round, now: float) -> None:
        for r in out.notices:
            self._event(r, now, f"notice: {r.reason}; the units go at the deadline")
        for r in out.transferred:
            self._event(r, now, f"{r.reason}: the grace ended, the units moved")
        if self.last is not None:
            for team, state in out.budget.items():
                if state != "ok" and self.last.budget.get(team) == "ok":
                    log_event(TransitionEvent(now, self.fleet.fleet, None, None, None,
                                              f"team {team} spent its budget: {state}",
                                              kind="budget"), part="fleet", source=team)

    def _event(self, r: Reclaim, now: float, reason: str) -> None:
        log_event(TransitionEvent(now, self.fleet.fleet, r.rung, r.rung, None, reason,
                                  kind="reclaim"),
                  part="fleet", source=r.borrower, borrower=r.borrower, lender=r.owed_to,
                  units=r.units, deadline=r.deadline)

    def status(self) -> dict[str, Any]:
        """Per team: held, nominal, borrowed, lent, notices, budget, and the grace restarts
        it suffered as a lender (``grace_restarts``: a new notice for it with a later
        deadline than one withdrawn before its deadline; 0 for steady work); for the
        CLI and the benches."""
        teams = {}
        for team in self.fleet.teams:
            rungs = {}
            for rung in self.fleet.onprem_rungs:
                held = self.state.units(team.name, rung)
                nominal = team.quota.get(rung, 0)
                wanted = getattr(self, "_demand", {}).get(team.name, {}).get(rung, 0)
                rungs[rung] = {
                    "held": held, "nominal": nominal, "wanted": wanted,
                    "borrowed": max(0, held - nominal),
                    "lent": 0, "entitled": (self.last.entitled[team.name].get(rung, 0)
                                            if self.last is not None else 0),
                    "noticed": sum(r.units for r in self.state.reclaims
                                   if r.borrower == team.name and r.rung == rung)}
            teams[team.name] = {"rungs": rungs,
                                "budget": self.last.budget.get(team.name, "ok")
                                if self.last is not None else "ok",
                                "spent": round(self.state.spent.get(team.name, 0.0), 4),
                                "grace_restarts": self.grace_restarts.get(team.name, 0),
                                "max_cost": team.budget.max_cost if team.budget else None}
        _lent(teams, self.fleet)
        return {"fleet": self.fleet.fleet, "rounds": self.rounds, "errors": self.errors,
                "node_tables_published": self.published,
                "restored": self.restored, "round_s": round(self.round_s, 6),
                "demand_hold_s": self.fleet.hold_window_s,
                "grace_restarts": sum(self.grace_restarts.values()),
                "capacity": getattr(self, "_capacity", {}), "teams": teams,
                "reclaims": [asdict(r) for r in self.state.reclaims]}


def _lent(teams: dict[str, Any], fleet: Fleet) -> None:
    """A team's lent units: its idle nominal quota that others hold above theirs."""
    for rung in fleet.onprem_rungs:
        borrowed = sum(t["rungs"][rung]["borrowed"] for t in teams.values())
        for team in fleet.teams:
            r = teams[team.name]["rungs"][rung]
            idle = max(0, r["nominal"] - r["held"])
            r["lent"] = min(idle, borrowed)
            borrowed -= r["lent"]


def start_arbiter(fleet: Fleet | str | Path) -> Any:
    """Start the cluster's arbiter for ``fleet`` (a :class:`Fleet` or a fleet file), or
    return the running one. Detached, restarted by Ray after a crash, 0 CPUs, on the
    head node (a worker node may be preempted with the arbiter on it); needs
    ``ray.init()``."""
    import ray

    if not isinstance(fleet, Fleet):
        fleet = load_fleet(fleet)
    if get_arbiter() is None:  # names bound right after this call are checked (fleet_teams)
        fleet_teams.publish_teams(fleet)
    actor = ray.remote(FleetArbiter).options(
        name=ARBITER_NAME, namespace=ARBITER_NAMESPACE, lifetime="detached",
        get_if_exists=True, max_restarts=-1, max_task_retries=-1, num_cpus=0,
        resources={HEAD_NODE_RESOURCE: 0.001})
    return actor.remote(fleet.model_dump_json())


def get_arbiter() -> Any | None:
    """The running arbiter's handle, or ``None``."""
    import ray

    try:
        return ray.get_actor(ARBITER_NAME, namespace=ARBITER_NAMESPACE)
    except ValueError:
        return None
