"""GKE custom ComputeClass: node priorities, fall when provisioning fails, active migration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ray_ladder.simulate.baselines.base import (
    INF,
    PlacementRun,
    SteppedBaseline,
    Stepper,
    best,
)
from ray_ladder.simulate.baselines.context import PolicyContext

WHEN_UNSATISFIABLE = ("DoNotScaleUp", "ScaleUpAnyway")


@dataclass(frozen=True)
class GkeComputeClass(SteppedBaseline):
    """A GKE custom ComputeClass whose ``priorities`` are the ladder's compute rungs.

    The model:

    * **Fall**: when the serving node's capacity is lost, the pod is pending. An existing
      node of the class (a *resident* rung: one without a trace, a pool you own) takes it at
      once (kube-scheduler); it serves ``start_s`` later. Otherwise the cluster
      autoscaler walks the priorities from the top: a rule whose capacity is not
      obtainable fails after ``provision_fail_s`` and the next one is tried (GKE moves on
      at once after a stock-out error, one autoscaler scan); the first obtainable rule's
      node serves ``start_s`` after it is asked for.
    * **No rule satisfiable**: ``whenUnsatisfiable: DoNotScaleUp`` leaves the pod pending
      (nothing served) until a rule can be had again; ``ScaleUpAnyway`` creates a node of
      GKE's default machine series (general-purpose, no accelerator) instead. It can run
      the pod only if the ladder's *last compute rung* needs no accelerator (no custom
      resources, GPUs or accelerator type: a CPU rung): then that rung serves, whatever
      its trace says (general-purpose capacity is taken to be there). Otherwise the pod
      stays pending as with ``DoNotScaleUp``.
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

    Example:
        >>> from ray_ladder.simulate.baselines import GkeComputeClass
        >>> GkeComputeClass(when_unsatisfiable="ScaleUpAnyway").label
        'gke-computeclass (when_unsatisfiable=ScaleUpAnyway)'
    """

    name: ClassVar[str] = "gke-computeclass"
    non_negative: ClassVar[tuple[str, ...]] = ("climb_s", "provision_fail_s", "start_s")
    climb_s: float = 341.0
    provision_fail_s: float = 10.0
    start_s: float = 10.0
    active_migration: bool = True
    when_unsatisfiable: str = "DoNotScaleUp"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.when_unsatisfiable not in WHEN_UNSATISFIABLE:
            raise ValueError(f"gke-computeclass: when_unsatisfiable must be one of "
                             f"{WHEN_UNSATISFIABLE}, got {self.when_unsatisfiable!r}")

    def stepper(self, ctx: PolicyContext) -> Stepper:
        """The policy's run-time state over ``ctx``."""
        return _GkeRun(self, ctx)

    def beyond_the_oracle(self, ctx: PolicyContext) -> str | None:
        """``ScaleUpAnyway`` serves the last compute rung against its trace, if a CPU rung."""
        compute = [i for i, c in enumerate(ctx.compute) if c]
        if (self.when_unsatisfiable != "ScaleUpAnyway" or not compute
                or not ctx.traced[compute[-1]] or not _general_purpose(ctx, compute[-1])):
            return None
        return (f"its ScaleUpAnyway node of GKE's default series is taken to be always "
                f"there, so it serves {ctx.names[compute[-1]]!r} while that rung's trace "
                "says there is no capacity (a modelling choice, not a better policy)")


def _general_purpose(ctx: PolicyContext, i: int) -> bool:
    """Whether rung ``i`` fits a node of GKE's default series: no accelerator asked."""
    rung = ctx.ladder.rung(ctx.names[i])
    return not rung.resources and not rung.num_gpus and not rung.accelerator_type


class _GkeRun(PlacementRun):
    def __init__(self, policy: GkeComputeClass, ctx: PolicyContext) -> None:
        super().__init__(ctx, policy.start_s)
        self.climb, self.fail = policy.climb_s / ctx.tick_s, policy.provision_fail_s / ctx.tick_s
        self.migrate = policy.active_migration
        self.anyway = policy.when_unsatisfiable == "ScaleUpAnyway"
        self.default = self.compute[-1] if self.compute else -1
        if self.default >= 0 and not _general_purpose(ctx, self.default):
            self.anyway = False  # GKE's default node cannot host an accelerator pod
        self.on_default = False  # serving (or starting) GKE's default node
        self.walk = -1  # position in self.compute of the rule being provisioned; -1: none

    def _ok(self, ok: tuple[bool, ...], i: int) -> bool:
        return ok[i] or (self.on_default and i == self.default)

    def _waiting(self, t: float, ok: tuple[bool, ...]) -> None:
        if self.walk < 0 and self.eng.pending < 0:
            self._place(t, ok)  # DoNotScaleUp was waiting: capacity changed

    def _started(self) -> None:
        if self.eng.served != self.default:
            self.on_default = False

    def _timer_fired(self, t: float, ok: tuple[bool, ...]) -> None:
        self._try(t, ok, self.walk + 1)  # the rule failed: the next one

    def _launch(self, t: float, ok: tuple[bool, ...]) -> None:
        self._try(t, ok, 0)

    def _try(self, t: float, ok: tuple[bool, ...], pos: int) -> None:
        while pos < len(self.compute):
            i = self.compute[pos]
            if ok[i]:
                self._run_on(t, i)
                return
            if self.fail > 0:  # this rule fails after one attempt; the next one is next
                self.walk, self.timer = pos, t + self.fail
                return
            pos += 1
        self._stop_trying()
        if self.anyway:
            self._run_on(t, self.default, default=True)
        # DoNotScaleUp: pending until capacity changes (see _waiting()).

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
        b = best(ok, self.is_compute, limit)
        if b >= 0 and b != eng.served:
            eng.aim(t, b)
            eng.switch(t, b, self.climb, climb=True)
