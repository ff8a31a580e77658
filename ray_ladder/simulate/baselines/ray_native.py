"""Ray's own fallback: ``label_selector`` + ``fallback_strategy``, as Ray 2.60 places it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ray_ladder.simulate.baselines.base import PlacementRun, SteppedBaseline, Stepper
from ray_ladder.simulate.baselines.context import PolicyContext

# Ray 2.60's defaults, read from its source (ray/autoscaler/...):
LAUNCH_TIMEOUT_S = 3600.0
"""``RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S``, ``60 * 60``
(``ray/autoscaler/v2/instance_manager/config.py``,
``InstanceReconcileConfig.allocate_status_timeout_s``): how long an allocated instance may
wait to run Ray before the reconciler marks it ``ALLOCATION_TIMEOUT``."""


@dataclass(frozen=True)
class RayNative(SteppedBaseline):
    """Ray's native label fallback, as Ray 2.60's scheduler and autoscaler v2 place it.

    One replica (or task) asks for the top compute rung's resources and
    ``label_selector``, with the lower rungs' selectors as its ``fallback_strategy``.
    The model, per placement (at start, and each time the serving rung is lost):

    * **Same request, other labels.** ``fallback_strategy`` is a list of decorator
      options that replace the *label selector*, not the resource request
      (``ray/remote_function.py``: "soft constraints through a list of decorator options
      to fall back on when scheduling on a node"). A rung whose request differs in kind
      (accelerator vs none) is no fallback target (:meth:`PolicyContext.placeable`, the
      rule GKE and Karpenter follow too): a GPU replica never lands on a CPU rung, and
      the reverse.
    * **A node that is up now** of a fallback rung (a *resident* rung: one without a
      trace, a pool you own) takes the replica at once (the raylet tries the selectors
      in order against available nodes); it serves ``start_s`` later.
    * **Otherwise the autoscaler launches the primary type, always.** Autoscaler v2
      sorts candidate node types by ``UtilizationScore`` first, whose first element is
      the label-selector priority (``ray/autoscaler/v2/scheduler.py``,
      ``_compute_score`` -> ``_satisfies_label_constraints``: ``len(selectors) - i``),
      and only then by recoverable availability, priority and cloud availability
      (``_schedule_node``'s sort). The primary's node type wins every round, so a
      launch that fails or passes ``launch_timeout_s`` is followed by another launch of
      the *same* type: the replica serves when the primary is obtainable again, never
      on a lower rung that nothing keeps up.
    * **It never climbs**: a replica on a lower rung (one it started on at time 0, or a
      resident pool) stays there until that rung is lost.

    Cache and shed rungs are not Ray placements: this policy never serves them.

    Attributes:
        launch_timeout_s: Seconds a pending launch waits before it counts as failed
            (Ray 2.60's default: 3600). The next launch is of the same type, so it
            changes no figure; kept so that specs naming it still parse.
        start_s: Seconds from a placement to the replica serving (node boot, if any,
            plus replica start).

    Example:
        >>> from ray_ladder.simulate.baselines import RayNative
        >>> RayNative(launch_timeout_s=300).label
        'ray-native (launch_timeout=300)'
    """

    name: ClassVar[str] = "ray-native"
    non_negative: ClassVar[tuple[str, ...]] = ("launch_timeout_s", "start_s")
    launch_timeout_s: float = LAUNCH_TIMEOUT_S
    start_s: float = 10.0

    def stepper(self, ctx: PolicyContext) -> Stepper:
        """The policy's run-time state over ``ctx``."""
        return _RayNativeRun(self, ctx)


class _RayNativeRun(PlacementRun):
    def __init__(self, policy: RayNative, ctx: PolicyContext) -> None:
        super().__init__(ctx, policy.start_s)  # fallback targets: ctx.placeable()
        self.launching = False  # a launch of the primary is pending

    def _waiting(self, t: float, ok: tuple[bool, ...]) -> None:
        if self.launching and ok[self.compute[0]]:
            self._run_on(t, self.compute[0])  # the pending launch of the primary succeeds
        elif not self.launching and self.eng.pending < 0:
            self._place(t, ok)

    def _timer_fired(self, t: float, ok: tuple[bool, ...]) -> None:
        pass  # no timer: a timed-out launch is relaunched as the same type (no change)

    def _launch(self, t: float, ok: tuple[bool, ...]) -> None:
        if ok[self.compute[0]]:
            self._run_on(t, self.compute[0])
        else:
            self.launching = True  # pending (relaunched after each timeout) until obtainable

    def _stop_trying(self) -> None:
        self.launching = False
