"""Whether a serving rung is *slow*, from its timed answers (pure: times and a clock in,
a state out): its service time alone, the queue left out, breaks the ladder's target for
``slow_after_s`` without a break (:class:`SlowState`). The retry delay starts at
``slow_after_s`` and doubles while the rung stays slow (at most 8x, :class:`Backoff`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ray_ladder.core.backoff import Backoff, FailureStreak


@dataclass(frozen=True, slots=True)
class SlowState:
    """Whether a rung is slow, from its timed answers.

    Attributes:
        breach_since: When the current run of answers over target began (``None``: the
            last answer met it).
        slow_since: When it was found slow (``None``: not slow).
        retry_at: When a slow rung is tried again.
        streak: Slow spells, each found within one retry delay of the last retry.
        reason: Why it is slow (a sentence for ``GET /-/ladder`` and events).
    """

    breach_since: float | None = None
    slow_since: float | None = None
    retry_at: float = -math.inf
    streak: FailureStreak = FailureStreak()
    reason: str | None = None

    def is_slow(self, now: float) -> bool:
        """Slow and not yet due for a retry."""
        return self.slow_since is not None and now < self.retry_at

    def on_trial(self, now: float) -> bool:
        """Found slow and past its retry delay: its next answers decide."""
        return self.slow_since is not None and now >= self.retry_at

    def answered(self, service_s: float, target_s: float, now: float, slow_after_s: float,
                 backoff: Backoff) -> SlowState:
        """One answer took ``service_s`` against ``target_s`` at ``now``.

        Example:
            >>> b = Backoff(base_s=10.0, cap_s=80.0)
            >>> s = SlowState().answered(2.0, 1.0, 0.0, 10.0, b)
            >>> s.answered(2.0, 1.0, 10.0, 10.0, b).is_slow(10.0)
            True
            >>> s.answered(0.5, 1.0, 5.0, 10.0, b).breach_since is None
            True
        """
        if service_s <= target_s:
            return SlowState(streak=self.streak)  # met: neither breaching nor slow
        since = self.breach_since if self.breach_since is not None else now
        if self.on_trial(now) or (self.slow_since is None and now - since >= slow_after_s):
            return self._found(since, service_s, target_s, now, backoff)
        return replace(self, breach_since=since)

    def reviewed(self, estimate_s: float | None, target_s: float, now: float,
                 slow_after_s: float, backoff: Backoff) -> SlowState:
        """No answer came, but the rung's estimate still breaks ``target_s`` at ``now``
        (requests spill past it, so none comes): slow once that lasted ``slow_after_s``.

        Example:
            >>> b = Backoff(base_s=10.0, cap_s=80.0)
            >>> s = SlowState().answered(2.0, 1.0, 0.0, 10.0, b)
            >>> s.reviewed(2.0, 1.0, 9.0, 10.0, b).is_slow(9.0)
            False
            >>> s.reviewed(2.0, 1.0, 10.0, 10.0, b).is_slow(10.0)
            True
        """
        since = self.breach_since
        if since is None or self.slow_since is not None or estimate_s is None \
                or estimate_s <= target_s or now - since < slow_after_s:
            return self
        return self._found(since, estimate_s, target_s, now, backoff)

    def _found(self, since: float, took_s: float, target_s: float, now: float,
               backoff: Backoff) -> SlowState:
        streak = self.streak.after_failure(now, backoff)
        reason = (f"its replicas took {took_s:.2f}s against the {target_s:g}s target "
                  f"(queue left out) for {now - since:.1f}s")
        return SlowState(since, now, now + streak.cooldown_s, streak, reason)
