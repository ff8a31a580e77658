"""The live Selector's decisions, memoised by its state and the observation.

:class:`~ray_ladder.Selector` decides from its current rung, its per-rung streaks of
consecutive obtainable observations, and the observation; a streak matters only as
``0`` / ``1 .. h - 1`` / ``>= h`` (``h`` the promotion hysteresis). So its state, for the
decision, is the current rung plus every streak capped at ``h`` (:func:`state_key`, read
through the public ``current`` and ``streak``): the same state and observation always
give the same decision. :class:`SelectorTable` asks the live selector once per distinct
(state, observation) pair, on a copy held in that state, and replays the rest from the
table. The degraded-time alert depends on the clock, not on that state: the replay keeps
it itself (:func:`alert_tick`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from ray_ladder.core.constraints import Constraints
from ray_ladder.core.selector import Selector
from ray_ladder.core.spec import Ladder

NO_DIRECTION, UP, DOWN = 0, 1, 2
"""How a decision moved: the first observation (no direction), a climb, a fall."""

_DIRECTIONS = {None: NO_DIRECTION, "up": UP, "down": DOWN}


def state_key(selector: Selector, names: list[str]) -> tuple[int, tuple[int, ...]]:
    """The decision-relevant state of an observed ``selector``: the current rung's index in
    ``names`` (``-1``: none) and each rung's streak, capped at the hysteresis.

    Example:
        >>> lad = Ladder.from_dict({"name": "t", "rungs": [
        ...     {"name": "gpu", "num_gpus": 1}, {"name": "cpu", "num_cpus": 1}]})
        >>> sel = Selector(lad, promotion_hysteresis=2)
        >>> _ = sel.observe({"gpu": True, "cpu": True}, 0.0)
        >>> _ = sel.observe({"gpu": True, "cpu": True}, 1.0)
        >>> _ = sel.observe({"gpu": True, "cpu": True}, 2.0)
        >>> state_key(sel, sel.eligible)
        (0, (2, 2))
    """
    h = selector.hysteresis
    current = selector.current
    idx = names.index(current) if current is not None else -1
    return idx, tuple(min(selector.streak(n), h) for n in names)


class SelectorTable:
    """A :class:`~ray_ladder.Selector` replayed from a table of its own decisions.

    States are small ints (``0``: the fresh selector, before its first observation);
    observations are registered once (:meth:`row`) and named by their int too.
    :meth:`step` gives ``(next state, changed, rung index, direction)``; a pair not seen
    yet is decided by the live selector's :meth:`~ray_ladder.Selector.observe`, on a copy
    of a selector in that state.

    Example:
        >>> lad = Ladder.from_dict({"name": "t", "rungs": [
        ...     {"name": "gpu", "num_gpus": 1}, {"name": "cpu", "num_cpus": 1}]})
        >>> table = SelectorTable(lad, None, 1)
        >>> up, down = table.row({"gpu": True, "cpu": True}), table.row({"cpu": True})
        >>> table.step(0, up)
        (1, True, 0, 0)
        >>> table.step(1, down)
        (2, True, 1, 2)
    """

    def __init__(self, ladder: Ladder, constraints: Constraints | None,
                 hysteresis: int) -> None:
        selector = Selector(ladder, constraints, promotion_hysteresis=hysteresis)
        self.names = selector.eligible
        self.hysteresis = selector.hysteresis
        # Copies share the ladder and the constraints: only the selector's own state is
        # copied (a copy observes on its own, leaving the original as it was).
        self._memo = {id(ladder): ladder, id(constraints): constraints}
        self._selectors: list[Selector] = [selector]
        self._ids: dict[tuple[int, tuple[int, ...]], int] = {}
        self._rows: list[Mapping[str, bool]] = []
        #: What :meth:`step` has decided so far, by ``(state << 32) | row``: a hot loop
        #: reads it first and calls :meth:`step` only on a miss.
        self.known: dict[int, tuple[int, bool, int, int]] = {}

    def row(self, obtainable: Mapping[str, bool]) -> int:
        """Register an observation (kept as given: do not change it afterwards)."""
        self._rows.append(obtainable)
        return len(self._rows) - 1

    def step(self, state: int, row: int) -> tuple[int, bool, int, int]:
        """``(next state, changed, rung index or -1, direction)`` of observing ``row``."""
        key = (state << 32) | row  # one int: cheaper to hash than a pair
        out = self.known.get(key)
        if out is None:
            out = self.known[key] = self._decide(state, row)
        return out

    def _decide(self, state: int, row: int) -> tuple[int, bool, int, int]:
        selector = copy.deepcopy(self._selectors[state], dict(self._memo))
        d = selector.observe(self._rows[row], 0.0)  # the clock only drives alerts
        key = state_key(selector, self.names)
        nxt = self._ids.get(key)
        if nxt is None:
            nxt = self._ids[key] = len(self._selectors)
            self._selectors.append(selector)
        rung = self.names.index(d.rung) if d.rung is not None else -1
        return nxt, d.changed, rung, _DIRECTIONS[d.direction]


def alert_tick(start_s: float, max_degraded_s: float, tick_s: float, first: int) -> int:
    """The first tick ``k >= first`` whose time ``k * tick_s`` is more than
    ``max_degraded_s`` after ``start_s``: where the live selector raises its alert when
    it observes every tick of a degraded episode that started at ``start_s``.

    Example:
        >>> alert_tick(120.0, 600, 60.0, 3), alert_tick(0.0, 0, 60.0, 0)
        (13, 1)
    """
    k = max(first, int((start_s + max_degraded_s) / tick_s) - 1)
    while not k * tick_s - start_s > max_degraded_s:  # same float test as the selector
        k += 1
    return k
