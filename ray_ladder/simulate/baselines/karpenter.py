"""Karpenter: weighted NodePools, offerings per zone, a 3-minute insufficient-capacity cache
per offering, price consolidation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ray_ladder.simulate.baselines.base import (
    INF,
    PlacementRun,
    SteppedBaseline,
    Stepper,
    drive,
)
from ray_ladder.simulate.baselines.context import PolicyContext
from ray_ladder.simulate.baselines.offerings import Offerings
from ray_ladder.simulate.replay import Replay


@dataclass(frozen=True)
class Karpenter(SteppedBaseline):
    """Karpenter with one NodePool per compute rung, in weight order, and one offering per
    rung and zone.

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
    * **Offerings per zone.** A NodePool spanning several zones is one offering per
      zone, and the unavailable-offerings cache is kept per offering
      (``UnavailableOfferings.IsUnavailable(instanceType, zone, capacityType)``,
      karpenter-provider-aws ``pkg/cache``). A rung given one trace per zone
      (:mod:`ray_ladder.simulate.zones`) is one offering per zone: a launch goes to the
      first zone of the highest-weight NodePool that is not cached and has capacity (the
      zones share the rung's price), a launch refused in every zone caches each, and an
      interruption caches its own zone only. Every policy sees a zoned rung obtainable
      while any zone is, so a node whose zone is lost moves to another zone of its rung
      at no cost, if Karpenter would launch there (up, not cached); otherwise it is a
      loss, where the other policies stay up. A rung with one trace is one offering.

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

    def run(self, ctx: PolicyContext) -> Replay:
        """Replay the policy over ``ctx``'s timeline, at offering grain when a rung has
        zones (a zone can change while its rung stays obtainable)."""
        state = _KarpenterRun(self, ctx)
        offers = state.offers
        drive(ctx, state, None if offers.single else offers.feed(ctx.ticks, state.see))
        return state.eng.finish(self.name, self.params(), self.warm_rungs(ctx))


class _KarpenterRun(PlacementRun):
    """Karpenter's run over its offerings (:class:`Offerings`: a rung's zones, or the
    rung itself). ``zrow``: which offerings are obtainable now; ``at``: the offering of
    the node serving or starting, per rung."""

    def __init__(self, policy: Karpenter, ctx: PolicyContext) -> None:
        super().__init__(ctx, policy.start_s)
        self.ttl, self.retry = policy.ice_ttl_s / ctx.tick_s, policy.retry_s / ctx.tick_s
        self.consolidate = policy.consolidation
        self.consolidate_delay = (policy.consolidate_after_s + policy.start_s) / ctx.tick_s
        self.offers = Offerings.of(ctx)
        self.by_rung = self.offers.by_rung
        self.cached = [-INF] * len(self.offers.rung)  # tick until which an offering is skipped
        self.cost = [ctx.ladder.rung(n).cost_per_hour for n in ctx.names]
        self.zrow: tuple[bool, ...] = ()
        self.at: dict[int, int] = {}  # rung -> offering of its node (serving or starting)

    def see(self, zrow: tuple[bool, ...]) -> None:
        self.zrow = zrow  # the offering row of the segment about to be fed

    def begin(self, ok: tuple[bool, ...]) -> None:
        if self.offers.single:
            self.zrow = ok
        super().begin(ok)
        if self.eng.served >= 0 and self.eng.served not in self.at:
            self.at[self.eng.served] = self._pick(self.eng.served, 0.0, cached_too=True)

    def change(self, t: float, ok: tuple[bool, ...]) -> None:
        if self.offers.single:
            self.zrow = ok
        else:
            self._follow(t)
        super().change(t, ok)

    def _follow(self, t: float) -> None:
        """A node whose zone lost its capacity while another zone of its rung has some:
        every policy sees the rung as still obtainable, so the pod moves to an offering
        Karpenter would launch (up, not cached) at no cost; the one it left is cached
        (an interruption marks its offering). With no such offering it is a loss."""
        for r in (self.eng.served, self.eng.pending):
            o = self.at.get(r, -1)
            if r >= 0 and o >= 0 and not self.zrow[o]:
                alt = self._pick(r, t)
                if alt >= 0:
                    self.cached[o], self.at[r] = t + self.ttl, alt

    def _pick(self, i: int, t: float, *, cached_too: bool = False) -> int:
        """The first offering of rung ``i`` that is up and not cached (any that is up
        with ``cached_too``: a node already there), or -1."""
        for o in self.by_rung[i]:
            if self.zrow[o] and (cached_too or self.cached[o] <= t):
                return o
        return -1

    def _ok(self, ok: tuple[bool, ...], i: int) -> bool:
        o = self.at.get(i, -1)
        return self.zrow[o] if o >= 0 else ok[i]

    def _on_loss(self, t: float, ok: tuple[bool, ...]) -> None:
        # An interruption marks the serving offering; a launch whose capacity vanished
        # before it served is refused after all.
        for i in (self.eng.served, self.eng.pending):
            o = self.at.get(i, -1)
            if i >= 0 and o >= 0 and not self.zrow[o]:
                self.cached[o] = t + self.ttl

    def _run_on(self, t: float, i: int, delay: float | None = None) -> None:
        if self.at.get(i, -1) < 0 or not self.zrow[self.at[i]]:
            self.at[i] = self._pick(i, t, cached_too=True)  # a node that is up (resident)
        super()._run_on(t, i, delay)

    def _waiting(self, t: float, ok: tuple[bool, ...]) -> None:
        if self.eng.pending < 0 and self.timer == INF:
            self._launch(t, ok)  # nothing was left to try: capacity changed

    def _timer_fired(self, t: float, ok: tuple[bool, ...]) -> None:
        if self.eng.served < 0 and self.eng.pending < 0:
            self._launch(t, ok)

    def _launch(self, t: float, ok: tuple[bool, ...]) -> None:
        cached, zrow = self.cached, self.zrow
        for i in self.compute:  # NodePools by weight: the first with an offering not cached
            offs, up = self.by_rung[i], -1
            free = False  # one of them not cached (no lists built: a launch a segment)
            for o in offs:
                if cached[o] <= t:
                    free = True
                    if zrow[o]:
                        up = o
                        break
            if not free:
                continue
            if up >= 0:  # the zones share the rung's price: any zone with capacity
                self.at[i] = up
                self._run_on(t, i)
                return
            for o in offs:  # the launch is tried in every zone, and refused in each
                if cached[o] <= t:
                    cached[o] = t + self.ttl
            if self.retry > 0:
                self.timer = t + self.retry
                return
        # Every offering is cached (or was just refused): wait for the first to expire.
        self.timer = min((cached[o] for i in self.compute for o in self.by_rung[i]
                          if cached[o] > t), default=INF)

    def _after(self, t: float, ok: tuple[bool, ...]) -> None:
        eng = self.eng
        if not self.consolidate or eng.served < 0 or eng.pending >= 0:
            return
        s = eng.served
        # self.compute holds only offerings that can host the pod (ctx.placeable()).
        cheaper = [i for i in self.compute if i != s and self.cost[i] < self.cost[s] and ok[i]]
        free = [i for i in cheaper if self._pick(i, t) >= 0]
        if free:
            b = min(free, key=lambda i: (self.cost[i], i))  # the cheapest replacement
            self.at[b] = self._pick(b, t)
            eng.aim(t, b)
            eng.switch(t, b, self.consolidate_delay, climb=eng.rank(b) < eng.rank(s))
        elif cheaper:
            # A cheaper offering is up but still cached: look again when it expires.
            self.timer = min(self.timer, min(self.cached[o] for i in cheaper
                                             for o in self.by_rung[i] if self.zrow[o]))
