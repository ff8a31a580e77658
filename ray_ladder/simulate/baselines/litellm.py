"""LiteLLM's router: try the deployments in fallback order, each request paying the dead ones."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ray_ladder.simulate.baselines.base import INF, Engine, SteppedBaseline, Stepper
from ray_ladder.simulate.baselines.context import PolicyContext

COOLDOWN_S = 5.0
"""``DEFAULT_COOLDOWN_TIME_SECONDS = 5`` (BerriAI/litellm, ``litellm/constants.py``): how long
a deployment that *is* put in cooldown is skipped (``Router(cooldown_time=...)``)."""

FAIL_S = 5.0
"""Seconds one request spends on a dead deployment before the router moves on: the OpenAI
client's connect timeout, ``httpx.Timeout(timeout=600, connect=5.0)`` (openai,
``openai/_constants.py``, ``DEFAULT_TIMEOUT``). A refused port fails in milliseconds
(``fail=0.01``); LiteLLM's own ``request_timeout`` is 6000 s, so a request stuck on a
node that vanished mid-answer can wait far longer."""


@dataclass(frozen=True)
class LiteLLM(SteppedBaseline):
    """A LiteLLM router with one deployment per compute rung, in ``order`` (fallbacks).

    LiteLLM routes; it does not provision. The model assumes every deployment is kept
    running by something else whenever its rung is obtainable: it is *up* from
    ``start_s`` after its rung becomes obtainable (the endpoint restarting) until the
    rung is lost, and every compute rung is billed as standby while obtainable. Each
    rung is its own model group (a different model), chained by ``fallbacks``.

    * **The dead deployment is tried first.** A request goes to the first deployment of
      the chain that is not cooling down; one that is dead fails after ``fail_s`` and
      the request falls back to the next. LiteLLM's default rules put a dead
      deployment of a one-deployment model group in cooldown *never*:
      ``_is_cooldown_required`` returns False for any ``APIConnectionError``
      (``ignored_strings = ["APIConnectionError"]``), and for other failures
      ``_should_cooldown_deployment`` cools a single-deployment group down only on a
      non-retryable status (401, 404) or when 100% of at least
      ``SINGLE_DEPLOYMENT_TRAFFIC_FAILURE_THRESHOLD`` (1000) requests in the minute failed
      (``litellm/router_utils/cooldown_handlers.py``). So with ``cooldown_dead`` off
      (the default) every request pays ``fail_s`` per dead deployment above the one
      that answers, for as long as they are dead.
    * **Fall**: when the serving deployment is lost, nothing is answered for the first
      failed try: ``fail_s`` times the dead deployments a request tries before one that
      is up (in-flight answers break; the next requests fail on it, then fall back).
    * **Climb**: passive and undamped. With no cooldown, the next request after a better
      deployment answers again goes to it: traffic is back at once. With
      ``cooldown_dead`` (e.g. ``allowed_fails`` set, or several deployments per group)
      a failed deployment is skipped for ``cooldown_s`` and tried again at each
      cooldown boundary: it comes back at the first boundary (counted from its
      failure) at which it is up, and only its first failed try costs ``fail_s``.

    Cache and shed rungs are not deployments: this policy never serves them, and a
    ladder that trains (a rung with a ``train:`` shape) gets no row: LiteLLM routes
    requests, it runs no training gang.

    Attributes:
        cooldown_s: Seconds a deployment in cooldown is skipped (LiteLLM's default: 5).
        start_s: Seconds from a rung becoming obtainable to its deployment answering.
        fail_s: Seconds a request spends on a dead deployment before falling back.
        cooldown_dead: Whether a dead deployment is put in cooldown (LiteLLM's default
            for a one-deployment model group: no).

    Example:
        >>> from ray_ladder.simulate.baselines import LiteLLM
        >>> LiteLLM().cooldown_s, LiteLLM().fail_s, LiteLLM().cooldown_dead
        (5.0, 5.0, False)
    """

    name: ClassVar[str] = "litellm"
    non_negative: ClassVar[tuple[str, ...]] = ("cooldown_s", "start_s", "fail_s")
    cooldown_s: float = COOLDOWN_S
    start_s: float = 10.0
    fail_s: float = FAIL_S
    cooldown_dead: bool = False

    def warm_rungs(self, ctx: PolicyContext) -> list[str]:
        """Every compute rung: each deployment runs whenever its rung is obtainable."""
        return [n for n, c in zip(ctx.names, ctx.compute, strict=True) if c]

    def cannot_run(self, ctx: PolicyContext) -> str | None:
        """A training gang: LiteLLM routes inference requests and runs no training."""
        train = ctx.training_rungs()
        if not train:
            return None
        return (f"{', '.join(train)} train (a Ray Train shape); LiteLLM routes "
                "inference requests to endpoints and cannot run a training gang")

    def stepper(self, ctx: PolicyContext) -> Stepper:
        """The policy's run-time state over ``ctx``."""
        return _LiteLLMRun(self, ctx)


class _LiteLLMRun(Stepper):
    def __init__(self, policy: LiteLLM, ctx: PolicyContext) -> None:
        self.eng = Engine(ctx)
        # Every compute rung, not ctx.placeable(): LiteLLM routes between separate
        # deployments (each rung its own model group, chained by `fallbacks`), so falling
        # from a GPU deployment to a CPU one is a real fallback, not one pod's request
        # landing on a node that cannot satisfy it.
        self.compute = [i for i, c in enumerate(ctx.compute) if c]
        n = len(ctx.names)
        self.cool = policy.cooldown_s / ctx.tick_s
        self.start = policy.start_s / ctx.tick_s
        self.fail = policy.fail_s / ctx.tick_s
        self.cool_dead = policy.cooldown_dead
        self.up_at = [INF] * n  # when each deployment answers (INF: its rung is down)
        self.failed: list[float | None] = [None] * n  # first failure of a cooling one
        self.ok: tuple[bool, ...] = ()

    def _eligible_at(self, i: int) -> float:
        up, failed = self.up_at[i], self.failed[i]
        if not self.cool_dead or failed is None or up == INF:
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
        eng = self.eng
        top = eng.served if eng.pending < 0 else eng.pending
        first = INF  # when the first deployment better than `top` answers (unrolled min)
        for i in self.compute:  # ascending
            if 0 <= top <= i:
                break
            e = self._eligible_at(i) if self.cool_dead else self.up_at[i]
            if e < first:
                first = e
        ready = eng.ready
        return ready if ready <= first else first

    def event(self, t: float, ok: tuple[bool, ...]) -> None:
        if self.eng.ready <= t:
            self.eng.complete()  # the fall's failed tries are over: the fallback answers
        self._route(t)

    def _route(self, t: float) -> None:
        eng = self.eng
        pick, tried = -1, 0
        up_at, cool_dead = self.up_at, self.cool_dead
        for i in self.compute:
            if (self._eligible_at(i) if cool_dead else up_at[i]) <= t:
                pick = i
                break
            if not self.cool_dead:
                tried += 1  # never cooled down: every request tries it and fails
            elif self.failed[i] is None and (eng.served < 0 or i <= eng.served):
                self.failed[i] = t  # a request tries it first and fails: it cools down
                tried += 1
        if pick >= 0:
            self.failed[pick] = None
        if pick == eng.served or (pick >= 0 and pick == eng.pending):
            return
        eng.aim(t, pick)
        if pick < 0:
            eng.lose(t)
            eng.cancel(t)
        elif eng.served >= 0 and pick < eng.served:
            eng.switch(t, pick, 0.0)  # a climb: the old deployment answers until then
        else:
            eng.lose(t)  # the serving deployment is gone: requests fail on it first
            eng.switch(t, pick, tried * self.fail, climb=False)
