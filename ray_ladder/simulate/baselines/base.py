"""What the baseline policies share: the switching engine, the base classes, the driver."""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable
from typing import Any, ClassVar

from ray_ladder.simulate.baselines.context import PolicyContext, Segment
from ray_ladder.simulate.baselines.engine import INF, Engine
from ray_ladder.simulate.replay import Replay

__all__ = ["INF", "Baseline", "Engine", "PlacementRun", "SteppedBaseline", "Stepper", "best",
           "drive"]


class Baseline(ABC):
    """A named policy the simulator replays beside the ladder (frozen dataclasses).

    Subclasses set ``name``, take their parameters as dataclass fields (durations end
    in ``_s``) and implement :meth:`run`.

    Example:
        >>> from ray_ladder.simulate.baselines import Karpenter
        >>> Karpenter(consolidation=True).label
        'karpenter (consolidation=on)'
    """

    name: ClassVar[str]
    #: Fields that must be >= 0 (checked by :meth:`__post_init__`).
    non_negative: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        """Refuse a negative value of any field named in ``non_negative``."""
        for key in self.non_negative:
            if getattr(self, key) < 0:
                raise ValueError(f"{self.name}: {key} must be >= 0, got {getattr(self, key)}")

    @abstractmethod
    def run(self, ctx: PolicyContext) -> Replay:
        """Replay the policy over ``ctx``'s timeline."""

    def warm_rungs(self, ctx: PolicyContext) -> list[str]:
        """Compute rungs this policy keeps running while unused (billed as standby): none."""
        return []

    def beyond_the_oracle(self, ctx: PolicyContext) -> str | None:
        """Why this model can serve beyond the traces, and so beat the oracle over ``ctx``
        (``None``: it cannot; the report notes any row above the oracle all the same)."""
        return None

    def cannot_run(self, ctx: PolicyContext) -> str | None:
        """Why this system cannot run the workload of ``ctx`` at all (``None``: it can);
        the report then has no row for it and says why in a note."""
        return None

    def replay_key(self, ctx: PolicyContext) -> Hashable:
        """What this policy's replay over ``ctx`` depends on: two policies with equal keys
        replay alike, so a comparison runs one and reports it under both labels (default:
        the class and every parameter)."""
        return type(self), tuple(self.params().items())

    def params(self) -> dict[str, Any]:
        """The parameters, by field name."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @property
    def label(self) -> str:
        """The name, plus the parameters that differ from their defaults."""
        changed = []
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value != f.default:
                changed.append(f"{f.name.removesuffix('_s')}={_fmt(value)}")
        return f"{self.name} ({', '.join(changed)})" if changed else self.name


def _fmt(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def drive(ctx: PolicyContext, state: Stepper,
          segments_in: Iterable[Segment] | None = None) -> None:
    """Feed a policy the segments in order and fire its timers between them.

    Availability changes only at segment starts; inside a segment the policy's own
    timers (starts completing, timeouts, cool-downs) fire in time order.
    ``segments_in``: finer segments with the same rows (Karpenter's offerings, cut
    wherever a zone changes); default ``ctx.segments``.
    """
    segments = iter(ctx.segments if segments_in is None else segments_in)
    next_event, event = state.next_event, state.event  # bound once: one call per segment
    for k0, k1, ok in segments:  # the first segment
        state.begin(ok)
        _timers(next_event, event, state, k0, k1, ok)
        break
    change = state.change
    for k0, k1, ok in segments:
        change(float(k0), ok)
        if next_event() < k1:  # most segments fire no timer
            _timers(next_event, event, state, k0, k1, ok)


def _timers(next_event: Callable[[], float], event: Callable[[float, tuple[bool, ...]], None],
            state: Stepper, k0: int, k1: int, ok: tuple[bool, ...]) -> None:
    """Fire the timers due before ``k1`` in time order (inside segment ``k0 .. k1``)."""
    last, repeats = -INF, 0
    while True:
        t = next_event()
        if t >= k1:
            break
        repeats = repeats + 1 if t <= last else 0
        if repeats > 10_000:  # a policy bug, not a long replay: fail loudly
            raise RuntimeError(f"{type(state).__name__} keeps firing at tick {t}")
        last = t
        event(max(t, float(k0)), ok)


class Stepper(ABC):
    """A policy's run-time state, driven by :func:`drive`; ``eng`` keeps its record."""

    eng: Engine

    @abstractmethod
    def begin(self, ok: tuple[bool, ...]) -> None:
        """Time 0: what the policy runs on."""

    @abstractmethod
    def change(self, t: float, ok: tuple[bool, ...]) -> None:
        """Availability changed at ``t``."""

    @abstractmethod
    def next_event(self) -> float:
        """When the next timer fires (``INF``: none)."""

    @abstractmethod
    def event(self, t: float, ok: tuple[bool, ...]) -> None:
        """Fire the timer due at ``t``; it must move the next event past ``t``."""


def best(ok: tuple[bool, ...], mask: tuple[bool, ...], below: int | None = None) -> int:
    """The best rung index with ``ok`` and ``mask`` (above ``below`` if given), or -1."""
    stop = len(ok) if below is None or below < 0 else below
    for i in range(stop):
        if ok[i] and mask[i]:
            return i
    return -1


