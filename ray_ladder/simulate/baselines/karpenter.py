"""Karpenter: weighted offerings, a 3-minute insufficient-capacity cache, price consolidation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ray_ladder.simulate.baselines.base import INF, PlacementRun, SteppedBaseline, Stepper
from ray_ladder.simulate.baselines.context import PolicyContext


@dataclass(frozen=True)
class Karpenter(SteppedBaseline):
    """Karpenter with one offering per compute rung, in weight order (weighted NodePools).

    The model:

    * **The pod's request decides the offerings**: a NodePool only launches nodes that
      satisfy the pod's requests, so only rungs of the top rung's kind (accelerator or
      none: :meth:`PolicyContext.placeable`) are ever used, after a loss and by
      consolidation alike; a GPU pod never lands on the CPU pool, it stays pending.
    * **Fall**: when the serving node's capacity is lost (a spot interruption), its
      offering goes into the unavailable-offerings cache for ``ice_ttl_s`` and the pod is
      pending. An existing node (a *resident* rung: one without a trace, a pool you own) takes
      it at once (kube-scheduler). Otherwise Karpenter launches the highest-weight
      offering *not in the cache*: obtainable, its node serves ``start_s`` later; refused
      (insufficient capacity), that offering is cached for ``ice_ttl_s`` and the next
      try comes ``retry_s`` later. With every offering cached it waits for the first
      entry to expire. A launch whose capacity vanishes before it serves is refused too.
    * **No climb by weight**: without consolidation (``consolidation=False``, the
      default here) a pod on a lower-weight offering stays there until lost.
    * **Price consolidation** (``consolidation=True``, ``WhenEmptyOrUnderutilized``):
      Karpenter replaces a node when "it can be replaced by a single lower price
      replacement node" (karpenter.sh, Disruption, Consolidation), whatever the
      NodePool weights: when an offering *cheaper* than the serving one
      (``cost_per_hour``) is obtainable and not cached, and can host the pod, it launches
      the cheapest such one and moves the pod after ``consolidate_after_s + start_s``;
      the old node serves meanwhile. So it goes back to a cheaper (spot) offering when it is back
      (aws/karpenter-provider-aws#7490: "we should go back to spot when it becomes
      available"), climbs to a better rung only if that rung is cheaper, and moves
      *down* to a cheaper rung that is worse.
    * **One offering per rung.** A NodePool spanning several zones is one offering per
      zone; the simulator has one trace per rung, so each rung is one offering (give a
      rung the trace of the zone it runs in; a multi-zone pool's union is not modelled).

    Attributes:
        ice_ttl_s: Seconds a refused or interrupted offering is skipped (180).
        retry_s: Seconds from a refused launch to the next try (pod requeue + batch).
        start_s: Seconds from a launch (or a placement on a node that is up) to serving.
        consolidation: Price consolidation (replace by a single cheaper node).
        consolidate_after_s: Seconds before a consolidation is carried out (15).

    Example:
        >>> from ray_ladder.simulate.baselines import Karpenter
        >>> Karpenter().ice_ttl_s, Karpenter(consolidation=True).label
        (180.0, 'karpenter (consolidation=on)')
    """

    name: ClassVar[str] = "karpenter"
    non_negative: ClassVar[tuple[str, ...]] = ("ice_ttl_s", "retry_s", "start_s",
                                               "consolidate_after_s")
    ice_ttl_s: float = 180.0
    retry_s: float = 11.0
    start_s: float = 10.0
    consolidation: bool = False
    consolidate_after_s: float = 15.0

    def stepper(self, ctx: PolicyContext) -> Stepper:
        """The policy's run-time state over ``ctx``."""
        return _KarpenterRun(self, ctx)


class _KarpenterRun(PlacementRun):
    def __init__(self, policy: Karpenter, ctx: PolicyContext) -> None:
        super().__init__(ctx, policy.start_s)
        self.ttl, self.retry = policy.ice_ttl_s / ctx.tick_s, policy.retry_s / ctx.tick_s
        self.consolidate = policy.consolidation
        self.consolidate_delay = (policy.consolidate_after_s + policy.start_s) / ctx.tick_s
        self.cached = [-INF] * len(ctx.names)  # tick until which an offering is skipped
        self.cost = [ctx.ladder.rung(n).cost_per_hour for n in ctx.names]

    def _on_loss(self, t: float, ok: tuple[bool, ...]) -> None:
        # An interruption marks the serving offering; a launch whose capacity vanished
        # before it served is refused after all.
        for i in (self.eng.served, self.eng.pending):
            if i >= 0 and not ok[i]:
                self.cached[i] = t + self.ttl

    def _waiting(self, t: float, ok: tuple[bool, ...]) -> None:
        if self.eng.pending < 0 and self.timer == INF:
            self._launch(t, ok)  # nothing was left to try: capacity changed

    def _timer_fired(self, t: float, ok: tuple[bool, ...]) -> None:
        if self.eng.served < 0 and self.eng.pending < 0:
            self._launch(t, ok)

    def _launch(self, t: float, ok: tuple[bool, ...]) -> None:
        cached = self.cached
        for i in self.compute:  # by weight: the first offering not cached is tried
            if cached[i] > t:
                continue
            if ok[i]:
                self._run_on(t, i)
                return
            cached[i] = t + self.ttl  # the launch is tried, and refused
            if self.retry > 0:
                self.timer = t + self.retry
                return
        # Every offering is cached (or was just refused): wait for the first to expire.
        self.timer = min((cached[i] for i in self.compute if cached[i] > t), default=INF)

    def _after(self, t: float, ok: tuple[bool, ...]) -> None:
        eng = self.eng
        if not self.consolidate or eng.served < 0 or eng.pending >= 0:
            return
        s = eng.served
        # self.compute holds only offerings that can host the pod (ctx.placeable()).
        cheaper = [i for i in self.compute if i != s and self.cost[i] < self.cost[s] and ok[i]]
        free = [i for i in cheaper if self.cached[i] <= t]
        if free:
            b = min(free, key=lambda i: (self.cost[i], i))  # the cheapest replacement
            eng.aim(t, b)
            eng.switch(t, b, self.consolidate_delay, climb=eng.rank(b) < eng.rank(s))
        elif cheaper:
            # A cheaper offering is up but still cached: look again when it expires.
            self.timer = min(self.timer, min(self.cached[i] for i in cheaper))
