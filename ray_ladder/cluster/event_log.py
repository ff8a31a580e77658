"""The one event log: every part writes its transition events to the ``ray_ladder.events``
logger, one JSON line each, through :func:`log_event`."""

from __future__ import annotations

import json
import logging
from typing import Any

from ray_ladder.core.events import TransitionEvent

#: The logger users configure; its name is public (docs/tasks.md, docs/serve.md).
event_logger = logging.getLogger("ray_ladder.events")
alerts_logger = logging.getLogger("ray_ladder.alerts")


def log_event(event: TransitionEvent, **fields: Any) -> None:
    """Log ``event`` as one JSON line (``fields`` first, e.g. ``task=``): INFO for ladder
    moves and alerts, DEBUG for one call's own fall (``kind="call"``), WARNING on the
    ``ray_ladder.alerts`` logger for an alert.

    Example:
        >>> log_event(TransitionEvent(0.0, "l", "h100", "a100", "down", "lost"), task="f")
    """
    level = logging.DEBUG if event.kind == "call" else logging.INFO
    if event_logger.isEnabledFor(level):
        event_logger.log(level, json.dumps({**fields, **event.to_dict()}))
    if event.kind == "alert":
        alerts_logger.warning("ladder %s alert: %s", event.ladder, event.reason)


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
