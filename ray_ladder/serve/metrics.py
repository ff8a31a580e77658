"""Ray metrics and the status entry of a ladder app (names: ray_ladder.cluster.metrics)."""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from ray_ladder.cluster import metrics as ladder_metrics
from ray_ladder.cluster.board import LadderBoard
from ray_ladder.cluster.event_log import log_event
from ray_ladder.core.events import TransitionEvent
from ray_ladder.core.exceptions import AttemptCause
from ray_ladder.core.selector import Decision
from ray_ladder.core.spec import Ladder

if TYPE_CHECKING:
    from ray_ladder.serve.state import RouterState

#: Constrained selectors shown in the status entry (the most recently used).
MAX_STATUS_SELECTORS = 20


class LadderMetrics:
    """The router's metrics and status entry; each count also updates :attr:`counts`.

    Records through the one table of :mod:`ray_ladder.cluster.metrics` (Prometheus shows
    ``ray_ladder_requests_total{ladder,rung}``, ``ray_ladder_current_rung{ladder,part}``
    and the rest, see docs/operating.md) and publishes the app's entry for
    ``ray-ladder status`` (:class:`~ray_ladder.cluster.board.LadderBoard`). Transitions
    and alerts are counted where they are logged (:func:`log_event`).

    Args:
        ladder: The ladder (its name is the ``ladder`` tag).
        enabled: Export Ray metrics; ``False`` keeps only counts (and the status entry).
        app: The Serve app (default: read from the replica context on first use).

    Example:
        >>> metrics = LadderMetrics(ladder, enabled=False)  # doctest: +SKIP
        >>> metrics.request("h100"); metrics.counts["requests"]["h100"]  # doctest: +SKIP
        1
    """

    def __init__(self, ladder: Ladder, *, enabled: bool = True, app: str | None = None) -> None:
        self.ladder = ladder
        self.enabled = enabled
        self._app = app
        self._tags = {"ladder": ladder.name, "part": "serve"}
        self.counts: dict[str, Any] = {
            "requests": Counter(), "transitions": Counter(), "alerts": 0,
            "hedges": Counter(), "resent": Counter(), "spills": Counter(),
            "slow": Counter(),
            "current_rung": -1, "degraded_seconds": 0.0,
        }
        self._exported: Counter[str] = Counter()
        self.board = LadderBoard("serve", export=enabled)
        if enabled:
            ladder_metrics.set_gauge("ladder_current_rung", -1, **self._tags)
            ladder_metrics.set_gauge("ladder_degraded_seconds", 0.0, **self._tags)

    @property
    def app(self) -> str:
        """The Serve app this router fronts (its status entry's name)."""
        if self._app is None:
            try:
                from ray import serve

                self._app = serve.get_replica_context().app_name
            except Exception:  # not in a replica (unit tests): the ladder's name
                self._app = self.ladder.name
        return self._app

    def request(self, rung: str) -> None:
        """One answer (or 503) from ``rung`` (exported at the next :meth:`decision`)."""
        self.counts["requests"][rung] += 1

    def hedged(self, rung: str) -> None:
        """A request ``rung`` was slow to take was copied to another rung (a hedge)."""
        self.counts["hedges"][rung] += 1
        self.board.hedged(self.ladder.name, rung)

    def spilled(self, rung: str) -> None:
        """A request passed over ``rung`` for its latency target (it went below)."""
        self.counts["spills"][rung] += 1
        self.board.spilled(self.ladder.name, rung)

    def slow(self, rung: str, event: TransitionEvent) -> None:
        """``rung`` was found slow (``event`` says why; logged with the others)."""
        self.counts["slow"][rung] += 1
        self.board.slow(self.ladder.name, rung)
        log_event(event, part="serve", source=self.app)

    def resent(self, rung: str) -> None:
        """A request ``rung`` failed goes to another rung (or, with none left, fails)."""
        self.counts["resent"][rung] += 1

    def flush(self) -> None:
        """Export the request counts gathered since the last flush (one ``inc`` per rung
        per probe instead of one per request: the router's hot path stays cheap)."""
        for rung, total in self.counts["requests"].items():
            delta = total - self._exported.get(rung, 0)
            if delta:
                self.board.answered(self.app, self.ladder, rung, delta)
                self._exported[rung] = total

    def decision(self, decision: Decision) -> None:
        """The unconstrained selector's decision after an observation (also flushes)."""
        self.flush()
        index = self.ladder.index(decision.rung) if decision.rung is not None else -1
        self.counts["current_rung"] = index
        self.counts["degraded_seconds"] = decision.degraded_s
        if self.enabled:
            ladder_metrics.set_gauge("ladder_current_rung", index, **self._tags)
            ladder_metrics.set_gauge("ladder_degraded_seconds", decision.degraded_s,
                                     **self._tags)

    def event(self, event: TransitionEvent) -> None:
        """Log and record the event (store, transition and alert metrics); count it."""
        log_event(event, part="serve", source=self.app)
        if event.kind == "alert":
            self.counts["alerts"] += 1
        elif event.direction is not None:
            self.counts["transitions"][event.direction] += 1

    def attempt_failed(self, rung: str, cause: AttemptCause, error: str | None = None) -> None:
        """A request (or ping) found ``rung`` failing (``cause``; ``error``: its class)."""
        self.board.attempt_failed(self.ladder.name, rung, cause, error)

    def observed(self, state: RouterState, now: float | None = None) -> None:
        """After a probe: the app's status entry (when due), gauges and replica-hours."""
        now = time.time() if now is None else now
        snap = state.snapshot(now)
        rungs = snap["rungs"]
        selectors = state.selectors_in_use()
        self.board.observe(
            self.app, self.ladder, selectors[0],
            obtainable={r["name"]: r["obtainable"] for r in rungs},
            replicas={r["name"]: r["running_replicas"] or 0 for r in rungs},
            others=selectors[1:][-MAX_STATUS_SELECTORS:], now=now,
            why={r["name"]: why for r in rungs if not r["obtainable"]
                 and (why := state.why_not(r["name"], now)) is not None},
            extra={"slow": {r["name"]: r["down_reason"] for r in rungs if r.get("slow")}})

    def snapshot(self) -> dict[str, Any]:
        """JSON-ready copy of :attr:`counts`."""
        return {
            "requests": dict(self.counts["requests"]),
            "transitions": dict(self.counts["transitions"]),
            "alerts": self.counts["alerts"],
            "hedges": dict(self.counts["hedges"]),
            "resent": dict(self.counts["resent"]),
            "spills": dict(self.counts["spills"]),
            "slow": dict(self.counts["slow"]),
            "current_rung": self.counts["current_rung"],
            "degraded_seconds": round(self.counts["degraded_seconds"], 3),
        }