class SteppedBaseline(Baseline):
    """A baseline modelled as a :class:`Stepper` that :func:`drive` feeds the timeline.

    Example:
        >>> from ray_ladder.simulate.baselines import RayNative
        >>> isinstance(RayNative(), SteppedBaseline)
        True
    """

    @abstractmethod
    def stepper(self, ctx: PolicyContext) -> Stepper:
        """A fresh run-time state of this policy over ``ctx``."""

    def run(self, ctx: PolicyContext) -> Replay:
        """Replay the policy over ``ctx``'s timeline."""
        state = self.stepper(ctx)
        drive(ctx, state)
        return state.eng.finish(self.name, self.params(), self.warm_rungs(ctx))


class PlacementRun(Stepper):
    """What the provisioning baselines (Ray native, GKE, Karpenter) share.

    Only the rungs that can host the workload's request (:meth:`PolicyContext.placeable`)
    are ever placed on. A lost serving rung leaves the replica pending; a pending replica
    goes at once to a *resident* rung (a node that is up), else the policy launches
    (:meth:`_launch`, in its own order). A start whose capacity vanishes is dropped. Each
    policy has one timer (``timer``: GKE's next rule, Karpenter's retry, Ray's launch
    timeout) and the hooks.

    Example:
        >>> run = _RayNativeRun(RayNative(), ctx); drive(ctx, run)  # doctest: +SKIP
    """

    def __init__(self, ctx: PolicyContext, start_s: float) -> None:
        self.eng = Engine(ctx)
        # Only rungs that can host the pod's one request (PolicyContext.placeable): the
        # same rule for every placing peer, at time 0, after a loss and when climbing.
        self.compute = list(ctx.placeable())
        fits = set(self.compute)
        self.is_compute = tuple(i in fits for i in range(len(ctx.names)))
        self.resident = tuple(r and i in fits for i, r in enumerate(ctx.resident))
        self.start = start_s / ctx.tick_s  # ticks from a placement to serving
        self.timer = INF
        # id(row) -> (row, best resident rung): the segments share one tuple per distinct
        # row, so this is a dict hit per change instead of a scan (the row is kept, so
        # its id cannot be reused while cached).
        self._resident_of: dict[int, tuple[tuple[bool, ...], int]] = {}
        self._any_resident = any(self.resident)

    def _best_resident(self, ok: tuple[bool, ...]) -> int:
        """``best(ok, self.resident)``, cached per row."""
        if not self._any_resident:
            return -1  # the usual case: every rung the pod fits is traced
        hit = self._resident_of.get(id(ok))
        if hit is None or hit[0] is not ok:
            hit = self._resident_of[id(ok)] = (ok, best(ok, self.resident))
        return hit[1]

    @abstractmethod
    def _launch(self, t: float, ok: tuple[bool, ...]) -> None:
        """No node is up for the pending replica: ask for one, the policy's way."""

    @abstractmethod
    def _waiting(self, t: float, ok: tuple[bool, ...]) -> None:
        """Capacity changed while nothing serves and no resident rung takes the replica."""

    @abstractmethod
    def _timer_fired(self, t: float, ok: tuple[bool, ...]) -> None:
        """The policy's own timer fired (``timer`` is cleared already)."""

    def _ok(self, ok: tuple[bool, ...], i: int) -> bool:
        return ok[i]  # whether rung i can run now

    def _on_loss(self, t: float, ok: tuple[bool, ...]) -> None:
        pass  # the serving or the starting rung's capacity is gone

    def _started(self) -> None:
        pass  # a start completed: its rung serves

    def _after(self, t: float, ok: tuple[bool, ...]) -> None:
        pass  # after every change and timer: where a policy climbs

    def _stop_trying(self) -> None:
        self.timer = INF  # a placement was made: no launch timer runs

    def begin(self, ok: tuple[bool, ...]) -> None:
        self.eng.start(best(ok, self.is_compute))
        if self.eng.served < 0:
            self._place(0.0, ok)
        self._after(0.0, ok)

    def change(self, t: float, ok: tuple[bool, ...]) -> None:
        eng = self.eng
        if eng.served >= 0 and not self._ok(ok, eng.served):
            self._on_loss(t, ok)
            eng.lose(t)
            eng.cancel(t)
            self._place(t, ok)
        elif eng.pending >= 0 and not self._ok(ok, eng.pending):
            self._on_loss(t, ok)
            eng.abandon(t)
            if eng.served < 0:
                self._place(t, ok)
        elif eng.served < 0:
            r = self._best_resident(ok)
            if r >= 0 and r != eng.pending:
                self._run_on(t, r)  # a node that is up now takes the waiting replica
            else:
                self._waiting(t, ok)
        self._after(t, ok)

    def next_event(self) -> float:
        ready, timer = self.eng.ready, self.timer
        return ready if ready <= timer else timer  # min(), without the call

    def event(self, t: float, ok: tuple[bool, ...]) -> None:
        if self.eng.ready <= t:
            self.eng.complete()
            self._started()
        else:
            self.timer = INF
            self._timer_fired(t, ok)
        self._after(t, ok)

    def _place(self, t: float, ok: tuple[bool, ...]) -> None:
        r = self._best_resident(ok)
        if r >= 0:
            self._run_on(t, r)
        elif self.compute:
            self._launch(t, ok)

    def _run_on(self, t: float, i: int, delay: float | None = None) -> None:
        """Head for rung ``i``; it serves ``delay`` ticks later (default: ``start``)."""
        self._stop_trying()
        self.eng.aim(t, i)
        self.eng.switch(t, i, self.start if delay is None else delay)
