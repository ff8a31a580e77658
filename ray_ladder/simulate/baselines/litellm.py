"""LiteLLM's router: retry the next deployment, cool a failing one down, come back when it ends."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ray_ladder.simulate.baselines.base import INF, Engine, SteppedBaseline, Stepper
from ray_ladder.simulate.baselines.context import PolicyContext


@dataclass(frozen=True)
class LiteLLM(SteppedBaseline):
    """A LiteLLM router with one deployment per compute rung, in ``order`` (fallbacks).

    LiteLLM routes; it does not provision. The model assumes every deployment is kept
    running by something else whenever its rung is obtainable: it is *up* from
    ``start_s`` after its rung becomes obtainable (the endpoint restarting) until the
    rung is lost, and every compute rung is billed as standby while obtainable.

    * **Fall**: a request to a deployment that fails is retried on the next deployment
      that is up and not cooling down, within the request: no time is lost. The failed
      deployment is cooled down for ``cooldown_s``.
    * **Climb**: passive and undamped. When a cooldown ends the next request tries the
      deployment again: up, traffic is back on it at once (no hysteresis); still down
      (or still starting), it fails and cools down again. A deployment therefore comes
      back at the first cooldown boundary (counted from its failure) at which it is up.

    Cache and shed rungs are not deployments: this policy never serves them.

    Attributes:
        cooldown_s: Seconds a failed deployment is skipped (LiteLLM's default: 5).
        start_s: Seconds from a rung becoming obtainable to its deployment answering.

    Example:
        >>> from ray_ladder.simulate.baselines import LiteLLM
        >>> LiteLLM().cooldown_s
        5.0
    """

    name: ClassVar[str] = "litellm"
    non_negative: ClassVar[tuple[str, ...]] = ("cooldown_s", "start_s")
    cooldown_s: float = 5.0
    start_s: float = 10.0

    def warm_rungs(self, ctx: PolicyContext) -> list[str]:
        """Every compute rung: each deployment runs whenever its rung is obtainable."""
        return [n for n, c in zip(ctx.names, ctx.compute, strict=True) if c]

    def stepper(self, ctx: PolicyContext) -> Stepper:
        """The policy's run-time state over ``ctx``."""
        return _LiteLLMRun(self, ctx)


class _LiteLLMRun(Stepper):
    def __init__(self, policy: LiteLLM, ctx: PolicyContext) -> None:
        self.eng = Engine(ctx)
        self.compute = [i for i, c in enumerate(ctx.compute) if c]
        n = len(ctx.names)
        self.cool = policy.cooldown_s / ctx.tick_s
        self.start = policy.start_s / ctx.tick_s
        self.up_at = [INF] * n  # when each deployment answers (INF: its rung is down)
        self.failed: list[float | None] = [None] * n  # first failure of a cooling one
        self.ok: tuple[bool, ...] = ()

    def _eligible_at(self, i: int) -> float:
        up, failed = self.up_at[i], self.failed[i]
        if failed is None or up == INF:
            return up
        if self.cool <= 0:
            return max(up, failed)
        # Retried every cooldown after the failure: back at the first retry it is up.
        return failed + self.cool * max(1, math.ceil((up - failed) / self.cool - 1e-9))

    def begin(self, ok: tuple[bool, ...]) -> None:
        self.ok = ok
        for i in self.compute:
            if ok[i]:
                self.up_at[i] = -INF  # running already
        self.eng.start(next((i for i in self.compute if ok[i]), -1))
        self._route(0.0)  # requests try the better deployments that are down, and fail

    def change(self, t: float, ok: tuple[bool, ...]) -> None:
        for i in self.compute:
            if ok[i] and not self.ok[i]:
                self.up_at[i] = t + self.start
            elif not ok[i] and self.ok[i]:
                self.up_at[i] = INF
        self.ok = ok
        self._route(t)

    def next_event(self) -> float:
        served = self.eng.served
        better = self.compute if served < 0 else [i for i in self.compute if i < served]
        return min((self._eligible_at(i) for i in better), default=INF)

    def event(self, t: float, ok: tuple[bool, ...]) -> None:
        self._route(t)

    def _route(self, t: float) -> None:
        eng = self.eng
        pick = -1
        for i in self.compute:
            if self._eligible_at(i) <= t:
                pick = i
                break
            # A request tries this deployment first and fails: it cools down.
            if self.failed[i] is None and (eng.served < 0 or i <= eng.served):
                self.failed[i] = t
        if pick >= 0:
            self.failed[pick] = None
        if pick != eng.served:
            eng.aim(t, pick)
            if pick < 0:
                eng.lose(t)
            else:
                eng.switch(t, pick, 0.0)
