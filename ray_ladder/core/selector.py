"""The one selector: observations in, decisions out, clock passed in."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from ray_ladder.core.constraints import Constraints
from ray_ladder.core.events import Direction, TransitionCause, TransitionEvent
from ray_ladder.core.spec import Ladder


@dataclass(frozen=True, slots=True)
class Decision:
    """What the selector decided at one observation.

    Attributes:
        rung: Selected rung name, or ``None`` when every eligible rung is unobtainable.
        previous: Rung before this observation.
        changed: ``rung != previous``.
        direction: ``"down"``, ``"up"`` or ``None`` (no change).
        reason: A human sentence.
        degraded_s: Seconds spent below the best eligible rung in the current degraded
            episode (0 when on the best).
        alert: True exactly once per degraded episode, at the first observation where
            ``degraded_s`` exceeds ``policy.max_degraded_seconds``.
        time: The observation's clock value.
        cause: Why it moved, as data (:data:`~ray_ladder.core.events.TransitionCause`;
            ``"other"`` when nothing changed).
    """

    rung: str | None
    previous: str | None
    changed: bool
    direction: Direction | None
    reason: str
    degraded_s: float
    alert: bool
    time: float
    cause: TransitionCause = "other"

    def event(self, ladder: str) -> TransitionEvent | None:
        """The transition event of this decision, or ``None`` when nothing changed."""
        if not self.changed:
            return None
        return TransitionEvent(self.time, ladder, self.previous, self.rung, self.direction,
                               self.reason, cause=self.cause)


class Selector:
    """Picks the best obtainable eligible rung; falls at once, climbs after hysteresis.

    Pure Python and deterministic: it never reads a clock or touches Ray. Every caller
    (Serve router, ``@ladder_task``, Tune, autoscaler hook, simulator) uses this class.

    Rules, per :meth:`observe`:

    * A rung missing from ``obtainable`` counts as unobtainable; ``cache`` and ``shed``
      rungs are always obtainable. Rungs the constraints exclude are never selected.
    * First observation, or no rung selected: take the best obtainable eligible rung.
    * Current rung unobtainable: move at once to the best obtainable eligible rung.
    * Otherwise climb to the best eligible rung above the current one that has been
      obtainable for ``promotion_hysteresis`` consecutive observations.

    Args:
        ladder: The ladder.
        constraints: Restrict the rungs (residency, cost, quality).
        on_event: Called with each :class:`TransitionEvent` (changes and alerts).
        promotion_hysteresis: Override the ladder policy's value (the simulator sweeps it).

    Example:
        >>> sel = Selector(ladder)  # doctest: +SKIP
        >>> sel.observe({"h100": False, "a100": True}, now=0.0).rung  # doctest: +SKIP
        'a100'
    """

    __slots__ = (
        "ladder", "constraints", "_names", "_always", "_hysteresis", "_max_degraded",
        "_streak", "_current", "_current_idx", "_episode_start", "_alerted", "_on_event",
        "_ladder_name", "_started", "_positions",
    )

    def __init__(
        self,
        ladder: Ladder,
        constraints: Constraints | None = None,
        *,
        on_event: Callable[[TransitionEvent], None] | None = None,
        promotion_hysteresis: int | None = None,
    ) -> None:
        self.ladder = ladder
        self.constraints = constraints
        eligible = ladder.eligible(constraints)
        self._names: list[str] = [r.name for r in eligible]
        self._always: list[bool] = [r.kind != "compute" for r in eligible]
        self._positions: list[int] = [ladder.index(r.name) for r in eligible]
        hysteresis = (ladder.policy.promotion_hysteresis if promotion_hysteresis is None
                      else promotion_hysteresis)
        if hysteresis < 1:
            raise ValueError(f"promotion_hysteresis must be >= 1, got {hysteresis}")
        self._hysteresis = hysteresis
        self._max_degraded = ladder.policy.max_degraded_seconds
        self._streak = [0] * len(self._names)
        self._current: str | None = None
        self._current_idx = -1  # -1: nothing selected
        self._episode_start: float | None = None
        self._alerted: bool = False
        self._on_event = on_event
        self._ladder_name = ladder.name
        self._started = False

    @property
    def eligible(self) -> list[str]:
        """Names of the eligible rungs, best first."""
        return list(self._names)

    @property
    def current(self) -> str | None:
        """The rung selected by the last observation."""
        return self._current

    @property
    def hysteresis(self) -> int:
        """The promotion hysteresis in force."""
        return self._hysteresis

    @property
    def alerted(self) -> bool:
        """Whether the current degraded episode raised its ``max_degraded_seconds`` alert."""
        return self._alerted

    def degraded_s(self, now: float) -> float:
        """Seconds below the best eligible rung at ``now`` (0 when on it), as the last
        decision counted them; for status views that keep no decision."""
        start = self._episode_start
        return 0.0 if start is None else max(0.0, now - start)

    def streak(self, rung: str) -> int:
        """Consecutive observations ``rung`` has been seen obtainable."""
        return self._streak[self._names.index(rung)]

    def best_obtainable(
        self,
        obtainable: Mapping[str, bool],
        *,
        at_or_below: str | None = None,
        compute_only: bool = False,
        exclude: Collection[str] = (),
    ) -> str | None:
        """The best obtainable eligible rung for ``obtainable``, without moving the ladder.

        The query behind every "where else can this one piece of work go" (a call that
        fell from a rung, a request's hedge, a trial's first placement); the ladder itself
        moves only by :meth:`observe`. Same reading of ``obtainable`` as ``observe``
        (``cache``/``shed`` always obtainable unless ``compute_only``).

        Args:
            obtainable: Rung name -> obtainable now.
            at_or_below: Consider only this rung and the rungs below it.
            compute_only: Leave out ``cache`` and ``shed`` rungs.
            exclude: Rungs not to return.

        Example:
            >>> sel.best_obtainable({"h100": True, "a100": True}, at_or_below="a100")
            ... # doctest: +SKIP
            'a100'
        """
        start = self.ladder.index(at_or_below) if at_or_below is not None else 0
        positions = self._positions
        for i, name in enumerate(self._names):
            if positions[i] < start or name in exclude:
                continue
            if self._always[i]:
                if compute_only:
                    continue
                return name
            if obtainable.get(name, False):
                return name
        return None

    def reset(self) -> None:
        """Forget the current rung and every streak: the next observation is a first one
        (hysteresis counts afresh, as for a new placement). Degraded time keeps counting."""
        self._streak = [0] * len(self._names)
        self._current = None
        self._current_idx = -1
        self._started = False

    def observe(self, obtainable: Mapping[str, bool], now: float,
                why: Mapping[str, str] | None = None, *,
                going: Collection[str] = (), slow: Collection[str] = ()) -> Decision:
        """Feed one observation of which rungs are obtainable; get the decision.

        Args:
            obtainable: Rung name -> obtainable now. Missing compute rungs count as not.
            now: The caller's clock (seconds); the selector never reads one.
            why: Rung name -> why it is unobtainable (``CapacitySnapshot.held``): only
                words for the event of a fall (``"h100 unobtainable: fell on preemption
                notice ..."``), never an input to the decision.
            going: Rungs going away (their nodes drain: a preemption notice,
                ``CapacitySnapshot.going_away``): a fall off one has cause
                ``preemption_notice`` (else ``lost``); never an input to the decision.
            slow: Rungs found slow (they answer, past their latency target): a fall off
                one has cause ``slow``; never an input to the decision.
        """
        names = self._names
        always = self._always
        streak = self._streak
        best_ok = -1
        get = obtainable.get
        for i, name in enumerate(names):
            if always[i] or get(name, False):
                streak[i] += 1
                if best_ok < 0:
                    best_ok = i
            else:
                streak[i] = 0

        prev_idx = self._current_idx
        previous = self._current
        cause: TransitionCause
        if prev_idx < 0 or streak[prev_idx] == 0:
            new_idx = best_ok  # first pick, exhausted, or current lost: no hysteresis
            if prev_idx < 0:
                reason = "capacity returned" if self._started else "first observation"
                cause = "returned" if self._started else "first"
            else:
                reason = f"{previous} unobtainable"
                if why and previous is not None and previous in why:
                    reason += f": {why[previous]}"
                cause = "preemption_notice" if previous in going else \
                    "slow" if previous in slow else "lost"
        else:
            new_idx = prev_idx
            reason = ""
            cause = "promoted"
            h = self._hysteresis
            for i in range(prev_idx):
                if streak[i] >= h:
                    new_idx = i
                    reason = f"{names[i]} obtainable for {streak[i]} observation(s)"
                    break

        rung = names[new_idx] if new_idx >= 0 else None
        changed = new_idx != prev_idx
        direction: Direction | None = None
        if changed:
            if new_idx < 0:
                direction = "down"
                reason += "; every eligible rung unobtainable"
                cause = "exhausted"
            elif prev_idx < 0:
                direction = "up" if self._started else None
            else:
                direction = "down" if new_idx > prev_idx else "up"
            reason = reason or "unchanged"
        else:
            reason = "unchanged"
            cause = "other"
        self._current_idx = new_idx
        self._current = rung
        self._started = True

        # Degraded-episode bookkeeping.
        alert = False
        if new_idx == 0:
            self._episode_start = None
            self._alerted = False
            degraded = 0.0
        else:
            if self._episode_start is None:
                self._episode_start = now
            degraded = now - self._episode_start
            if (not self._alerted and self._max_degraded is not None
                    and degraded > self._max_degraded):
                alert = True
                self._alerted = True

        decision = Decision(rung, previous, changed, direction, reason, degraded, alert, now,
                            cause)
        if self._on_event is not None:
            if changed:
                self._on_event(TransitionEvent(now, self._ladder_name, previous, rung,
                                               direction, reason, cause=cause))
            if alert:
                self._on_event(TransitionEvent(
                    now, self._ladder_name, rung, rung, None,
                    f"degraded for {degraded:.1f}s (> max_degraded_seconds "
                    f"{self._max_degraded})", kind="alert"))
        return decision
