"""The autoscale planner: which rungs to ask the cloud for, from nodes and refusals seen."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ray_ladder.autoscale.options import AutoscaleOptions, LaunchFailure
from ray_ladder.autoscale.teams import TeamGrants
from ray_ladder.core.capacity_type import CapacitySpec, gate, usable_at
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.events import EventKind, TransitionEvent
from ray_ladder.core.placement import demand
from ray_ladder.core.selector import Decision, Selector
from ray_ladder.core.spec import Ladder

Status = Literal["idle", "requested", "queued", "probing", "stocked_out", "up"]
_ASKED = ("requested", "queued", "probing")
Role = Literal["serving", "warming", "draining", "released", "none"]
MAX_EVENTS = 50
__all__ = ["AutoscaleOptions", "AutoscalePlanner", "LaunchFailure", "Plan", "RungState"]


@dataclass
class RungState:
    """What the hook knows and wants of one rung (the CLI prints these fields)."""

    name: str
    node_types: list[str]
    status: Status = "idle"
    role: Role = "none"
    nodes: int = 0
    target_bundles: int = 0
    failures: int = 0
    last_stockout: float | None = None
    last_stockout_reason: str | None = None
    next_retry: float | None = None
    requested_since: float | None = None
    keep_until: float | None = None
    capacity: str = "on-demand"
    queued_since: float | None = None
    window: list[float] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    """The outcome of one planner step.

    Attributes:
        time: The step's clock.
        serving: Rung work should go to now (the selector's choice).
        target: Best rung the hook is asking the cloud for (``None``: all stocked out).
        bundles: The resource request for Ray's autoscaler (all requested rungs).
        label_selectors: One label selector per bundle (autoscaler v2 label demand).
        events: What happened in this step (dicts with ``kind``, ``rung``, ``reason``).
        decision: The selector's decision.
    """

    time: float
    serving: str | None
    target: str | None
    bundles: list[dict[str, float]]
    label_selectors: list[dict[str, str]]
    events: list[dict[str, Any]]
    decision: Decision


@dataclass
class _Memory:
    last_failure: dict[str, float] = field(default_factory=dict)


class AutoscalePlanner:
    """Decides which rungs' nodes to request from Ray's autoscaler, step by step.

    Pure and deterministic (clock passed in, no Ray). Each :meth:`step` takes how many
    placements of each rung the cluster holds and the launch failures Ray's autoscaler
    recorded, and returns the request to make. The rules:

    * The *target* is the best eligible rung not stocked out: its nodes are requested.
    * A refusal recorded for a requested rung's node type after it was requested (or no
      node within ``provision_timeout_s``) marks it stocked out: the target moves down
      at once, and the rung is retried after a backoff that grows per refusal
      (``retry_initial_s`` x ``retry_multiplier`` ^ n, at most ``retry_max_s``:
      :class:`~ray_ladder.core.backoff.Backoff`).
    * The rung work goes to (*serving*) comes from the one :class:`Selector`: it falls at
      once and climbs after ``promotion_hysteresis`` observations of a better rung's node.
    * Better rungs whose node joined are kept (*warming*); once serving moved above a
      rung it is *draining* for ``drain_s``, then its request is *released* so Ray's idle
      timeout returns the node.
    * A *queued* rung (``capacity.type: flex-start``) is requested early, whenever it is
      above the serving rung, and the target moves on below it: its request stands through
      refusals (no backoff) for up to ``capacity.max_wait_s``, while lower rungs serve.
    * A *capacity block* is asked for, and obtainable, only inside its window
      (:func:`~ray_ladder.core.capacity_type.gate`): the selector falls from it when the
      window closes, ``leave_before_s`` before the block ends.
    * With a team's grants (``team=``, :class:`~ray_ladder.autoscale.teams.TeamGrants`):
      a shared on-prem rung serves only while the team holds an unreclaimed unit of it
      and is aimed at only while the team can get one; a cloud rung is asked for only
      while no on-prem shared rung of the ladder is reachable for the team (kept while it
      serves, so the ladder climbs home first, then drains and is released).

    Example:
        >>> planner = AutoscalePlanner(ladder, AutoscaleOptions())  # doctest: +SKIP
        >>> plan = planner.step({"cpu": 1}, [], now=0.0)  # doctest: +SKIP
        >>> plan.target, plan.bundles  # doctest: +SKIP
        ('h100', [{'ladder/h100': 1.0}])
    """

    def __init__(self, ladder: Ladder, options: AutoscaleOptions | None = None,
                 constraints: Constraints | None = None) -> None:
        self.ladder = ladder
        self.options = options or AutoscaleOptions()
        unknown = set(self.options.node_types) - set(ladder.names)
        if unknown:
            raise ValueError(f"node_types names unknown rung(s) {sorted(unknown)}; "
                             f"rungs: {ladder.names}")
        self._events: list[dict[str, Any]] = []
        self.selector = Selector(ladder, constraints, on_event=self._on_transition,
                                 promotion_hysteresis=self.options.promotion_hysteresis)
        self.rungs: dict[str, RungState] = {
            r.name: RungState(r.name, list(self.options.node_types.get(r.name, [r.name])),
                              capacity=r.capacity.type if r.capacity else "on-demand",
                              window=list(w) if r.capacity and (w := r.capacity.window())
                              else None)
            for r in ladder.eligible(constraints) if r.is_compute
        }
        self._capacity: dict[str, CapacitySpec] = {
            n: ladder.rung(n).capacity or CapacitySpec() for n in self.rungs}
        self._memory = _Memory()
        self.serving: str | None = None
        self.target: str | None = None
        self._on_head: set[str] = set()
        self.team: TeamGrants | None = None
        self._spill: dict[str, int] = {}

    # --- one step ------------------------------------------------------------------------

    def step(self, present: Mapping[str, int], failures: Iterable[LaunchFailure],
             now: float, on_head: Collection[str] = (), team: TeamGrants | None = None,
             spill: Mapping[str, int] | None = None) -> Plan:
        """Advance by one observation.

        Args:
            present: Rung -> placements its alive nodes can host (0 or missing: none).
            failures: Launch failures Ray's autoscaler reports (old ones are ignored).
            now: Unix time (the autoscaler's records use the same clock).
            on_head: Rungs the head node hosts: never requested (the head never leaves).
            team: The hook's team's grants (``None``: no fleet, no team rule).
            spill: Rung -> placements the ladder's Serve routers want for a sustained
                spill past it (``sources.read_spill``): a rung the hook asks for anyway
                is asked for with that many placements (never a rung it would not ask for).
        """
        self._events = []
        self._spill = dict(spill or {})
        self._on_head = set(on_head)
        self.team = team
        self._take_failures(failures, now)
        for st in self.rungs.values():
            self._observe_nodes(st, int(present.get(st.name, 0)), now)
            queued = self._capacity[st.name].queued
            timeout, what = ((self._capacity[st.name].wait_s, "capacity.max_wait_s") if queued
                             else (self.options.provision_timeout_s, "provision_timeout_s"))
            if st.status in _ASKED and st.requested_since is not None \
                    and now - st.requested_since >= timeout:
                self._stockout(st, now, f"no node within {what} ({timeout:g} s)")
            if st.status == "stocked_out" and st.next_retry is not None \
                    and now >= st.next_retry:
                st.status, st.requested_since = ("queued" if queued else "probing"), now
                st.queued_since = now if queued else None
                self._event(now, "probe", st.name, f"retry #{st.failures} after backoff"
                            + (" (queued again)" if queued else ""))
        obtainable = gate(self.ladder.rungs, {n: s.nodes > 0 for n, s in self.rungs.items()},
                          now)
        if team is not None:  # a shared rung serves the team only on its granted units
            obtainable = team.limit(obtainable)
        decision = self.selector.observe(obtainable, now)
        self.serving = decision.rung
        # The target is the best rung to ask for and wait on: a queued rung is asked for
        # early but never waited on; a capacity block only inside its window, and not in its
        # last provision_timeout_s, so the rung below has a node when the window closes.
        lead = self.options.provision_timeout_s
        names = list(self.rungs)
        self.target = next((n for n, s in self.rungs.items() if s.status != "stocked_out"
                            and (s.node_types or s.nodes > 0)
                            and usable_at(self._capacity[n], now)
                            and not (s.window and now >= s.window[1] - lead)
                            and not (self._capacity[n].queued and s.status != "up")
                            and (team is None or team.may_target(n, names))), None)
        bundles, selectors = self._request(now)
        return Plan(now, self.serving, self.target, bundles, selectors, list(self._events),
                    decision)

    def _take_failures(self, failures: Iterable[LaunchFailure], now: float) -> None:
        seen = self._memory.last_failure
        by_type: dict[str, list[RungState]] = {}
        for st in self.rungs.values():
            for t in st.node_types:
                by_type.setdefault(t, []).append(st)
        for f in sorted(failures, key=lambda f: f.time):
            if f.time <= seen.get(f.node_type, -math.inf):
                continue
            seen[f.node_type] = f.time
            for st in by_type.get(f.node_type, []):
                # v1 records whole seconds: an attempt in the second of the request counts.
                if st.status in _ASKED and st.requested_since is not None \
                        and f.time >= math.floor(st.requested_since):
                    reason = f"{f.category}: {f.description}" if f.category else f.description
                    if st.status == "queued":
                        self._refused_while_queued(st, now, reason or "launch failed", f.time)
                    else:
                        self._stockout(st, now, reason or "launch failed", when=f.time)

    def _refused_while_queued(self, st: RungState, now: float, reason: str,
                              when: float) -> None:
        """A refusal of a queued rung: counted and shown, and the request stays standing."""
        first = st.last_stockout is None or st.queued_since is None \
            or st.last_stockout < math.floor(st.queued_since)
        st.failures += 1
        st.last_stockout, st.last_stockout_reason = when, reason
        if first:  # one event per queueing, not one per autoscaler retry
            self._event(now, "stockout", st.name, f"{reason} (queued: the request stands "
                        "while lower rungs serve)")

    def _observe_nodes(self, st: RungState, nodes: int, now: float) -> None:
        st.nodes = nodes
        if nodes > 0 and st.status != "up":
            if st.status != "idle":
                self._event(now, "node-joined", st.name, f"{nodes} placement(s) now hosted")
            st.status, st.failures, st.next_retry, st.requested_since = "up", 0, None, None
            st.queued_since = None
        elif nodes == 0 and st.status == "up":
            st.status = "idle"
            self._event(now, "node-lost", st.name, "no alive node hosts it any more")

    def _stockout(self, st: RungState, now: float, reason: str,
                  when: float | None = None) -> None:
        if st.status not in _ASKED:
            return
        # A queue that timed out waited already: it is queued again after the first backoff.
        delay = self.options.retry_delay_s(1 if st.status == "queued" else st.failures + 1)
        st.failures += 1
        st.status = "stocked_out"
        st.last_stockout = now if when is None else when
        st.last_stockout_reason = reason
        st.next_retry = now + delay
        st.requested_since = st.queued_since = None
        self._event(now, "stockout", st.name, reason)

    def _request(self, now: float) -> tuple[list[dict[str, float]], list[dict[str, str]]]:
        names = list(self.rungs)
        serving_idx = names.index(self.serving) if self.serving in self.rungs else len(names)
        # A cloud rung the team may not buy now is kept only while its work runs there.
        blocked = self.team.blocked_cloud(names) if self.team is not None else frozenset()
        bundles: list[dict[str, float]] = []
        selectors: list[dict[str, str]] = []
        for i, (name, st) in enumerate(self.rungs.items()):
            cap = self._capacity[name]
            usable = usable_at(cap, now)
            warming = st.status == "up" and i < serving_idx and usable
            # Queued capacity is asked for early: whenever it is better than what serves.
            early = cap.queued and usable and i < serving_idx and st.status != "stocked_out"
            needed = (name == self.target or name == self.serving or warming or early
                      or st.status == "probing") and bool(st.node_types) \
                and name not in self._on_head \
                and (name not in blocked or name == self.serving)
            if needed or st.status != "up":
                st.keep_until = None  # only a rung with nodes has work to drain
            elif st.target_bundles and st.keep_until is None:
                st.keep_until = now + self.options.drain_s  # drain from the first step unneeded
            keep = needed or (st.keep_until is not None and now < st.keep_until)
            if keep and st.status == "idle":
                st.status, st.requested_since = ("queued" if cap.queued else "requested"), now
                st.queued_since = now if cap.queued else None
                self._event(now, "requested", name, f"queued for {cap.type} capacity (up to "
                            f"{cap.wait_s:g} s); lower rungs serve meanwhile" if cap.queued
                            else "asking the autoscaler for its node")
            if not keep:
                if st.target_bundles and st.status == "up":
                    self._event(now, "released", name, (
                        "capacity block window closed" if not usable else "request released")
                        + "; Ray's idle timeout returns the node")
                if st.status in ("requested", "queued", "probing"):
                    st.status, st.requested_since, st.queued_since = "idle", None, None
                st.keep_until = None
            # A rung the hook cannot give back (it runs on the head, or has no node type
            # the autoscaler launches) is never "released": that would only cut its
            # standby replica (serve/scaling.py), and the fall to it would start cold.
            own_nodes = bool(st.node_types) and name not in self._on_head
            st.role = ("serving" if name == self.serving else "warming" if warming
                       else ("draining" if keep else "released")
                       if st.status == "up" and own_nodes else "none")
            self._size(st, keep, now)
            rung = self.ladder.rung(name)
            for _ in range(st.target_bundles):
                bundles.append(demand(rung))
                selectors.append(dict(rung.label_selector))
        return bundles, selectors

    def _size(self, st: RungState, keep: bool, now: float) -> None:
        """Placements to ask for a kept rung: ``bundles_per_rung``, or its spill's."""
        base = self.options.bundles_per_rung
        wanted = max(base, self._spill.get(st.name, 0)) if keep else 0
        if wanted > max(base, st.target_bundles):
            self._event(now, "requested", st.name, f"asking for {wanted} placements: its "
                        "Serve routers' requests spill past it (sustained)")
        st.target_bundles = wanted

    # --- events and state ----------------------------------------------------------------

    def _event(self, time: float, kind: EventKind, rung: str, reason: str) -> None:
        """One of the hook's own steps, as an event about ``rung`` (from = to = rung)."""
        event = TransitionEvent(time, self.ladder.name, rung, rung, None, reason, kind=kind,
                                cause="other")  # a hook step, not a ladder move
        self._events.append({**event.to_dict(), "rung": rung})

    def _on_transition(self, event: TransitionEvent) -> None:
        self._events.append({**event.to_dict(), "rung": event.to_rung})

    def state(self) -> dict[str, Any]:
        """Rung states, serving and target rungs (JSON-ready)."""
        team = self.team
        return {"ladder": self.ladder.name, "serving": self.serving, "target": self.target,
                "team": team.team if team else None,
                "cloud_held": team.cloud_note(list(self.rungs)) if team else None,
                "rungs": {n: s.to_dict() for n, s in self.rungs.items()}}

    def dump(self) -> dict[str, Any]:
        """What a restarted hook needs to continue (backoffs, refusals already counted)."""
        return {"rungs": {n: s.to_dict() for n, s in self.rungs.items()},
                "last_failure": dict(self._memory.last_failure)}

    def restore(self, data: Mapping[str, Any]) -> None:
        """Continue from :meth:`dump` (the selector starts afresh: its first pick is free)."""
        for name, saved in (data.get("rungs") or {}).items():
            st = self.rungs.get(name)
            if st is None:
                continue
            for key in ("status", "last_stockout", "last_stockout_reason",
                        "next_retry", "requested_since", "keep_until", "queued_since"):
                if key in saved:
                    setattr(st, key, saved[key])
            st.failures = _count(saved.get("failures", st.failures))
            # Node presence is re-observed; a rung that was up is re-requested if needed.
            if st.status == "up":
                st.status = "idle"
        self._memory.last_failure.update(data.get("last_failure") or {})


def _count(value: Any) -> int:
    """A refusal count read back from Ray's KV: any size is fine (the backoff caps it),
    anything that is no count starts again from 0 (the first backoff)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return max(int(value), 0)
