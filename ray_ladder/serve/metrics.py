"""Ray metrics of a ladder app (exported with Ray's ``ray_`` prefix), plus local counts."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ray_ladder.cluster.event_log import log_event
from ray_ladder.core.events import TransitionEvent
from ray_ladder.core.selector import Decision
from ray_ladder.core.spec import Ladder


class LadderMetrics:
    """The five ladder metrics; each ``inc``/``set`` also updates :attr:`counts`.

    Names as Prometheus shows them (Ray adds ``ray_``; counters get ``_total``):
    ``ray_ladder_requests_total{ladder,rung}``, ``ray_ladder_current_rung{ladder}`` (index,
    -1 when exhausted), ``ray_ladder_transitions_total{ladder,direction}``,
    ``ray_ladder_degraded_seconds{ladder}``, ``ray_ladder_alerts_total{ladder}``.

    Args:
        ladder: The ladder (its name is the ``ladder`` tag).
        enabled: Create Ray metrics (needs a Ray worker); ``False`` keeps only counts.

    Example:
        >>> metrics = LadderMetrics(ladder, enabled=False)  # doctest: +SKIP
        >>> metrics.request("h100"); metrics.counts["requests"]["h100"]  # doctest: +SKIP
        1
    """

    def __init__(self, ladder: Ladder, *, enabled: bool = True) -> None:
        self.ladder = ladder
        self._tags = {"ladder": ladder.name}
        self.counts: dict[str, Any] = {
            "requests": Counter(), "transitions": Counter(), "alerts": 0,
            "current_rung": -1, "degraded_seconds": 0.0,
        }
        self._exported: Counter[str] = Counter()
        self._requests = self._current = self._transitions = None
        self._degraded = self._alerts = None
        if enabled:
            from ray.util import metrics

            keys = ("ladder",)
            self._requests = metrics.Counter(
                "ladder_requests", "Answers per rung (shed/exhausted included).",
                tag_keys=("ladder", "rung"))
            self._current = metrics.Gauge(
                "ladder_current_rung", "Index of the rung requests go to (-1: none).",
                tag_keys=keys)
            self._transitions = metrics.Counter(
                "ladder_transitions", "Rung changes by direction (down/up).",
                tag_keys=("ladder", "direction"))
            self._degraded = metrics.Gauge(
                "ladder_degraded_seconds", "Seconds below the best eligible rung.",
                tag_keys=keys)
            self._alerts = metrics.Counter(
                "ladder_alerts", "max_degraded_seconds alerts.", tag_keys=keys)
            self._current.set(-1, tags=self._tags)
            self._degraded.set(0.0, tags=self._tags)

    def request(self, rung: str) -> None:
        """One answer (or 503) from ``rung`` (exported at the next :meth:`decision`)."""
        self.counts["requests"][rung] += 1

    def flush(self) -> None:
        """Export the request counts gathered since the last flush (one ``inc`` per rung
        per probe instead of one per request: the router's hot path stays cheap)."""
        if self._requests is None:
            return
        for rung, total in self.counts["requests"].items():
            delta = total - self._exported.get(rung, 0)
            if delta:
                self._requests.inc(delta, tags={"ladder": self.ladder.name, "rung": rung})
                self._exported[rung] = total

    def decision(self, decision: Decision) -> None:
        """The unconstrained selector's decision after an observation (also flushes)."""
        self.flush()
        index = self.ladder.index(decision.rung) if decision.rung is not None else -1
        self.counts["current_rung"] = index
        self.counts["degraded_seconds"] = decision.degraded_s
        if self._current is not None and self._degraded is not None:
            self._current.set(index, tags=self._tags)
            self._degraded.set(decision.degraded_s, tags=self._tags)

    def event(self, event: TransitionEvent) -> None:
        """Log the event's JSON line; count transitions and alerts; log alerts."""
        log_event(event)
        if event.kind == "alert":
            self.counts["alerts"] += 1
            if self._alerts is not None:
                self._alerts.inc(1, tags=self._tags)
        elif event.direction is not None:
            self.counts["transitions"][event.direction] += 1
            if self._transitions is not None:
                self._transitions.inc(
                    1, tags={"ladder": self.ladder.name, "direction": event.direction})

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready copy of :attr:`counts`."""
        return {
            "requests": dict(self.counts["requests"]),
            "transitions": dict(self.counts["transitions"]),
            "alerts": self.counts["alerts"],
            "current_rung": self.counts["current_rung"],
            "degraded_seconds": round(self.counts["degraded_seconds"], 3),
        }
