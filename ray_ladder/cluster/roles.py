"""The hook's per-rung roles as consumers read them: a small KV entry, checked for freshness."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

# ray_ladder/serve/scaling.py repeats these three (it is pickled into the Serve controller
# by value and imports only Ray); a test keeps them equal.
KV_NAMESPACE = "ray_ladder"
ROLES_PREFIX = "autoscale/roles/"
#: A roles entry older than max(STALE_STEPS hook steps, STALE_MIN_S) is from a hook that is
#: gone (killed without ``stop``); consumers then behave as if no hook ran.
STALE_STEPS = 10
STALE_MIN_S = 30.0
#: How long a consumer that found no roles entry waits before asking the KV again.
ABSENT_RECHECK_S = 5.0
RELEASED_REASON = "released by the autoscaler hook"
#: Where Serve routers publish the replicas their rungs want for a sustained spill, and
#: how long an entry counts (serve/scaling.py repeats both; the hook reads them).
SPILL_PREFIX = "serve/spill/"
SPILL_FRESH_S = 30.0


def summarize(state: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a hook state consumers follow (a few hundred bytes, not the full state).

    Example:
        >>> summarize({"ladder": "l", "version": 3, "time": 10.0, "interval_s": 0.5,
        ...            "serving": "a100", "rungs": {"a100": {"role": "serving",
        ...            "status": "up", "nodes": 1}}})["rungs"]
        {'a100': {'role': 'serving', 'status': 'up'}}
    """
    return {
        "ladder": state.get("ladder"),
        "version": state.get("version"),
        "time": state.get("time"),
        "interval_s": state.get("interval_s"),
        "stopped": bool(state.get("stopped", False)),
        "serving": state.get("serving"),
        "rungs": {name: {"role": r.get("role", "none"), "status": r.get("status", "idle")}
                  for name, r in (state.get("rungs") or {}).items()},
    }


def is_current(roles: Mapping[str, Any] | None, now: float) -> bool:
    """Whether ``roles`` come from a running hook: not stopped and not stale.

    ``now`` is wall-clock time (the hook stamps its entry with ``time.time()``).

    Example:
        >>> is_current({"time": 100.0, "interval_s": 1.0, "stopped": False}, now=120.0)
        True
        >>> is_current({"time": 100.0, "interval_s": 1.0, "stopped": False}, now=131.0)
        False
    """
    if not roles or roles.get("stopped"):
        return False
    stamp = roles.get("time")
    if stamp is None:
        return False
    limit = max(STALE_STEPS * float(roles.get("interval_s") or 0.0), STALE_MIN_S)
    return now - float(stamp) <= limit


def released_rungs(roles: Mapping[str, Any] | None, now: float) -> list[str]:
    """Rungs a running hook has released (in the entry's order; empty when none runs).

    Example:
        >>> released_rungs({"time": 0.0, "interval_s": 1.0, "rungs": {
        ...     "h100": {"role": "serving"}, "a100": {"role": "released"}}}, now=1.0)
        ['a100']
    """
    if roles is None or not is_current(roles, now):
        return []
    return [name for name, r in (roles.get("rungs") or {}).items()
            if r.get("role") == "released"]


def read_roles(ladder: str) -> dict[str, Any] | None:
    """The roles the hook of ``ladder`` last published in Ray's KV (None: none, or no Ray).

    One GCS round trip; returns None (rather than raising) where Ray is not initialized.
    """
    from ray_ladder.cluster import ray_private

    if not ray_private.kv_initialized():
        return None
    raw = ray_private.kv_get(ROLES_PREFIX + ladder, namespace=KV_NAMESPACE)
    return None if raw is None else json.loads(raw)


class HookRoles:
    """Reads hook roles per ladder: never more often than the hook publishes them.

    Most clusters run no hook: a capacity view that refreshes every probe would otherwise
    pay one GCS round trip (about 0.7 ms here) per refresh to learn that again, so an
    absent entry is asked for again only after ``recheck_s``. A present entry is re-read
    once its hook has stepped again (its ``interval_s``), at most once per :meth:`get`.

    Args:
        recheck_s: Wait after an absent answer before asking again.
        read: ``ladder -> roles or None`` (default: Ray's KV via :func:`read_roles`).
        clock: Monotonic clock (injectable for tests).

    Example:
        >>> roles = HookRoles(read=lambda name: None, clock=lambda: 0.0)
        >>> roles.get("llm") is None
        True
    """

    def __init__(self, recheck_s: float = ABSENT_RECHECK_S,
                 read: Callable[[str], dict[str, Any] | None] = read_roles,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.recheck_s = recheck_s
        self._read = read
        self._clock = clock
        self._last: dict[str, tuple[float, dict[str, Any] | None]] = {}

    def get(self, ladder: str) -> dict[str, Any] | None:
        """The roles entry of ``ladder``, or None (no hook, or the last read failed)."""
        now = self._clock()
        last = self._last.get(ladder)
        if last is not None:
            read_at, roles = last
            keep = self.recheck_s if roles is None else \
                min(float(roles.get("interval_s") or 0.0), self.recheck_s)
            if 0 <= now - read_at < keep:
                return roles
        try:
            roles = self._read(ladder)
        except Exception:  # a failed read is no hook: today's behaviour, never a crash
            roles = None
        self._last[ladder] = (now, roles)
        return roles
