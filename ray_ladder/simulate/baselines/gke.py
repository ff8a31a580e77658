"""GKE custom ComputeClass: node priorities, fall when provisioning fails, active migration."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import ClassVar

from ray_ladder.simulate.baselines.base import INF, PlacementRun, SteppedBaseline, Stepper
from ray_ladder.simulate.baselines.context import PolicyContext

WHEN_UNSATISFIABLE = ("DoNotScaleUp", "ScaleUpAnyway")

# The cluster autoscaler's node-group backoff (kubernetes/autoscaler, cluster-autoscaler
# flags `--initial-node-group-backoff-duration` 5m, `--max-node-group-backoff-duration`
# 30m, `--node-group-backoff-reset-timeout` 3h; utils/backoff's exponential backoff
# doubles the duration after each failed scale-up, up to the max).
BACKOFF_INITIAL_S = 300.0
BACKOFF_MAX_S = 1800.0
BACKOFF_RESET_S = 10800.0


@dataclass(frozen=True)
class GkeComputeClass(SteppedBaseline):
    """A GKE custom ComputeClass whose ``priorities`` are the ladder's compute rungs.

    The model:

    * **The pod's request decides the rungs**: priorities only choose among nodes that
      satisfy the pod's requests, so only rungs of the top rung's kind (accelerator or
      none: :meth:`PolicyContext.placeable`) are ever used; a GPU pod never lands on the
      CPU pool, it stays pending.
    * **Fall**: when the serving node's capacity is lost, the pod is pending. An existing
      node of the class (a *resident* rung: one without a trace, a pool you own) takes it at
      once (kube-scheduler); it serves ``start_s`` later. Otherwise the cluster
      autoscaler walks the priorities from the top: a rule whose capacity is not
      obtainable fails after ``provision_fail_s`` and the next one is tried (GKE moves on
      at once after a stock-out error, one autoscaler scan); the first obtainable rule's
      node serves ``start_s`` after it is asked for.
    * **Node-pool backoff**: a rule (node pool) whose scale-up failed is backed off by
      the cluster autoscaler: skipped, without a try, for ``backoff_initial_s`` after
      its first failure, then twice as long after each further failure, at most
      ``backoff_max_s``; the length starts over once ``backoff_reset_s`` pass without a
      failure. A backed-off rule is skipped even if its capacity is back, by the walk
      and by active migration alike; the walk starts again when a backoff ends.
    * **No rule satisfiable**: ``whenUnsatisfiable: DoNotScaleUp`` leaves the pod pending
      (nothing served) until a rule can be had again; ``ScaleUpAnyway`` creates a node of
      GKE's default machine series (general-purpose, no accelerator) instead. It can run
      the pod only if the pod asks for no accelerator (a CPU workload: the rungs it can
      use need no custom resources, GPUs or accelerator type): then its last usable
      rung serves, whatever its trace says (general-purpose capacity is taken to be
      there). A GPU pod stays pending as with ``DoNotScaleUp``.
    * **Climb**: with ``activeMigration.optimizeRulePriority`` (``active_migration``),
      when a higher-priority rule is obtainable GKE provisions it and moves the pod;
      the old node serves until the move, ``climb_s`` after it starts (one whole
      measured cycle: provision, cordon, drain, move, delete). A migration whose target
      is lost meanwhile is abandoned. Without active migration it never climbs.

    Attributes:
        climb_s: Seconds of one active-migration cycle (measured: 341).
        provision_fail_s: Seconds the autoscaler spends on a rule it cannot provision.
        start_s: Seconds from asking for a node (or placing on one) to the pod serving.
        active_migration: ``activeMigration.optimizeRulePriority``.
        when_unsatisfiable: ``DoNotScaleUp`` or ``ScaleUpAnyway``.
        backoff_initial_s: First backoff of a node pool whose scale-up failed (300).
        backoff_max_s: Longest backoff (1800).
        backoff_reset_s: Seconds without a failure after which the backoff starts over
            (10800).

    Example:
        >>> from ray_ladder.simulate.baselines import GkeComputeClass
        >>> GkeComputeClass(when_unsatisfiable="ScaleUpAnyway").label
        'gke-computeclass (when_unsatisfiable=ScaleUpAnyway)'
    """

    name: ClassVar[str] = "gke-computeclass"
    non_negative: ClassVar[tuple[str, ...]] = ("climb_s", "provision_fail_s", "start_s",
                                               "backoff_initial_s", "backoff_max_s",
                                               "backoff_reset_s")
    climb_s: float = 341.0
    provision_fail_s: float = 10.0
    start_s: float = 10.0
    active_migration: bool = True
    when_unsatisfiable: str = "DoNotScaleUp"
    backoff_initial_s: float = BACKOFF_INITIAL_S
    backoff_max_s: float = BACKOFF_MAX_S
    backoff_reset_s: float = BACKOFF_RESET_S

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.when_unsatisfiable not in WHEN_UNSATISFIABLE:
            raise ValueError(f"gke-computeclass: when_unsatisfiable must be one of "
                             f"{WHEN_UNSATISFIABLE}, got {self.when_unsatisfiable!r}")

    def stepper(self, ctx: PolicyContext) -> Stepper:
        """The policy's run-time state over ``ctx``."""
        return _GkeRun(self, ctx)

    def beyond_the_oracle(self, ctx: PolicyContext) -> str | None:
        """``ScaleUpAnyway`` serves the pod's last usable rung against its trace, if the
        pod asks for no accelerator."""
        default = _default_rung(ctx)
        if self.when_unsatisfiable != "ScaleUpAnyway" or default < 0 or not ctx.traced[default]:
            return None
        return (f"its ScaleUpAnyway node of GKE's default series is taken to be always "
                f"there, so it serves {ctx.names[default]!r} while that rung's trace "
                "says there is no capacity (a modelling choice, not a better policy)")


    def replay_key(self, ctx: PolicyContext) -> Hashable:
        """``ScaleUpAnyway`` replays as ``DoNotScaleUp`` where GKE's default node cannot
        host the pod (it asks for an accelerator): one run for both rows."""
        if _default_rung(ctx) >= 0:
            return super().replay_key(ctx)
        return type(self), tuple((k, "DoNotScaleUp" if k == "when_unsatisfiable" else v)
                                 for k, v in self.params().items())


