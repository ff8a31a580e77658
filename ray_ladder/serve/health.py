"""One health record per rung in the router: marked down (until when, why), the failure
streak its cooldown grows with, and probation (it must answer once before it counts)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ray_ladder.core.backoff import Backoff, FailureStreak
from ray_ladder.core.placement import NO_NODE_REASON, RungWhy, rung_why

#: Longest a rung that keeps failing stays marked down (the cooldown doubles up to it).
MAX_COOLDOWN_S = 30.0


@dataclass(frozen=True, slots=True)
class RungHealth:
    """What the router's own requests found of one compute rung.

    Attributes:
        down_until: When the rung's failure cooldown ends (the router's clock).
        reason: Why it was last marked down (a sentence, for ``GET /-/ladder``).
        streak: Consecutive failures, each within one applied cooldown of the last.
        probation: It failed a request and no replica has answered since: past the
            cooldown it counts again only once a replica answers (a ping or a request).
        slow: It was marked down for being slow (it answers, past its latency target;
            ``serve/load.py``), not for failing: its retry delay is ``down_until``.

    Example:
        >>> backoff = Backoff(base_s=1.0, cap_s=30.0)
        >>> health = RungHealth().failed("node died", now=0.0, backoff=backoff)
        >>> health.is_down(0.5), health.is_down(1.0), health.probation
        (True, False, True)
        >>> health.failed("again", now=1.2, backoff=backoff).down_until
        3.2
    """

    down_until: float = float("-inf")
    reason: str | None = None
    streak: FailureStreak = FailureStreak()
    probation: bool = False
    slow: bool = False

    def is_down(self, now: float) -> bool:
        """Whether the failure cooldown still runs at ``now`` (the one such check)."""
        return self.down_until > now

    def down_for_s(self, now: float) -> float:
        """Seconds of cooldown left at ``now`` (0 when not down)."""
        return max(0.0, self.down_until - now)

    def failed(self, reason: str, now: float, backoff: Backoff,
               retry_after_s: float | None = None) -> RungHealth:
        """A request saw the rung fail at ``now``: down for the streak's cooldown, or
        for the ``retry_after_s`` the rung asked for when longer (at most the backoff's
        cap: the operator's longest cooldown).

        Example:
            >>> b = Backoff(base_s=1.0, cap_s=30.0)
            >>> RungHealth().failed("503", 0.0, b, retry_after_s=5.0).down_until
            5.0
            >>> RungHealth().failed("503", 0.0, b, retry_after_s=3600.0).down_until
            30.0
        """
        streak = self.streak.after_failure(now, backoff)
        cooldown = streak.cooldown_s
        if retry_after_s is not None:
            cooldown = max(cooldown, min(retry_after_s, backoff.cap_s))
            reason = f"{reason} (it asked to be left alone {retry_after_s:g}s: Retry-After)"
        return replace(self, down_until=now + cooldown, reason=reason,
                       streak=streak, probation=True, slow=False)

    def slowed(self, reason: str, until: float) -> RungHealth:
        """Found slow: down until ``until`` (its retry), no probation (it answers)."""
        return replace(self, down_until=until, reason=reason, slow=True)

    def answered(self, now: float) -> RungHealth:
        """A replica answered: probation ends (unless its cooldown still runs)."""
        return self if self.is_down(now) or not self.probation else \
            replace(self, probation=False)

    def on_probation(self) -> RungHealth:
        """A replica started under the router: it counts once a ping answered."""
        return replace(self, probation=True)

    def forgotten(self) -> RungHealth:
        """Its nodes are gone: a new replica proves itself by a ping, not the old failure."""
        return replace(self, probation=False)

    def counts(self, now: float) -> bool:
        """Whether the router may send it requests: not down and not on probation."""
        return not self.is_down(now) and not self.probation

    def why_not(self, now: float, *, placeable: bool, running: int, held: bool,
                going: str | None) -> RungWhy | None:
        """Why the router keeps the rung out, the first of its reasons that holds, as
        data and words (``None``: none does). ``placeable``: an alive node can host it;
        ``running``: its RUNNING replicas; ``held``: the hook released it; ``going``:
        the reason of a preemption notice, if any."""
        if self.is_down(now):
            return rung_why("slow", f"slow: {self.reason}") if self.slow else \
                rung_why("down", f"marked down: {self.reason}")
        if not placeable:
            return rung_why("no_node", NO_NODE_REASON)
        if running == 0:
            return rung_why("starting", "its standby replica is not running yet")
        if self.probation:
            return rung_why("probation",
                            "failed a request; waiting for a replica to answer a ping")
        if held:
            return rung_why("released", "released by the autoscaler hook (a better rung is up)")
        return None if going is None else rung_why("going_away", going)
