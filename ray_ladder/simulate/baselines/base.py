"""What the baseline policies share: the replay context, the switching engine, the base class."""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, ClassVar

from ray_ladder import Constraints, Ladder
from ray_ladder.simulate.align import Timeline
from ray_ladder.simulate.replay import Replay

INF = math.inf


@dataclass(frozen=True)
class PolicyContext:
    """What a policy sees of one replay: the eligible rungs and, per segment, which are up.

    Rungs are indexed in ladder order (best first), as in :class:`Replay`. Times are in
    ticks; ``segments`` are the timeline's runs of identical availability.

    Attributes:
        ladder: The ladder.
        timeline: The aligned traces.
        names: Eligible rungs, best first.
        compute: Per rung: a compute rung (cache and shed rungs are not).
        traced: Per rung: it has a trace (a compute rung without one is always up).
        warm: Compute rungs with standby replicas (the ladder's ``standby_replicas``).
        segments: ``(first tick, end tick, obtainable per rung)``.
        constraints: The constraints the eligible rungs came from.

    Example:
        >>> ctx = PolicyContext.build(ladder, timeline, warm=["l4"])  # doctest: +SKIP
        >>> ctx.segments[0]  # doctest: +SKIP
        (0, 12, (True, False, True, True, True, True))
    """

    ladder: Ladder
    timeline: Timeline
    names: tuple[str, ...]
    compute: tuple[bool, ...]
    traced: tuple[bool, ...]
    warm: tuple[str, ...]
    segments: tuple[tuple[int, int, tuple[bool, ...]], ...]
    constraints: Constraints | None = None

    @classmethod
    def build(cls, ladder: Ladder, timeline: Timeline, *, warm: Collection[str] = (),
              constraints: Constraints | None = None) -> PolicyContext:
        """Lay the timeline's rows out per eligible rung (untraced rungs always up)."""
        names = tuple(r.name for r in ladder.eligible(constraints))
        compute = tuple(ladder.rung(n).is_compute for n in names)
        traced = tuple(n in timeline.names for n in names)
        cols = [timeline.names.index(n) if t else -1 for n, t in zip(names, traced, strict=True)]
        ends = timeline.starts[1:] + [timeline.ticks]
        rows: dict[tuple[bool, ...], tuple[bool, ...]] = {}
        segments = []
        for k0, k1, row in zip(timeline.starts, ends, timeline.rows, strict=True):
            ok = rows.get(row)
            if ok is None:
                ok = rows[row] = tuple(c < 0 or row[c] for c in cols)
            segments.append((k0, k1, ok))
        warm_t = tuple(n for n in names if n in set(warm))
        return cls(ladder, timeline, names, compute, traced, warm_t, tuple(segments),
                   constraints)

    @property
    def tick_s(self) -> float:
        """Seconds per tick."""
        return self.timeline.tick_s

    @property
    def ticks(self) -> int:
        """Ticks replayed."""
        return self.timeline.ticks

    @property
    def resident(self) -> tuple[bool, ...]:
        """Compute rungs with nodes up all the time: those without a trace (pools you own).

        Kubernetes' and Ray's schedulers place a pending replica on such a node at once,
        before any autoscaler launches one. (Standby replicas are the ladder's own
        feature: the baselines keep none.)
        """
        return tuple(c and not t for c, t in zip(self.compute, self.traced, strict=True))


