"""Live capacity view: which rungs are obtainable now, from Ray's GCS, cached."""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ray_ladder.cluster.grants import (
    BUDGET_HELD,
    GRANT_HELD,
    BudgetHold,
    GrantReader,
    GrantSource,
    budget_hold,
    budget_rungs,
    team_limits,
)
from ray_ladder.cluster.node_table import SharedNodeTable, ray_node_states
from ray_ladder.core.capacity_type import WINDOW_CLOSED_REASON, gate
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.ledger import part_entry
from ray_ladder.core.placement import (
    NO_NODE_REASON,
    NodeState,
    RungCapacity,
    RungWhy,
    going_away_reason,
    held_back,
    ladder_capacity,
    rung_why,
)
from ray_ladder.core.spec import Ladder

#: ``ladder name -> the hook's published roles or None`` (see ray_ladder.cluster.roles).
HookSource = Callable[[str], "Mapping[str, Any] | None"]

#: The node source seam: every node's state now (:func:`ray_node_states` on a cluster,
#: :class:`ray_ladder.testing.FakeNodes` in a test). Taken as ``node_source=`` everywhere.
NodeSource = Callable[[], list[NodeState]]


def resolve_node_source(node_source: NodeSource | None, owner: str, *,
                        max_age_s: float | None = None,
                        **old: NodeSource | None) -> NodeSource:
    """The node source a taker reads: ``node_source``, else the one passed under its old
    keyword (``old``: that keyword and value; a ``DeprecationWarning`` names the new one),
    else Ray's GCS: with ``max_age_s`` (the taker's refresh interval) through the fleet
    arbiter's published table while it is that fresh
    (:class:`~ray_ladder.cluster.node_table.SharedNodeTable`), without it
    :func:`ray_node_states` itself. Both at once is a ``TypeError``.

    Example:
        >>> resolve_node_source(None, "CapacityView", source=None) is ray_node_states
        True
        >>> resolve_node_source(None, "CapacityView", max_age_s=1.0).max_age_s
        1.0
    """
    given = {keyword: value for keyword, value in old.items() if value is not None}
    if given and node_source is not None:
        raise TypeError(f"{owner}: pass node_source= only ({', '.join(given)}= is its old name)")
    for keyword, value in given.items():
        warnings.warn(f"{owner}({keyword}=...) is deprecated; pass node_source=... instead",
                      DeprecationWarning, stacklevel=3)
        return value
    if node_source is not None:
        return node_source
    return ray_node_states if max_age_s is None else SharedNodeTable(max_age_s)


def reads_ray(source: NodeSource) -> bool:
    """Whether ``source`` reads Ray's GCS (directly or through the shared table), so it
    fails once Ray is shut down."""
    return source is ray_node_states or isinstance(source, SharedNodeTable)


