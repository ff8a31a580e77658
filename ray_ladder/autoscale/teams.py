"""The hook's team rule (pure): buy a cloud rung only while on-prem is full for the team.

A hook started with ``team=`` reads the team's grants entry (``fleet/grants/<team>``, see
:mod:`ray_ladder.cluster.grants`) each step and turns it into a :class:`TeamGrants`:

* an on-prem shared rung is **usable** while the team holds a unit of it that is under no
  reclaim notice (what ``CapacityView(team=)`` says too), and **reachable** while the
  arbiter entitles the team to a unit of it (held now, or coming within a grace: its quota
  back, or a share it may borrow), for the demand its workloads report;
* a **cloud** rung is asked for only while the team wants on-prem units, its budget is
  not spent, and no on-prem shared rung of the ladder is reachable for it. Once one is,
  the request for the cloud rung is withdrawn as soon as no work needs it: the ladder
  climbs home first (hysteresis), the cloud rung drains for ``drain_s``, and Ray's idle
  timeout returns the node.

:func:`cloud_figures` measures the outcome over a timeline: cloud node-seconds bought
while the team could use an on-prem unit (goal 0), and those of the climb home.

Example:
    >>> grants = TeamGrants.from_entry({"team": "b", "budget": "ok", "cloud": ["a100"],
    ...     "rungs": {"h100": {"held": 0, "noticed": 0, "entitled": 0, "wanted": 2}}})
    >>> grants.blocked_cloud(["h100", "a100", "cpu"])
    frozenset()
    >>> TeamGrants.from_entry({"team": "b", "cloud": ["a100"], "rungs": {"h100": {
    ...     "held": 0, "noticed": 0, "entitled": 1, "wanted": 2}}}).cloud_note(["h100", "a100"])
    'team b can get h100 on-prem: no cloud rung is asked for'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TeamGrants:
    """What a team's grants entry means for its ladder's hook.

    Attributes:
        team: The team (bound by the operator where the hook is started).
        shared: The on-prem shared rungs (under the fleet's quotas).
        cloud: The fleet's cloud rungs (bought on demand, no quota).
        usable: Shared rungs with a unit held and not reclaimed: the team's work may run
            there now.
        reachable: Shared rungs the team is entitled to a unit of: held now, or coming
            within a grace.
        wants: Whether the team's workloads report demand for on-prem units.
        budget: ``ok`` or the team's ``on_exhausted`` (a spent budget buys nothing).
    """

    team: str
    shared: frozenset[str]
    cloud: frozenset[str]
    usable: frozenset[str]
    reachable: frozenset[str]
    wants: bool
    budget: str = "ok"

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> TeamGrants:
        """Read a grants entry (one written before ``entitled`` existed counts the units
        held and not reclaimed as the entitlement)."""
        usable, reachable, wants = set(), set(), False
        rungs: Mapping[str, Mapping[str, Any]] = entry.get("rungs") or {}
        for name, grant in rungs.items():
            free = int(grant.get("held", 0)) - int(grant.get("noticed", 0))
            if free > 0:
                usable.add(name)
            if int(grant.get("entitled", free)) > 0 or free > 0:
                reachable.add(name)
            wants = wants or int(grant.get("wanted", 1)) > 0
        return cls(str(entry.get("team")), frozenset(rungs), frozenset(entry.get("cloud") or ()),
                   frozenset(usable), frozenset(reachable), wants,
                   str(entry.get("budget", "ok")))

    def limit(self, obtainable: Mapping[str, bool]) -> dict[str, bool]:
        """``obtainable`` with the shared rungs the team may not use now turned off."""
        return {n: ok and (n not in self.shared or n in self.usable)
                for n, ok in obtainable.items()}

    def reachable_rungs(self, rungs: Iterable[str]) -> list[str]:
        """The shared rungs among ``rungs`` (a ladder's) that the team can get."""
        return [n for n in rungs if n in self.shared and n in self.reachable]

    def blocked_cloud(self, rungs: Sequence[str]) -> frozenset[str]:
        """The cloud rungs among ``rungs`` the hook may not ask for now: all of them while
        an on-prem shared rung of the ladder is reachable for the team, while the team
        wants no on-prem unit (nothing to buy for), or while its budget is spent."""
        cloud = frozenset(n for n in rungs if n in self.cloud)
        if self.reachable_rungs(rungs) or not self.wants or self.budget != "ok":
            return cloud
        return frozenset()

    def may_target(self, rung: str, rungs: Sequence[str]) -> bool:
        """Whether the hook may aim at ``rung``: a shared rung only while reachable, a
        cloud rung only while not blocked."""
        if rung in self.shared:
            return rung in self.reachable
        return rung not in self.blocked_cloud(rungs)

    def cloud_note(self, rungs: Sequence[str]) -> str | None:
        """Why the ladder's cloud rungs are not asked for now (``None``: they may be)."""
        if not self.blocked_cloud(rungs):
            return None
        home = self.reachable_rungs(rungs)
        why = (f"team {self.team} can get {', '.join(home)} on-prem" if home
               else f"team {self.team}'s budget is spent ({self.budget})"
               if self.budget != "ok" else f"team {self.team} wants no on-prem unit")
        return f"{why}: no cloud rung is asked for"


@dataclass(frozen=True)
class CloudSample:
    """One moment of a team's timeline, for :func:`cloud_figures`.

    Attributes:
        time: Seconds (any clock, the same for every sample).
        cloud_nodes: Cloud nodes alive for the team's work.
        onprem_free: Whether the team could have used an on-prem unit then (by its quota
            or by borrowing), from what the scenario knows, not from the hook's view.
    """

    time: float
    cloud_nodes: int
    onprem_free: bool


def cloud_figures(samples: Sequence[CloudSample]) -> dict[str, float]:
    """Cloud node-seconds while the team could use on-prem, split by cause.

    Each interval between two samples counts ``cloud_nodes`` of its first sample for its
    length. While on-prem is free, nodes that were already alive when it freed are the
    **climb home** (``cloud_node_s_climbing_home``: bounded by the hysteresis, ``drain_s``
    and Ray's idle timeout; a node that leaves does not come back into it); any other
    node alive then was bought while on-prem could take the work
    (``cloud_node_s_while_onprem_free``, goal 0). ``cloud_node_s`` is every cloud
    node-second.

    Example:
        >>> figures = cloud_figures([CloudSample(0, 0, True), CloudSample(10, 1, False),
        ...     CloudSample(20, 1, True), CloudSample(26, 0, True),
        ...     CloudSample(30, 1, True), CloudSample(32, 0, True)])
        >>> list(figures.values())  # total, bought while on-prem was free, climb home
        [18.0, 2.0, 6.0]
    """
    total = waste = home = 0.0
    base = 0  # nodes alive when on-prem freed that have not left since
    for i, s in enumerate(samples[:-1]):
        dt = max(0.0, samples[i + 1].time - s.time)
        was_free = i > 0 and samples[i - 1].onprem_free
        if not s.onprem_free:
            base = 0
        elif not was_free:
            base = s.cloud_nodes if i > 0 else 0
        else:
            base = min(base, s.cloud_nodes)
        total += s.cloud_nodes * dt
        if s.onprem_free:
            home += base * dt
            waste += (s.cloud_nodes - base) * dt
    return {"cloud_node_s": round(total, 6), "cloud_node_s_while_onprem_free": round(waste, 6),
            "cloud_node_s_climbing_home": round(home, 6)}
