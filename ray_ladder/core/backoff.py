"""How long a failing thing waits before it is tried again: one capped exponential."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

__all__ = ["Backoff", "FailureStreak", "capped_exponential"]


def _check(base_s: float, multiplier: float, cap_s: float) -> None:
    """Raise ``ValueError`` naming the field when a backoff's parameters cannot work."""
    if not base_s > 0:  # written so that NaN fails too
        raise ValueError(f"base_s must be > 0, got {base_s}")
    if not cap_s >= base_s:
        raise ValueError(f"cap_s ({cap_s}) must be >= base_s ({base_s})")
    if not multiplier >= 1:
        raise ValueError(f"multiplier must be >= 1, got {multiplier}")


def _exponent_cap(base_s: float, multiplier: float, cap_s: float) -> int:
    """An exponent at which ``base_s * multiplier ** exponent`` is at least ``cap_s`` (or
    past the largest float, for an infinite cap): the power never needs a larger one."""
    if multiplier == 1 or base_s >= cap_s:
        return 0
    top = min(cap_s, sys.float_info.max)
    # Logs of each side, not of the ratio: the ratio of two extreme floats overflows.
    # One more than the ceiling so that rounding in the logs cannot stop short of the cap.
    return math.ceil((math.log(top) - math.log(base_s)) / math.log(multiplier)) + 1


def _delay(base_s: float, multiplier: float, cap_s: float, n: int) -> float:
    exponent = min(max(n - 1, 0), _exponent_cap(base_s, multiplier, cap_s))
    try:
        # float(): an int multiplier to a large int power would build a huge integer.
        delay = base_s * float(multiplier) ** exponent
    except OverflowError:  # past the largest float, so past any finite cap
        return cap_s
    return min(cap_s, delay)


def capped_exponential(base_s: float, multiplier: float, cap_s: float, n: int) -> float:
    """The wait after the ``n``-th consecutive failure: ``base_s * multiplier ** (n - 1)``,
    at most ``cap_s``.

    The exponent is capped before the power is taken (as tenacity's ``wait_exponential``
    guards its power), so any ``n``, however large, answers at once and never raises:
    the result lies between ``base_s`` and ``cap_s`` and never decreases as ``n`` grows.
    ``n <= 1`` (no failure yet, or the first) waits ``base_s``.

    Args:
        base_s: Wait after the first failure (> 0).
        multiplier: Growth per further failure (>= 1).
        cap_s: Longest wait (>= ``base_s``; may be ``math.inf``).
        n: Consecutive failures so far.

    Raises:
        ValueError: A parameter out of range (the message names it).

    Example:
        >>> [capped_exponential(1.0, 2.0, 30.0, n) for n in (1, 2, 3, 5, 6)]
        [1.0, 2.0, 4.0, 16.0, 30.0]
        >>> capped_exponential(1.0, 2.0, 30.0, 10**100)
        30.0
    """
    _check(base_s, multiplier, cap_s)
    return _delay(base_s, multiplier, cap_s, n)


@dataclass(frozen=True)
class Backoff:
    """A capped exponential backoff: ``base_s``, then x ``multiplier`` per failure, at
    most ``cap_s`` (validated once, here).

    Attributes:
        base_s: Wait after the first failure (> 0).
        cap_s: Longest wait (>= ``base_s``).
        multiplier: Growth per further failure (>= 1).

    Example:
        >>> backoff = Backoff(base_s=2.0, cap_s=30.0)
        >>> [backoff.delay(n) for n in (1, 2, 3, 4, 5, 6)]
        [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
        >>> backoff.saturated_at
        6
        >>> Backoff(base_s=2.0, cap_s=1.0)
        Traceback (most recent call last):
        ...
        ValueError: cap_s (1.0) must be >= base_s (2.0)
    """

    base_s: float
    cap_s: float
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        _check(self.base_s, self.multiplier, self.cap_s)

    def delay(self, n: int) -> float:
        """The wait after the ``n``-th consecutive failure (see :func:`capped_exponential`).

        Example:
            >>> Backoff(base_s=30.0, cap_s=600.0).delay(3)
            120.0
        """
        return _delay(self.base_s, self.multiplier, self.cap_s, n)

    @property
    def saturated_at(self) -> int:
        """A failure count from which every later count waits the same: a counter may stop
        there without changing any wait (:class:`FailureStreak` does).

        Example:
            >>> Backoff(base_s=1.0, cap_s=1.0).saturated_at
            1
        """
        return 1 + _exponent_cap(self.base_s, self.multiplier, self.cap_s)


@dataclass(frozen=True)
class FailureStreak:
    """One thing's consecutive failures and the cooldown the last one applied.

    A failure that comes within one applied cooldown of the end of the last cooldown
    (a backend that stays down fails again as soon as it is tried) continues the streak
    and waits longer; a later one starts again from the base. The comparison is against
    the cooldown actually applied, capped, so a thing that stayed healthy for the longest
    cooldown after its last one ended always starts again from the base. The count stops
    at :attr:`Backoff.saturated_at`: it never grows without bound.

    Attributes:
        count: Consecutive failures (0: none yet), at most ``backoff.saturated_at``.
        until: When the last applied cooldown ends (``-inf``: none yet).
        last_cooldown_s: The cooldown the last failure applied (0: none yet).

    Example:
        >>> backoff = Backoff(base_s=2.0, cap_s=30.0)
        >>> streak = FailureStreak().after_failure(100.0, backoff)
        >>> streak.count, streak.cooldown_s, streak.until
        (1, 2.0, 102.0)
        >>> streak = streak.after_failure(102.5, backoff)  # failed again when tried
        >>> streak.count, streak.cooldown_s
        (2, 4.0)
        >>> streak.after_failure(200.0, backoff).cooldown_s  # healthy meanwhile
        2.0
    """

    count: int = 0
    until: float = -math.inf
    last_cooldown_s: float = 0.0

    @property
    def cooldown_s(self) -> float:
        """The cooldown the last failure applied (0.0 before any failure)."""
        return self.last_cooldown_s

    def cooling(self, now: float) -> bool:
        """Whether the last applied cooldown still runs at ``now``.

        Example:
            >>> FailureStreak(1, until=10.0, last_cooldown_s=2.0).cooling(9.0)
            True
        """
        return now < self.until

    def after_failure(self, now: float, backoff: Backoff) -> FailureStreak:
        """The streak after a failure at ``now``; its :attr:`cooldown_s` is the wait to
        apply (``now + streak.cooldown_s`` is :attr:`until`).

        A failure during the cooldown (``now < until``) also continues the streak.

        Example:
            >>> backoff = Backoff(base_s=1.0, cap_s=4.0)
            >>> streak = FailureStreak()
            >>> for now in (0.0, 1.0, 3.0, 7.0, 11.0):  # fails again each time it is tried
            ...     streak = streak.after_failure(now, backoff)
            >>> streak.count, streak.cooldown_s
            (4, 4.0)
        """
        repeat = now - self.until < self.last_cooldown_s
        count = min(self.count + 1, backoff.saturated_at) if repeat else 1
        cooldown = backoff.delay(count)
        return FailureStreak(count, now + cooldown, cooldown)
