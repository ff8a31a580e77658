"""Ray's own fallback: ``label_selector`` + ``fallback_strategy``, as Ray 2.60 places it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ray_ladder.simulate.baselines.base import INF, PlacementRun, SteppedBaseline, Stepper
from ray_ladder.simulate.baselines.context import PolicyContext

# Ray 2.60's defaults, read from its source (ray/autoscaler/...):
LAUNCH_TIMEOUT_S = 3600.0
"""``RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S``, ``60 * 60``
(``ray/autoscaler/v2/instance_manager/config.py``,
``InstanceReconcileConfig.allocate_status_timeout_s``): how long an allocated instance may
wait to run Ray before the reconciler marks it ``ALLOCATION_TIMEOUT``."""

DOWNSCALE_DELAY_S = 600.0
"""Serve's ``AutoscalingConfig.downscale_delay_s`` default, ``600.0``
(``ray/serve/config.py``): how long load stays low before Serve removes a replica."""


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
    * **It never climbs by itself**: Serve never moves a running replica, so a replica
      on a lower rung (one it started on at time 0, or a resident pool) stays there
      until that rung is lost: traffic drifts onto fallback nodes and stays there.
    * **Serve's downscale, fallback first** (``serve_cycle_s`` > 0: an autoscaling Serve
      deployment whose load rises and falls once every ``serve_cycle_s``). At each peak
      Serve adds a replica, and ``downscale_delay_s`` after it (Serve's
      ``AutoscalingConfig.downscale_delay_s``, 600 s) removes one. Ray 2.60 stops, in
      order, replicas not yet running, replicas off the head node, replicas on nodes that
      do *not* match the deployment's primary ``label_selector`` (ray-project/ray#61488),
      then those on the emptiest nodes, newest first
      (``ray/serve/_private/deployment_scheduler.py``, ``_get_replicas_to_stop``). So:
      the peak's replica goes where the raylet puts it, a node that is up of the best
      selector first (a resident rung, which has room) or else, pending, a node the
      autoscaler launches of the primary's type. On a fallback pool the downscale
      stops the newer one: the deployment stays on the fallback. On the primary, if
      the primary is obtainable for the replica's ``start_s`` before the downscale, the
      downscale stops the fallback replica: the deployment is back on the primary,
      one climb per cycle at most. A replica still starting at the downscale is the
      one stopped. Off (0, the default) for a fixed ``num_replicas``, and for a
      training gang (no Serve downscale).

    Cache and shed rungs are not Ray placements: this policy never serves them.

    Attributes:
        launch_timeout_s: Seconds a pending launch waits before it counts as failed
            (Ray 2.60's default: 3600). The next launch is of the same type, so it
            changes no figure; kept so that specs naming it still parse.
        start_s: Seconds from a placement to the replica serving (node boot, if any,
            plus replica start).
        serve_cycle_s: Seconds between the load peaks of an autoscaling Serve
            deployment (0: a fixed number of replicas, no downscale).
        downscale_delay_s: Seconds from a peak's upscale to its downscale (Serve's
            ``downscale_delay_s`` default: 600).

    Example:
        >>> from ray_ladder.simulate.baselines import RayNative
        >>> RayNative(launch_timeout_s=300).label
        'ray-native (launch_timeout=300)'
    """

    name: ClassVar[str] = "ray-native"
    non_negative: ClassVar[tuple[str, ...]] = ("launch_timeout_s", "start_s",
                                               "serve_cycle_s", "downscale_delay_s")
    launch_timeout_s: float = LAUNCH_TIMEOUT_S
    start_s: float = 10.0
    serve_cycle_s: float = 0.0
    downscale_delay_s: float = DOWNSCALE_DELAY_S

    def stepper(self, ctx: PolicyContext) -> Stepper:
        """The policy's run-time state over ``ctx``."""
        return _RayNativeRun(self, ctx)


class _RayNativeRun(PlacementRun):
    def __init__(self, policy: RayNative, ctx: PolicyContext) -> None:
        super().__init__(ctx, policy.start_s)  # fallback targets: ctx.placeable()
        self.launching = False  # a launch of the primary is pending
        cycle = policy.serve_cycle_s / ctx.tick_s
        # The peak's replica must start by the downscale: it is launched at the latest
        # `start` before it (the primary obtainable from then on) and serves at it.
        lead = (policy.downscale_delay_s - policy.start_s) / ctx.tick_s
        self.cycle = cycle if cycle > 0 and lead >= 0 and not ctx.training_rungs() else 0.0
        self.timer = self.cycle + lead if self.cycle else INF

    def _waiting(self, t: float, ok: tuple[bool, ...]) -> None:
        if self.launching and ok[self.compute[0]]:
            self._run_on(t, self.compute[0])  # the pending launch of the primary succeeds
        elif not self.launching and self.eng.pending < 0:
            self._place(t, ok)

    def _timer_fired(self, t: float, ok: tuple[bool, ...]) -> None:
        # The only timer is Serve's cycle (a timed-out launch is relaunched as the primary's
        # node type again, no change): `start` before the downscale, place the peak's replica.
        self.timer = t + self.cycle
        eng, primary = self.eng, self.compute[0]
        if eng.served < 0 or eng.served == primary or eng.pending >= 0:
            return
        resident = self._best_resident(ok)
        target = resident if resident >= 0 else primary if ok[primary] else -1
        if target == primary:  # the downscale stops the fallback replica (#61488)
            eng.aim(t, primary)
            eng.switch(t, primary, self.start, climb=True)

    def _launch(self, t: float, ok: tuple[bool, ...]) -> None:
        if ok[self.compute[0]]:
            self._run_on(t, self.compute[0])
        else:
            self.launching = True  # pending (relaunched after each timeout) until obtainable

    def _stop_trying(self) -> None:
        self.launching = False
