"""Measuring a budget's effect on a live cluster: when the arbiter's round marked a
team's budget spent, and how long until its work answered from a cheap rung
(``budget_exhausted_to_demoted_s``; used by the budget test and ``bench/teams.py``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from ray_ladder.cluster import grants, ray_private


def read_entry(team: str) -> dict[str, Any] | None:
    """``team``'s grants entry as the arbiter last published it (``None``: none yet)."""
    raw = ray_private.kv_get(grants.GRANTS_PREFIX + team, namespace=grants.KV_NAMESPACE)
    return json.loads(raw) if raw else None


def spent_at(team: str, timeout_s: float = 120.0, poll_s: float = 0.02,
             read: Callable[[str], dict[str, Any] | None] = read_entry) -> float:
    """The wall-clock time of the arbiter round that first published ``team``'s budget
    as spent (the entry's ``time``), polling the entry every ``poll_s`` (well under
    the fleet's ``control_period_s``, so the first spent entry seen is that round's).
    Needs ``ray.init()``.

    Raises:
        TimeoutError: the budget was not spent within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        entry = read(team)
        if entry is not None and grants.budget_state(entry) != "ok":
            return float(entry["time"])
        time.sleep(poll_s)
    raise TimeoutError(f"team {team}'s budget was not spent within {timeout_s} s")


def exhausted_to_demoted_s(spent: float, answers: Iterable[tuple[float, str | None]],
                           cheap: Iterable[str]) -> float | None:
    """Seconds from ``spent`` (:func:`spent_at`) to the first answer from a ``cheap``
    rung; ``answers`` are ``(wall time the answer came, its X-Ladder-Rung)``. ``None``
    when no such answer came after ``spent``.

    Example:
        >>> exhausted_to_demoted_s(10.0, [(9.0, "cpu"), (10.2, "h100"), (10.7, "cpu")],
        ...                        {"cpu"})
        0.7
    """
    cheap = set(cheap)
    after = [t for t, rung in answers if t >= spent and rung in cheap]
    return round(min(after) - spent, 6) if after else None