class Engine:
    """What serves, what is starting, and the decisions: the bookkeeping of a baseline.

    A baseline tells the engine what it decides (:meth:`aim`), which rung it starts
    (:meth:`switch`) and when the serving rung is lost (:meth:`lose`); the engine keeps
    the change points and counters of a :class:`Replay`. Times are ticks (floats).

    Example:
        >>> eng = Engine(ctx)  # doctest: +SKIP
        >>> eng.start(0); eng.lose(3.0); eng.aim(3.0, 1); eng.switch(3.0, 1, 0.5)  # doctest: +SKIP
    """

    def __init__(self, ctx: PolicyContext) -> None:
        self.ctx = ctx
        self.n = len(ctx.names)
        self.served = -1
        self.target = -1
        self.pending = -1
        self.ready = INF
        self.pending_climb = False
        self.served_log: list[tuple[float, int]] = [(0.0, -1)]
        self.starting_log: list[tuple[float, int]] = []
        self.target_log: list[tuple[float, int]] = []
        self.falls = self.climbs = self.abandoned = 0

    def rank(self, idx: int) -> int:
        """Order of a rung index, "nothing" (-1) last."""
        return idx if idx >= 0 else self.n

    def start(self, idx: int) -> None:
        """At time 0: the policy runs on ``idx`` already (not a move)."""
        if idx >= 0:
            self.served = self.target = idx
            self.served_log = [(0.0, idx)]
            self.target_log.append((0.0, idx))

    def aim(self, t: float, idx: int) -> None:
        """Record a decision: the policy now heads for ``idx`` (a climb or a fall)."""
        if idx == self.target:
            return
        if t == 0 and not self.target_log:
            pass  # the first placement at time 0 is the start, not a move
        elif self.rank(idx) < self.rank(self.target):
            self.climbs += 1
        else:
            self.falls += 1
        self.target = idx
        self.target_log.append((t, idx))

    def switch(self, t: float, idx: int, delay: float, *, climb: bool | None = None) -> None:
        """Have ``idx`` serve ``delay`` ticks after ``t``; the serving rung serves meanwhile.

        Args:
            t: Now.
            idx: The rung to start.
            delay: Ticks until it serves (0: at once).
            climb: Whether dropping this start counts as an abandoned climb (default:
                ``idx`` is better than what serves now).
        """
        self.cancel(t)
        if idx == self.served:
            return
        if delay <= 0:
            self._serve(t, idx)
            return
        self.pending, self.ready = idx, t + delay
        self.pending_climb = self.rank(idx) < self.rank(self.served) if climb is None else climb
        self.starting_log.append((t, idx))

    def cancel(self, t: float) -> None:
        """Drop the start in progress, if any."""
        if self.pending >= 0:
            self.abandoned += self.pending_climb
            self.pending, self.ready = -1, INF
            self.starting_log.append((t, -1))

    def abandon(self, t: float) -> None:
        """Drop the start in progress and head back to the rung that still serves."""
        self.cancel(t)
        if self.served >= 0:
            self.aim(t, self.served)

    def lose(self, t: float) -> None:
        """The serving rung is gone: nothing serves until a start completes."""
        if self.served >= 0:
            self._serve(t, -1)

    def complete(self) -> None:
        """The starting rung is up: it serves from ``ready`` on."""
        t, idx = self.ready, self.pending
        self.pending, self.ready = -1, INF
        self.starting_log.append((t, -1))
        self._serve(t, idx)

    def _serve(self, t: float, idx: int) -> None:
        self.served = idx
        self.served_log.append((t, idx))

    def finish(self, policy: str, params: dict[str, Any], warm: Collection[str]) -> Replay:
        """The :class:`Replay` of what happened."""
        ctx = self.ctx
        served = self.served_log
        if len(served) > 1 and served[1][0] == 0:
            del served[0]  # the first placement replaced the "nothing yet" placeholder
        rep = Replay(list(ctx.names), ctx.ticks, ctx.tick_s, None, 0.0, 0.0,
                     [n for n in ctx.names if n in set(warm)], served, self.starting_log,
                     self.target_log, self.falls, self.climbs, self.abandoned, 0,
                     policy=policy, params=params)
        return rep


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

    @abstractmethod
    def run(self, ctx: PolicyContext) -> Replay:
        """Replay the policy over ``ctx``'s timeline."""

    def warm_rungs(self, ctx: PolicyContext) -> list[str]:
        """Compute rungs this policy keeps running while unused (billed as standby): none."""
        return []

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


def drive(ctx: PolicyContext, state: Stepper) -> None:
    """Feed a policy the segments in order and fire its timers between them.

    Availability changes only at segment starts; inside a segment the policy's own
    timers (starts completing, timeouts, cool-downs) fire in time order.
    """
    first = True
    for k0, k1, ok in ctx.segments:
        if first:
            state.begin(ok)
            first = False
        else:
            state.change(float(k0), ok)
        last, repeats = -INF, 0
        while True:
            t = state.next_event()
            if t >= k1:
                break
            repeats = repeats + 1 if t <= last else 0
            if repeats > 10_000:  # a policy bug, not a long replay: fail loudly
                raise RuntimeError(f"{type(state).__name__} keeps firing at tick {t}")
            last = t
            state.event(max(t, float(k0)), ok)


class Stepper(ABC):
    """A policy's run-time state, driven by :func:`drive`."""

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
