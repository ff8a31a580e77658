"""The switching engine of the baselines: what serves, what starts, the decisions."""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from ray_ladder.simulate.baselines.context import PolicyContext
from ray_ladder.simulate.replay import Replay

INF = math.inf


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
        self.lost_log: list[float] = []
        self._last: tuple[float, int] = (0.0, -1)  # the last entry logged (see _entry)

    def _entry(self, t: float, idx: int) -> tuple[float, int]:
        """``(t, idx)``: the last entry logged when it is that one (the same ``t`` object).

        A switch logs one pair in two logs (the decision and the start, a loss and the
        dropped start): sharing the tuple keeps a year of churn's logs smaller.
        """
        last = self._last
        if last[0] is not t or last[1] != idx:
            last = self._last = (t, idx)
        return last

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
        target = self.target
        if idx == target:
            return
        if t == 0 and not self.target_log:
            pass  # the first placement at time 0 is the start, not a move
        elif (idx if idx >= 0 else self.n) < (target if target >= 0 else self.n):  # rank()
            self.climbs += 1
        else:
            self.falls += 1
        self.target = idx
        # _entry(t, idx), inline: a year of churn makes ~1e6 of these calls
        last = self._last
        if last[0] is not t or last[1] != idx:
            last = self._last = (t, idx)
        self.target_log.append(last)

    def switch(self, t: float, idx: int, delay: float, *, climb: bool | None = None) -> None:
        """Have ``idx`` serve ``delay`` ticks after ``t``; the serving rung serves meanwhile.

        Args:
            t: Now.
            idx: The rung to start.
            delay: Ticks until it serves (0: at once).
            climb: Whether dropping this start counts as an abandoned climb (default:
                ``idx`` is better than what serves now).
        """
        if self.pending >= 0:
            self.cancel(t)
        served = self.served
        if idx == served:
            return
        if delay <= 0:
            self.served = idx
            self.served_log.append(self._entry(t, idx))
            return
        self.pending, self.ready = idx, t + delay
        if climb is None:
            n = self.n
            climb = (idx if idx >= 0 else n) < (served if served >= 0 else n)
        self.pending_climb = climb
        self.starting_log.append(self._entry(t, idx))

    def cancel(self, t: float) -> None:
        """Drop the start in progress, if any."""
        if self.pending >= 0:
            self.abandoned += self.pending_climb
            self.pending, self.ready = -1, INF
            self.starting_log.append(self._entry(t, -1))

    def abandon(self, t: float) -> None:
        """Drop the start in progress and head back to the rung that still serves."""
        self.cancel(t)
        if self.served >= 0:
            self.aim(t, self.served)

    def lose(self, t: float) -> None:
        """The serving rung is gone: nothing serves until a start completes."""
        if self.served >= 0:
            self.lost_log.append(t)  # flaps count the fall from here
            self.served = -1
            self.served_log.append(self._entry(t, -1))

    def complete(self) -> None:
        """The starting rung is up: it serves from ``ready`` on."""
        t, idx = self.ready, self.pending
        self.pending, self.ready = -1, INF
        last = self._last  # _entry(t, -1) then _entry(t, idx), inline
        if last[0] is not t or last[1] != -1:
            last = (t, -1)
        self.starting_log.append(last)
        self.served = idx
        self.served_log.append((t, idx))
        self._last = self.served_log[-1]

    def _serve(self, t: float, idx: int) -> None:
        self.served = idx
        self.served_log.append(self._entry(t, idx))

    def finish(self, policy: str, params: dict[str, Any], warm: Collection[str]) -> Replay:
        """The :class:`Replay` of what happened."""
        ctx = self.ctx
        served = self.served_log
        if len(served) > 1 and served[1][0] == 0:
            del served[0]  # the first placement replaced the "nothing yet" placeholder
        rep = Replay(list(ctx.names), ctx.ticks, ctx.tick_s, None, 0.0, 0.0,
                     [n for n in ctx.names if n in set(warm)], served, self.starting_log,
                     self.target_log, self.falls, self.climbs, self.abandoned, 0,
                     policy=policy, params=params, lost=self.lost_log)
        return rep
