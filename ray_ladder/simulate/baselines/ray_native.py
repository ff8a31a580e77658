"""Ray's own fallback: ``label_selector`` + ``fallback_strategy``, placed once, never climbing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ray_ladder.simulate.baselines.base import INF, PlacementRun, SteppedBaseline, Stepper
from ray_ladder.simulate.baselines.context import PolicyContext


@dataclass(frozen=True)
class RayNative(SteppedBaseline):
    """Ray's native label fallback: chosen at placement time, kept until the rung is lost.

    One replica (or task) asks for the top rung's ``label_selector`` with the lower
    compute rungs as its ``fallback_strategy``. The model, per placement (at start, and
    each time the serving rung is lost):

    * Ray's scheduler tries the selectors in order against nodes that are up *now*
      (``fallback_strategy`` is matched against feasible and available nodes): a
      *resident* rung (one without a trace: a pool you own) gets the replica at once;
      it serves ``start_s`` later.
    * With no such node, the replica waits on the autoscaler, which launches a node of
      the first rung: obtainable, it serves ``start_s`` later; not obtainable, the
      launch stays pending until the rung becomes obtainable or
      ``launch_timeout_s`` (``RAY_AUTOSCALER_RECONCILE_ALLOCATE_STATUS_TIMEOUT_S``)
      passes, and then the next rung is tried (after the last, the first again).
    * It never climbs: a replica on a lower rung stays there until that rung is lost.

    Cache and shed rungs are not Ray placements: this policy never serves them.

    Attributes:
        launch_timeout_s: Seconds a pending launch waits before it counts as failed
            (Ray 2.60's default: 3600).
        start_s: Seconds from a placement to the replica serving (node boot, if any,
            plus replica start).

    Example:
        >>> from ray_ladder.simulate.baselines import RayNative
        >>> RayNative(launch_timeout_s=300).label
        'ray-native (launch_timeout=300)'
    """

    name: ClassVar[str] = "ray-native"
    non_negative: ClassVar[tuple[str, ...]] = ("launch_timeout_s", "start_s")
    launch_timeout_s: float = 3600.0
    start_s: float = 10.0

    def stepper(self, ctx: PolicyContext) -> Stepper:
        """The policy's run-time state over ``ctx``."""
        return _RayNativeRun(self, ctx)


class _RayNativeRun(PlacementRun):
    def __init__(self, policy: RayNative, ctx: PolicyContext) -> None:
        super().__init__(ctx, policy.start_s)
        self.timeout = policy.launch_timeout_s / ctx.tick_s
        self.attempt = -1  # position in self.compute of the launch waited on; -1: none

    def _waiting(self, t: float, ok: tuple[bool, ...]) -> None:
        if self.attempt >= 0 and ok[self.compute[self.attempt]]:
            self._run_on(t, self.compute[self.attempt])  # the pending launch succeeds
        elif self.attempt < 0 and self.eng.pending < 0:
            self._place(t, ok)

    def _timer_fired(self, t: float, ok: tuple[bool, ...]) -> None:
        # The launch waited on timed out: the autoscaler tries the next rung.
        self._try(t, ok, (self.attempt + 1) % len(self.compute))

    def _launch(self, t: float, ok: tuple[bool, ...]) -> None:
        self._try(t, ok, 0)

    def _try(self, t: float, ok: tuple[bool, ...], pos: int) -> None:
        if self.timeout <= 0:  # no wait at all: the first obtainable rung from pos on
            order = self.compute[pos:] + self.compute[:pos]
            i = next((i for i in order if ok[i]), -1)
            if i >= 0:
                self._run_on(t, i)
            else:  # nothing to launch: wait for capacity to change
                self.attempt = -1
            return
        self.attempt = pos
        i = self.compute[pos]
        if ok[i]:
            self._run_on(t, i)
        else:
            self.timer = t + self.timeout

    def _stop_trying(self) -> None:
        self.attempt, self.timer = -1, INF
