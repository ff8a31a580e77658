"""Transition events: one JSON line per rung change."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Literal

Direction = Literal["down", "up"]
#: The one event vocabulary of every part (router, orchestrators, Tune, autoscaler hook):
#: ``transition`` a ladder moved, ``alert`` ``max_degraded_seconds`` passed, ``call`` one
#: call fell or climbed on its own; the hook's steps: ``requested`` (asked the autoscaler
#: for a rung's node), ``released`` (stopped asking), ``stockout`` (a launch was refused),
#: ``probe`` (asking again after a backoff), ``node-joined``, ``node-lost``; the fleet
#: arbiter's: ``reclaim`` (a notice to a borrower, or its units moving at the deadline),
#: ``budget`` (a team's budget window is spent).
EventKind = Literal["transition", "alert", "call", "requested", "released", "stockout",
                    "probe", "node-joined", "node-lost", "reclaim", "budget"]
#: Why a ladder moved, as data (the ``reason`` sentence is for humans; metrics read this):
#: ``first`` the first pick, ``lost`` the rung became unobtainable or failed,
#: ``preemption_notice`` its nodes drain, ``exhausted`` nothing eligible is left,
#: ``returned`` a rung came back after exhaustion, ``promoted`` a climb after hysteresis,
#: ``other`` anything else (the hook's own steps).
TransitionCause = Literal["first", "lost", "preemption_notice", "slow", "exhausted",
                          "returned", "promoted", "other"]
TRANSITION_CAUSES: tuple[str, ...] = ("first", "lost", "preemption_notice", "slow",
                                      "exhausted", "returned", "promoted", "other")


@dataclass(frozen=True, slots=True)
class TransitionEvent:
    """A ladder moved from one rung to another.

    Attributes:
        time: When (the clock the selector was given).
        ladder: Ladder name.
        from_rung: Rung before (``None`` on the first pick or after exhaustion).
        to_rung: Rung after (``None`` when every eligible rung became unobtainable).
        direction: ``"down"`` or ``"up"``.
        reason: A human sentence.
        kind: One of :data:`EventKind`.
        cause: One of :data:`TransitionCause`, set where ``reason`` is written.

    Example:
        >>> event = TransitionEvent(12.0, "gpu", "h100", "a100", "down", "h100 lost")
        >>> event.to_dict()["to"], event.to_json().startswith('{"time": 12.0')
        ('a100', True)
    """

    time: float
    ladder: str
    from_rung: str | None
    to_rung: str | None
    direction: Direction | None
    reason: str
    kind: EventKind = "transition"
    cause: TransitionCause = "other"

    def to_dict(self) -> dict[str, object]:
        """JSON-ready dict with ``from`` / ``to`` keys."""
        d = asdict(self)
        d["from"] = d.pop("from_rung")
        d["to"] = d.pop("to_rung")
        return {k: d[k] for k in ("time", "ladder", "from", "to", "direction", "reason", "kind",
                                 "cause")}

    def to_json(self) -> str:
        """One JSON line (no newline)."""
        return json.dumps(self.to_dict())
