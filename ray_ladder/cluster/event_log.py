"""The one event log: every part writes its transition events through :func:`log_event`:
one JSON line on the ``ray_ladder.events`` logger, one record in the cluster's event store
(:mod:`ray_ladder.cluster.event_store`) and the transition and alert metrics."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from ray_ladder.cluster import event_store, metrics
from ray_ladder.core.events import TransitionEvent

#: The logger users configure; its name is public (docs/tasks.md, docs/serve.md).
event_logger = logging.getLogger("ray_ladder.events")
alerts_logger = logging.getLogger("ray_ladder.alerts")


def log_event(event: TransitionEvent, *, part: str | None = None, source: str | None = None,
              **fields: Any) -> None:
    """Log ``event`` as one JSON line (``fields`` first, e.g. ``task=``): INFO for ladder
    moves and alerts, DEBUG for one call's own fall (``kind="call"``), WARNING on the
    ``ray_ladder.alerts`` logger for an alert.

    Every kind but ``call`` (one per moved request: too many to keep) is also recorded in
    the cluster's event store and counted in the metrics, where this process runs Ray.

    Args:
        event: The event.
        part: Which part saw it: ``serve``, ``task``, ``tune`` or ``hook`` (default:
            ``task`` when ``task=`` is given).
        source: Which user of the ladder (the Serve app, the task, the trial; default:
            ``task=``'s value).
        fields: Extra keys of the JSON line and the stored record.

    Example:
        >>> log_event(TransitionEvent(0.0, "l", "h100", "a100", "down", "lost"), task="f")
    """
    level = logging.DEBUG if event.kind == "call" else logging.INFO
    if event_logger.isEnabledFor(level):
        event_logger.log(level, json.dumps({**fields, **event.to_dict()}))
    if event.kind == "alert":
        alerts_logger.warning("ladder %s alert: %s", event.ladder, event.reason)
    if event.kind != "call":
        part = part or ("task" if "task" in fields else "other")
        source = source if source is not None else str(fields.get("task", ""))
        record_event(event.to_dict(), part=part, source=source, **fields)


def record_event(event: dict[str, Any], *, part: str, source: str, **fields: Any) -> None:
    """Record one event dict (:meth:`TransitionEvent.to_dict`) in the event store and the
    metrics, without a log line (for parts that log their own way, such as the hook).

    Example:
        >>> record_event({"ladder": "l", "kind": "stockout", "to": "h100"}, part="hook",
        ...              source="hook")
    """
    stored = {**fields, **event, "part": part, "source": source, "wall": time.time()}
    event_store.record(stored)
    ladder = str(event.get("ladder"))
    kind = event.get("kind")
    if kind == "transition":
        metrics.inc("ladder_transitions", ladder=ladder, part=part,
                    direction=event.get("direction") or "none",
                    reason=metrics.transition_label(event))
    elif kind == "alert":
        metrics.inc("ladder_alerts", ladder=ladder, part=part)
    elif kind == "stockout":
        metrics.inc("ladder_launch_refusals", ladder=ladder,
                    rung=str(fields.get("rung") or event.get("to")))


def show_events_on_stderr() -> None:
    """Make ladder moves reach this process's stderr, which Ray forwards to the driver.

    Used by the parts that run in Ray workers (the task orchestrator, the Serve router).
    Adds a handler only when the logger has none and sets INFO only when no level is set,
    so a user's own logging configuration wins.
    """
    if event_logger.level == logging.NOTSET:
        event_logger.setLevel(logging.INFO)
    if not event_logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
        event_logger.addHandler(handler)
        event_logger.propagate = False
    if alerts_logger.level == logging.NOTSET:
        alerts_logger.setLevel(logging.WARNING)
