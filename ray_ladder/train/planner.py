"""GangPlanner (pure): which training shape to run on, decided by the one Selector."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from ray_ladder.core.constraints import Constraints
from ray_ladder.core.exceptions import Attempt, InvalidConstraintsError, LadderExhaustedError
from ray_ladder.core.placement import NodeState
from ray_ladder.core.selector import Selector
from ray_ladder.core.spec import Ladder
from ray_ladder.train.gang import GangCapacity, Held, ladder_gangs, train_ladder


@dataclass(frozen=True)
class Placement:
    """The planner's answer for a worker group that is not running.

    Attributes:
        rung: The best eligible rung whose whole gang fits now (``None``: none fits).
        capacity: Gang capacity of every eligible rung at that moment.
    """

    rung: str | None
    capacity: dict[str, GangCapacity]

    def free(self) -> list[str]:
        """Eligible rungs whose gang fits, best first."""
        return [name for name, c in self.capacity.items() if c.obtainable]


class GangPlanner:
    """Places a Train run's worker group on the best eligible rung shape and says when to
    climb; every decision is :class:`ray_ladder.Selector`'s (``best_obtainable`` for a
    placement, ``observe`` for the climb).

    * :meth:`place`: for a group that is not running (start, after a failure): the best
      eligible rung whose *whole gang* fits now, as a fresh first observation (hysteresis
      counts from this placement; a group that is not running loses nothing by taking
      the best).
    * :meth:`observe`: for a running group, once per probe: its own rung counts
      obtainable; returns a better rung once it has been obtainable for
      ``promotion_hysteresis`` observations (the caller moves at a checkpoint).

    Args:
        ladder: The ladder (rungs without a training shape are left out).
        constraints: Residency, cost and quality limits: hard, never widened.
        strategy: The placement-group strategy of the run (see :func:`gang_capacity`).

    Raises:
        ValueError: no rung has a training shape.
        InvalidConstraintsError: unknown jurisdiction/site, or no training rung allowed.

    Example:
        >>> planner = GangPlanner(ladder, Constraints(jurisdiction="eu"))  # doctest: +SKIP
        >>> planner.place(ray_node_states(), now=0.0).rung  # doctest: +SKIP
        'eu-a100x4'
    """

    def __init__(self, ladder: Ladder, constraints: Constraints | None = None, *,
                 strategy: str = "PACK") -> None:
        self.ladder = ladder
        self.train_ladder = train_ladder(ladder)
        if constraints is not None and not constraints.empty:
            ladder.check_constraints(constraints)
            if not self.train_ladder.eligible(constraints):
                raise InvalidConstraintsError(
                    f"no rung of ladder {ladder.name!r} with a training shape satisfies "
                    f"{constraints!r}")
        self.constraints = constraints
        self.strategy = strategy
        self.selector = Selector(self.train_ladder, constraints)

    @property
    def eligible(self) -> list[str]:
        """The rungs this run may use, best first."""
        return self.selector.eligible

    @property
    def top(self) -> str:
        """The best eligible rung."""
        return self.eligible[0]

    def index(self, rung: str) -> int:
        """Position of ``rung`` in the ladder (0 is the best)."""
        return self.train_ladder.index(rung)

    def capacity(self, nodes: Iterable[NodeState], *, held: Held | None = None,
                 exclude: Collection[str] = ()) -> dict[str, GangCapacity]:
        """Gang capacity of each eligible rung."""
        return ladder_gangs(self.train_ladder, self.eligible, nodes, held=held,
                            exclude=exclude, strategy=self.strategy)

    def place(self, nodes: Iterable[NodeState], now: float, *, held: Held | None = None,
              exclude: Collection[str] = (), deny: Collection[str] = ()) -> Placement:
        """The best eligible rung whose whole gang fits now (a fresh first observation);
        ``deny``: rungs it may not take now whatever fits (a team's rungs not granted)."""
        capacity = self.capacity(nodes, held=held, exclude=exclude)
        free = {name: c.obtainable and name not in deny for name, c in capacity.items()}
        rung = self.selector.best_obtainable(free)
        if rung is not None:
            self.selector.reset()
            self.selector.observe(free, now)
        return Placement(rung, capacity)

    def observe(self, nodes: Iterable[NodeState], now: float, *, placed: str,
                held: Held | None = None, deny: Collection[str] = ()) -> str | None:
        """One observation while ``placed``'s group runs: the rung to climb to, if any.

        The running group's own rung counts obtainable (a node loss is a failure, handled
        by :meth:`place` after Ray Train restarts the group); ``deny``: rungs it may not
        climb to whatever fits (a team's rungs not granted).
        """
        capacity = self.capacity(nodes, held=held)
        free = {name: c.obtainable and name not in deny for name, c in capacity.items()}
        free[placed] = True
        rung = self.selector.observe(free, now).rung
        if rung is not None and self.index(rung) < self.index(placed):
            return rung
        return None

    def exhausted(self, capacity: dict[str, GangCapacity], waited_s: float,
                  now: float) -> LadderExhaustedError:
        """The typed answer when no eligible gang fit for ``waited_s``: one attempt a rung."""
        attempts = [Attempt(name, f"{c.why()} (waited {waited_s:.0f}s)", now,
                            cause="unobtainable") for name, c in capacity.items()]
        return LadderExhaustedError(self.ladder.name, attempts,
                                    self.ladder.policy.retry_after_s)