def _default_rung(ctx: PolicyContext) -> int:
    """The rung a node of GKE's default series (no accelerator) serves as: the pod's last
    usable rung when the pod asks for no accelerator, else -1 (it cannot host the pod)."""
    usable = ctx.placeable()
    return usable[-1] if usable and not ctx.accelerated(usable[-1]) else -1


class _GkeRun(PlacementRun):
    def __init__(self, policy: GkeComputeClass, ctx: PolicyContext) -> None:
        super().__init__(ctx, policy.start_s)
        self.climb, self.fail = policy.climb_s / ctx.tick_s, policy.provision_fail_s / ctx.tick_s
        self.migrate = policy.active_migration
        self.anyway = policy.when_unsatisfiable == "ScaleUpAnyway"
        self.default = _default_rung(ctx)
        if self.default < 0:
            self.anyway = False  # GKE's default node cannot host an accelerator pod
        self.on_default = False  # serving (or starting) GKE's default node
        self.walk = -1  # position in self.compute of the rule being provisioned; -1: none
        n, tick = len(ctx.names), ctx.tick_s
        self.b0, self.bmax = policy.backoff_initial_s / tick, policy.backoff_max_s / tick
        self.breset = policy.backoff_reset_s / tick
        self.until = [-INF] * n  # per rule: backed off until then
        self.length = [0.0] * n  # per rule: the last backoff's length (0: none yet)
        self.failed_at = [-INF] * n  # per rule: its last failed scale-up

    def _backed_off(self, i: int, t: float) -> bool:
        return self.until[i] > t

    def _fail(self, i: int, t: float) -> None:
        """Rule ``i``'s scale-up failed at ``t``: back its node pool off."""
        fresh = self.length[i] == 0 or t - self.failed_at[i] >= self.breset
        self.length[i] = self.b0 if fresh else min(2 * self.length[i], self.bmax)
        self.failed_at[i], self.until[i] = t, t + self.length[i]

    def _ok(self, ok: tuple[bool, ...], i: int) -> bool:
        return ok[i] or (self.on_default and i == self.default)

    def _waiting(self, t: float, ok: tuple[bool, ...]) -> None:
        if self.walk < 0 and self.eng.pending < 0:
            self._place(t, ok)  # DoNotScaleUp was waiting: capacity changed

    def _started(self) -> None:
        if self.eng.served != self.default:
            self.on_default = False

    def _timer_fired(self, t: float, ok: tuple[bool, ...]) -> None:
        if self.walk >= 0:
            self._fail(self.compute[self.walk], t)
            self._try(t, ok, self.walk + 1)  # the rule failed: the next one
        elif self.eng.served < 0 and self.eng.pending < 0:
            self._place(t, ok)  # a backoff ended: walk the priorities again

    def _launch(self, t: float, ok: tuple[bool, ...]) -> None:
        self._try(t, ok, 0)

    def _try(self, t: float, ok: tuple[bool, ...], pos: int) -> None:
        compute, until = self.compute, self.until
        while pos < len(compute):
            i = compute[pos]
            if until[i] > t:  # _backed_off(i, t), inline: this loop runs at every loss
                pos += 1  # the autoscaler skips a node pool in backoff, without a try
                continue
            if ok[i]:
                self._run_on(t, i)
                return
            if self.fail > 0:  # this rule fails after one attempt; the next one is next
                self.walk, self.timer = pos, t + self.fail
                return
            self._fail(i, t)
            pos += 1
        self._stop_trying()
        if self.anyway:
            self._run_on(t, self.default, default=True)
        # DoNotScaleUp: pending until capacity changes (see _waiting()) or a backoff ends.
        self._wake(t)

    def _wake(self, t: float) -> None:
        """Set the timer to the first backoff that ends after ``t`` (if nothing else)."""
        if self.walk < 0 and self.timer == INF:
            first = INF  # min((u for u in self.until if u > t), default=INF), unrolled
            for u in self.until:
                if t < u < first:
                    first = u
            self.timer = first

    def _stop_trying(self) -> None:
        self.walk, self.timer = -1, INF

    def _run_on(self, t: float, i: int, delay: float | None = None, *,
                default: bool = False) -> None:
        self.on_default = default
        super()._run_on(t, i, delay)

    def _after(self, t: float, ok: tuple[bool, ...]) -> None:
        eng = self.eng
        if not self.migrate or eng.served < 0 or eng.pending >= 0:
            return
        # Off the default node, any rule beats it; otherwise only higher priorities.
        limit = len(ok) if self.on_default else eng.served
        until, is_compute = self.until, self.is_compute
        b, first = -1, INF  # the best rule up and not backed off; the first backoff end
        for i in range(limit):
            if ok[i] and is_compute[i]:
                u = until[i]
                if u <= t:
                    b = i
                    break
                if u < first:
                    first = u
        if b >= 0 and b != eng.served:
            eng.aim(t, b)
            eng.switch(t, b, self.climb, climb=True)
        elif self.timer == INF:
            # A better rule is obtainable but backed off: look again when it ends. (When
            # b is served, the rules above it are all backed off: `first` has them all.)
            self.timer = first if b < 0 else _first_end(until, ok, is_compute, limit, t)


def _first_end(until: list[float], ok: tuple[bool, ...], is_compute: tuple[bool, ...],
               limit: int, t: float) -> float:
    """The first backoff end after ``t`` among the rules below ``limit`` that are up."""
    first = INF
    for i in range(limit):
        if ok[i] and is_compute[i] and t < until[i] < first:
            first = until[i]
    return first
