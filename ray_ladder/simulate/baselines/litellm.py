"""LiteLLM's router: try the deployments in fallback order, each request paying the dead ones."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ray_ladder.simulate.baselines.base import INF, Engine, SteppedBaseline, Stepper, drive
from ray_ladder.simulate.baselines.context import PolicyContext
from ray_ladder.simulate.baselines.litellm_requests import (
    NUM_RETRIES,
    DeadTry,
    RequestMeter,
    dead_try,
)
from ray_ladder.simulate.replay import Replay

COOLDOWN_S = 5.0
"""``DEFAULT_COOLDOWN_TIME_SECONDS = 5`` (BerriAI/litellm, ``litellm/constants.py``): how long
a deployment that *is* put in cooldown is skipped (``Router(cooldown_time=...)``)."""

FAIL_S = 5.0
"""Seconds one try of a deployment whose node is gone takes before it fails: the connect
timeout of LiteLLM's HTTP clients, ``httpx.Timeout(timeout=600.0, connect=5.0)``
(``litellm/llms/custom_httpx/http_handler.py``; the OpenAI client's ``DEFAULT_TIMEOUT``
too). A per-call timeout given as one number (the Router's ``timeout``, default
``litellm.request_timeout`` = 6000 s) would let a connect wait until the kernel gives up
on it (about 127 s on Linux): far longer."""

REFUSED_S = 0.01
"""Seconds one try of a deployment whose port refuses (its node is up, the server still
starting) takes: about one round trip."""


@dataclass(frozen=True)
class LiteLLM(SteppedBaseline):
    """A LiteLLM router with one deployment per compute rung, in ``order`` (fallbacks).

    LiteLLM routes; it does not provision. The model assumes every deployment is kept
    running by something else whenever its rung is obtainable: it is *up* from
    ``start_s`` after its rung becomes obtainable (the endpoint restarting) until the
    rung is lost, and every compute rung is billed as standby while obtainable. Each
    rung is its own model group (a different model), chained by ``fallbacks``.

    * **The dead deployment is tried first**, by LiteLLM's real rules
      (:mod:`~ray_ladder.simulate.baselines.litellm_requests`): a request retries a
      dead deployment ``num_retries`` times (2), with backoff, before the fallback. A
      deployment whose node is gone (its rung lost) fails each try after ``fail_s``
      (a timeout); one whose rung is back but is still starting refuses in
      ``refused_s`` (an ``APIConnectionError``). LiteLLM never cools an
      ``APIConnectionError`` down, and cools a timed-out one-deployment group down
      only at 1,000 failed calls a minute (``request_rate`` x 3 tries x 60) or with
      ``allowed_fails`` set; so at the defaults every request pays 3 x 5 s plus 4.6 s
      of backoff per gone deployment above the one that answers, for as long as it
      is gone, and 4.6 s per starting one. ``PolicyReport.requests`` has the figures:
      requests an hour that try a dead deployment first, the seconds each loses.
    * **Fall**: when the serving deployment is lost, nothing is answered until the first
      request has been through its tries of the dead deployments above one that is up
      (in-flight answers break; the next requests fail on it, then fall back).
    * **Climb**: passive and undamped. With no cooldown, the next request after a better
      deployment answers again goes to it: traffic is back at once. With
      ``allowed_fails`` set or ``cooldown_dead`` (a what-if) a failed deployment is
      skipped for ``cooldown_s`` and tried again at each cooldown boundary: it comes
      back at the first boundary (counted from its failure) at which it is up.

    Cache and shed rungs are not deployments: this policy never serves them, and a
    ladder that trains (a rung with a ``train:`` shape) gets no row: LiteLLM routes
    requests, it runs no training gang.

    Attributes:
        cooldown_s: Seconds a deployment in cooldown is skipped (LiteLLM's default: 5).
        start_s: Seconds from a rung becoming obtainable to its deployment answering.
        fail_s: Seconds one try of a gone deployment takes (the connect timeout, 5).
        cooldown_dead: Cool a dead deployment down whatever LiteLLM's rules say (a
            what-if: they never cool a refused connection).
        num_retries: Retries of a deployment before the fallback (``Router``'s default:
            2).
        allowed_fails: ``Router(allowed_fails=...)`` (``None``: not set, LiteLLM's
            default rules).
        refused_s: Seconds one try of a deployment that refuses (still starting) takes.
        request_rate: Requests per second, for the request figures and the 1,000 failed
            calls a minute rule.

    Example:
        >>> from ray_ladder.simulate.baselines import LiteLLM
        >>> LiteLLM().cooldown_s, LiteLLM().fail_s, LiteLLM().num_retries
        (5.0, 5.0, 2)
    """

    name: ClassVar[str] = "litellm"
    non_negative: ClassVar[tuple[str, ...]] = ("cooldown_s", "start_s", "fail_s", "num_retries",
                                               "refused_s", "request_rate")
    cooldown_s: float = COOLDOWN_S
    start_s: float = 10.0
    fail_s: float = FAIL_S
    cooldown_dead: bool = False
    num_retries: int = NUM_RETRIES
    allowed_fails: int | None = None
    refused_s: float = REFUSED_S
    request_rate: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.allowed_fails is not None and self.allowed_fails < 0:
            raise ValueError(f"litellm: allowed_fails must be >= 0, got {self.allowed_fails}")

    def dead_tries(self) -> tuple[DeadTry, DeadTry]:
        """What a gone and a starting (refusing) deployment cost a request, by LiteLLM's
        rules (:func:`~ray_ladder.simulate.baselines.litellm_requests.dead_try`)."""
        kw = {"rate": self.request_rate, "num_retries": self.num_retries,
              "cooldown_s": self.cooldown_s, "allowed_fails": self.allowed_fails,
              "forced": self.cooldown_dead}
        return (dead_try(gone=True, try_s=self.fail_s, **kw),  # type: ignore[arg-type]
                dead_try(gone=False, try_s=self.refused_s, **kw))  # type: ignore[arg-type]

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

    def run(self, ctx: PolicyContext) -> Replay:
        """Replay the policy over ``ctx``'s timeline, with its request figures."""
        state = _LiteLLMRun(self, ctx)
        drive(ctx, state)
        rep = state.eng.finish(self.name, self.params(), self.warm_rungs(ctx))
        rep.requests = state.meter.figures(ctx.ticks, ctx.tick_s)
        return rep


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
        gone, starting = policy.dead_tries()
        self.first_gone = gone.first_s / ctx.tick_s  # the first request's tries, in ticks
        self.first_starting = starting.first_s / ctx.tick_s
        self.meter = RequestMeter(gone, starting, policy.request_rate)
        self.cool_dead = policy.cooldown_dead or policy.allowed_fails is not None
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
        pick, delay, gone, starting = -1, 0.0, 0, 0
        up_at, cool_dead, ok = self.up_at, self.cool_dead, self.ok
        for i in self.compute:
            if (self._eligible_at(i) if cool_dead else up_at[i]) <= t:
                pick = i
                break
            if up_at[i] > t:  # dead (not merely cooling): the requests try it first
                gone, starting = gone + (not ok[i]), starting + ok[i]
            first = self.first_starting if ok[i] else self.first_gone
            if not self.cool_dead:
                delay += first  # never cooled down: every request tries it and fails
            elif self.failed[i] is None and (eng.served < 0 or i <= eng.served):
                self.failed[i] = t  # a request tries it first and fails: it cools down
                delay += first
        self.meter.mark(t, gone, starting)
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
            eng.switch(t, pick, delay, climb=False)