@dataclass(frozen=True)
class CapacitySnapshot:
    """Capacity of every rung at one moment.

    Attributes:
        time: ``time.monotonic()`` of the refresh.
        rungs: Rung name -> :class:`RungCapacity` (what the nodes can host).
        obtainable: Rung name -> bool, ready for :meth:`Selector.observe`.
        held: Rung name -> why the view counts it unobtainable although a node can host
            it (``"released by the autoscaler hook"``, or a going-away rung's ``"fell on
            preemption notice: ..."``); empty when nothing is held.
        going_away: Rung name -> drain deadline (wall clock, ``None``: none given) of each
            rung whose remaining capacity is all on draining nodes (a preemption notice).
        granted: For a team's view, shared rung -> units the fleet arbiter grants the
            team and does not reclaim (the most work it may run there at once).
        budget: For a team's view, its spent budget (``None`` while it is ``ok``):
            ``demote`` already took the dearer rungs out of ``obtainable``; ``queue`` and
            ``reject`` are acted on by the consumer (docs/teams.md, "Budgets").
        held_kind: Rung name -> why it is held, as data (a
            :data:`~ray_ladder.core.placement.RungCause`): ``budget`` (a spent team
            budget demotes it) and ``grant`` (the team has no unit of it granted) are
            the hard holds (``grants.HARD_HOLDS``); ``window``, ``going_away`` (a
            preemption or reclaim notice) and ``released`` (the hook) are not.
    """

    time: float
    rungs: Mapping[str, RungCapacity]
    obtainable: Mapping[str, bool]
    held: Mapping[str, str] = field(default_factory=dict)
    going_away: Mapping[str, float | None] = field(default_factory=dict)
    granted: Mapping[str, int] = field(default_factory=dict)
    budget: BudgetHold | None = None
    held_kind: Mapping[str, str] = field(default_factory=dict)

    def why(self, rung: str) -> str:
        """A short reason for ``rung``'s state: the hold, else ``absent``/``busy``/``free``."""
        return self.held.get(rung) or self.rungs[rung].state

    def why_not(self, rung: str) -> RungWhy | None:
        """Why ``rung`` is not obtainable, as data and words (``None``: it is, or the
        snapshot cannot tell: nothing is invented).

        Example:
            >>> snap = CapacitySnapshot(0.0, {"h100": RungCapacity(0, 0, False)},
            ...                         {"h100": False})
            >>> snap.why_not("h100")
            {'cause': 'no_node', 'reason': 'no alive node can host it'}
        """
        if self.obtainable.get(rung, True):
            return None
        if rung in self.held:
            return rung_why(self.held_kind.get(rung, "other"), self.held[rung])
        capacity = self.rungs.get(rung)
        if capacity is not None and capacity.total == 0:
            return rung_why("no_node", NO_NODE_REASON)
        if capacity is not None and capacity.available == 0:
            return rung_why("busy", "no node that can host it has room right now")
        return None

    def why_unobtainable(self) -> dict[str, RungWhy]:
        """:meth:`why_not` of every unobtainable rung that has a known reason."""
        found = {name: self.why_not(name) for name in self.obtainable}
        return {name: why for name, why in found.items() if why is not None}


