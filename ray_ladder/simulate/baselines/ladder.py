"""Ours: the live Selector, with this project's measured switching costs, as one compared policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ray_ladder.simulate.baselines.base import Baseline
from ray_ladder.simulate.baselines.context import PolicyContext
from ray_ladder.simulate.replay import Replay, replay

MEASURED_FALL_S = 0.33
"""Serve bench: SIGKILL of the top rung's node -> first answer from the rung below
(``failover_first_lower_answer_s``, 0.28-0.36 s at 50 req/s)."""

MEASURED_START_S = 10.0
"""Serve and autoscale benches: a replica starts in 9-13 s on the loaded 2-core machine;
a node of the fake provider boots and answers in 9.0-11.1 s."""

MEASURED_CLIMB_S = 0.3
"""Serve bench: the router moved up about 1.3 s after the better replica ran
(``router_climbed_s - replica_start_s``), of which 1 s was its hysteresis (2 x 0.5 s
probes, counted here in ticks): one probe, about 0.3 s, is the climb's own cost."""


@dataclass(frozen=True)
class LadderPolicy(Baseline):
    """The ladder itself, replayed through :class:`~ray_ladder.Selector` (not re-modelled).

    The decisions are the live selector's (:func:`~ray_ladder.simulate.replay.replay`);
    the switching costs default to what this project's benches measured:

    * a fall onto a warm rung (standby replicas, cache, shed) serves nothing for
      ``fall_s`` (the router noticing the loss and re-routing);
    * a fall onto a cold rung serves nothing for ``fall_s + start_s`` (its replica
      starts);
    * a climb serves the old rung until the new one's replica runs and the router moves,
      ``start_s + climb_s`` after the decision (the router waits for the better replica).

    Attributes:
        hysteresis: Promotion hysteresis in ticks (``None``: the ladder's policy).
        fall_s: Seconds to notice a lost rung and re-route.
        start_s: Seconds for a replica on a cold rung to start and answer.
        climb_s: Seconds from the better replica running to traffic on it.
        warm: Which compute rungs keep standby replicas: ``None`` (the ladder's
            ``standby_replicas``, or the simulation's ``warm=``), ``"all"``, ``"none"``,
            or names joined by ``+`` (``"h100+l4"``).

    Example:
        >>> from ray_ladder.simulate.baselines import LadderPolicy
        >>> LadderPolicy(hysteresis=2).label
        'ladder (hysteresis=2)'
    """

    name: ClassVar[str] = "ladder"
    non_negative: ClassVar[tuple[str, ...]] = ("fall_s", "start_s", "climb_s")
    hysteresis: int | None = None
    fall_s: float = MEASURED_FALL_S
    start_s: float = MEASURED_START_S
    climb_s: float = MEASURED_CLIMB_S
    warm: str | None = None

    def __post_init__(self) -> None:
        h = self.hysteresis
        if h is not None and (isinstance(h, bool) or not isinstance(h, int) or h < 1):
            raise ValueError(f"ladder: hysteresis must be an integer >= 1, got {h!r}")
        super().__post_init__()

    def warm_rungs(self, ctx: PolicyContext) -> list[str]:
        """The warm compute rungs (see ``warm``)."""
        compute = [n for n, c in zip(ctx.names, ctx.compute, strict=True) if c]
        if self.warm is None:
            return list(ctx.warm)
        if self.warm == "all":
            return compute
        if self.warm == "none":
            return []
        names = [n.strip() for n in self.warm.split("+") if n.strip()]
        unknown = [n for n in names if n not in compute]
        if unknown:
            raise ValueError(f"ladder: warm names {unknown}, not compute rungs; compute "
                             f"rungs: {compute}")
        return names

    def run(self, ctx: PolicyContext) -> Replay:
        """Replay the live selector over ``ctx``'s timeline."""
        rep = replay(ctx.ladder, ctx.timeline, hysteresis=self.hysteresis,
                     promotion_delay_s=self.start_s + self.climb_s,
                     demotion_delay_s=self.fall_s + self.start_s, fall_delay_s=self.fall_s,
                     warm=self.warm_rungs(ctx), constraints=ctx.constraints)
        rep.policy = self.name
        rep.params = self.params()
        return rep