class CapacityView:
    """Cached view of which rungs of a ladder are obtainable now.

    A read returns the cached snapshot while it is younger than ``refresh_interval_s``
    and refreshes it (one GCS round trip) otherwise, so a hot path never pays a GCS
    call per request. With :meth:`start`, a daemon thread refreshes in the background
    and reads never block.

    A compute rung is obtainable when an alive node can host one placement of it
    (``total > 0``); ``require_available=True`` demands a free one right now. A rung
    whose remaining capacity is all on nodes Ray is draining (a preemption notice) is
    *going away*: unobtainable, so no new work lands there and no selector climbs to it,
    and ``snapshot().going_away`` gives its deadline (see docs/capacity.md).

    With ``follow_hook`` (the default), a rung that the ladder's autoscaler hook has
    *released* (its node request is gone; Ray's idle timeout returns the node once nothing
    runs there) is not obtainable while a better eligible rung is obtainable and ready, so
    no new work lands on a node being given back (``snapshot().held`` says why). Where no
    hook runs for the ladder's name, this costs one KV read every few seconds, not one per
    refresh.

    Args:
        ladder: The ladder.
        refresh_interval_s: Snapshot lifetime (default: ``ladder.policy.probe_interval_s``).
        require_available: Count busy rungs as unobtainable.
        node_source: Returns node states (default: Ray's GCS, through the fleet
            arbiter's published node table while it is at most ``refresh_interval_s``
            old (docs/teams.md), else :func:`ray_node_states`;
            :class:`ray_ladder.testing.FakeNodes` in a test). ``source=``, its old name,
            still works for one release with a ``DeprecationWarning``.
        clock: Monotonic clock (injectable for tests).
        follow_hook: Hold back rungs the autoscaler hook released.
        constraints: Only eligible rungs count as "better" for a released rung (a
            consumer that cannot use the better rung keeps the released one).
        hook_source: ``ladder name -> published roles or None`` (default: Ray's KV,
            absent entries re-checked every few seconds).
        ready: ``rung -> whether it can take work now``, asked of the better rung before
            a released one is held back (default: obtainable is enough). A consumer whose
            rungs need a warm replica passes that test (the Serve router: "has a running
            replica"), so a released rung keeps its work until the better one can take it.
        wall_clock: Wall clock, to tell a live hook's entry from a stale one.
        team: The fleet team whose work this view places (bound by the operator): a
            shared rung with no unit granted to it is not obtainable, and one whose every
            unit is under a reclaim notice is going away for it (docs/teams.md).
        grant_source: ``team -> its grants entry or None`` (default: Ray's KV).
        part: The part of ``team`` this view places for (its demand entry's name: the
            Serve app, ``task:<name>``, a Tune run's ``tune:...``): the view counts the
            part's share of the team's units (the team ledger, ``core/ledger.py``), not
            the whole team's grant.

    Example:
        >>> view = CapacityView(ladder, refresh_interval_s=0.5)  # doctest: +SKIP
        >>> selector.observe(view.obtainable(), now=time.monotonic())  # doctest: +SKIP
    """

    def __init__(
        self,
        ladder: Ladder,
        refresh_interval_s: float | None = None,
        *,
        require_available: bool = False,
        node_source: NodeSource | None = None,
        clock: Callable[[], float] = time.monotonic,
        follow_hook: bool = True,
        constraints: Constraints | None = None,
        hook_source: HookSource | None = None,
        wall_clock: Callable[[], float] = time.time,
        ready: Callable[[str], bool] | None = None,
        source: NodeSource | None = None,
        team: str | None = None,
        grant_source: GrantSource | None = None,
        part: str | None = None,
    ) -> None:
        self.ladder = ladder
        self.refresh_interval_s = (ladder.policy.probe_interval_s if refresh_interval_s is None
                                   else refresh_interval_s)
        self.require_available = require_available
        self.follow_hook = follow_hook
        self._node_source = resolve_node_source(node_source, "CapacityView", source=source,
                                                max_age_s=self.refresh_interval_s)
        self._clock = clock
        self._wall_clock = wall_clock
        self._ready = ready
        self._hook_source = hook_source if follow_hook else None
        if follow_hook and hook_source is None:
            from ray_ladder.cluster.roles import HookRoles

            self._hook_source = HookRoles().get
        self.team = team
        self.part = part
        self._grant_source = grant_source
        if team is not None and grant_source is None:
            self._grant_source = GrantReader().get
        #: The eligible compute rungs, best first (what "a better rung" means here).
        self._eligible = [r.name for r in ladder.eligible(constraints) if r.is_compute]
        self._snapshot: CapacitySnapshot | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> CapacitySnapshot:
        """Read Ray's state now and replace the cached snapshot."""
        rungs = ladder_capacity(self.ladder, self._node_source(),
                                require_available=self.require_available)
        obtainable = {name: c.obtainable for name, c in rungs.items()}
        # A capacity block serves only inside its window (wall clock: the window is dated).
        gated = gate(self.ladder.rungs, obtainable, self._wall_clock())
        held: dict[str, str] = {n: WINDOW_CLOSED_REASON for n in obtainable
                                if obtainable[n] and not gated[n]}
        kinds = dict.fromkeys(held, "window")  # each hold's cause, written with it
        obtainable = gated
        going = {n: c.deadline for n, c in rungs.items() if c.going_away}
        entry = part_entry(self._grant_source(self.team), self.part) \
            if self.team is not None and self._grant_source is not None else None
        granted, denied, reclaimed = self._team_limits(entry, obtainable, held, going)
        kinds.update({**dict.fromkeys(denied, GRANT_HELD),
                      **dict.fromkeys(reclaimed, "going_away")})
        hold, budget_kinds = self._budget_limits(entry, obtainable, held)
        kinds.update(budget_kinds)
        wall = self._wall_clock()
        preempted = {n: going_away_reason(d, wall) for n, d in going.items() if n not in held}
        held.update(preempted)
        kinds.update(dict.fromkeys(preempted, "going_away"))
        if self._hook_source is not None:
            roles = self._hook_source(self.ladder.name)
            if roles is not None:
                released = self._hold_released(roles, obtainable)
                held.update(released)
                kinds.update(dict.fromkeys(released, "released"))
        snap = CapacitySnapshot(self._clock(), rungs, obtainable, held, going, granted,
                                hold, kinds)
        self._snapshot = snap
        return snap

    def _team_limits(self, entry: Mapping[str, Any] | None, obtainable: dict[str, bool],
                     held: dict[str, str], going: dict[str, float | None],
                     ) -> tuple[dict[str, int], list[str], list[str]]:
        """Apply the team's grants (in place): denied rungs, reclaimed ones going away.
        Returns the units granted and not reclaimed per shared rung, the rungs held
        because no unit of them is granted, and those held for a reclaim notice."""
        if entry is None:  # no team, or no arbiter ever ran for it: no fleet limits
            return {}, [], []
        denied, reclaimed = team_limits(entry)
        wall = self._wall_clock()
        held_now, noticed = [], []
        for name, why in denied.items():
            if obtainable.get(name):
                obtainable[name] = False
                held[name] = why
                held_now.append(name)
        for name, deadline in reclaimed.items():
            if name in obtainable and name not in going:
                obtainable[name] = False
                going[name] = deadline
                due = "no deadline" if deadline is None else \
                    f"deadline in {max(0.0, deadline - wall):.1f} s"
                held[name] = f"reclaim notice: team {self.team}'s {name} units go back, {due}"
                noticed.append(name)
        return {rung: max(0, int(g.get("held", 0)) - int(g.get("noticed", 0)))
                for rung, g in (entry.get("rungs") or {}).items()}, held_now, noticed

    def _budget_limits(self, entry: Mapping[str, Any] | None, obtainable: dict[str, bool],
                       held: dict[str, str]) -> tuple[BudgetHold | None, dict[str, str]]:
        """A spent ``demote`` budget (in place): the rungs dearer than the cheapest one
        obtainable after the grants are held (``grants.budget_rungs``, the one rule)."""
        hold = budget_hold(entry)
        if hold is None or hold.action != "demote":
            return hold, {}
        costs = {r.name: r.cost_per_hour for r in self.ladder.rungs}
        why = hold.reason(self._wall_clock())
        kinds: dict[str, str] = {}
        for name in budget_rungs(hold.action, costs, self._eligible, obtainable):
            obtainable[name] = False
            held[name] = why
            kinds[name] = BUDGET_HELD
        return hold, kinds

    @property
    def last(self) -> CapacitySnapshot | None:
        """The last snapshot, never refreshed here (for a request path)."""
        return self._snapshot

    def _hold_released(self, roles: Mapping[str, Any],
                       obtainable: dict[str, bool]) -> dict[str, str]:
        """Mark released rungs unobtainable (in place) while a better eligible one is not."""
        from ray_ladder.cluster.roles import RELEASED_REASON, released_rungs

        released = set(released_rungs(roles, self._wall_clock()))
        held = held_back(self._eligible, released, obtainable, self._ready)
        for name in held:
            obtainable[name] = False
        return dict.fromkeys(held, RELEASED_REASON)

    def snapshot(self) -> CapacitySnapshot:
        """The cached snapshot, refreshed first when older than the interval."""
        snap = self._snapshot
        if snap is not None and (self._thread is not None
                                 or self._clock() - snap.time < self.refresh_interval_s):
            return snap
        with self._lock:
            snap = self._snapshot
            if snap is None or self._clock() - snap.time >= self.refresh_interval_s:
                snap = self.refresh()
            return snap

    def obtainable(self) -> Mapping[str, bool]:
        """Rung name -> obtainable, ready for ``Selector.observe``."""
        return self.snapshot().obtainable

    def __getitem__(self, rung: str) -> RungCapacity:
        return self.snapshot().rungs[rung]

    def start(self) -> CapacityView:
        """Refresh in a daemon thread every ``refresh_interval_s``; reads never block."""
        if self._thread is None:
            self.refresh()
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="ladder-capacity",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the background refresher."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_interval_s):
            try:
                self.refresh()
            except Exception:  # a failed refresh keeps the last snapshot
                continue
