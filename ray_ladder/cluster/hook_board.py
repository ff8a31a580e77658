"""What an autoscaler hook's step records for ``ray-ladder status``, the timeline and the
metrics (its status entry is its KV roles state, published by the hook itself)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ray_ladder.cluster import event_store, metrics
from ray_ladder.cluster.board import ladder_meta
from ray_ladder.cluster.event_log import record_event
from ray_ladder.core.spec import Ladder

logger = logging.getLogger(__name__)

_hook_ladders: set[str] = set()


def hook_step(ladder: Ladder, events: Sequence[Mapping[str, Any]],
              state: Mapping[str, Any]) -> None:
    """Record one autoscaler-hook step: its events (store and metrics), its roles and the
    rung it serves (gauges). The hook publishes its own status entry (its KV state).

    Example:
        >>> hook_step(ladder, [], {"serving": "h100", "rungs": {}})  # doctest: +SKIP
    """
    try:
        _hook_step(ladder, events, state)
    except Exception:  # never fail a hook step over its records
        logger.debug("hook step not recorded", exc_info=True)


def _hook_step(ladder: Ladder, events: Sequence[Mapping[str, Any]],
               state: Mapping[str, Any]) -> None:
    if ladder.name not in _hook_ladders:
        _hook_ladders.add(ladder.name)
        event_store.publish(*ladder_meta(ladder, time.time()))
    for event in events:
        record_event({k: v for k, v in event.items() if k != "rung"}, part="hook",
                     source="hook", rung=event.get("rung"))
    serving = state.get("serving")
    metrics.set_gauge("ladder_current_rung",
                      ladder.index(serving) if serving in ladder.names else -1,
                      ladder=ladder.name, part="hook")
    for rung, info in (state.get("rungs") or {}).items():
        role = info.get("role", "none")
        for name in metrics.ROLES:
            metrics.set_gauge("ladder_hook_role", 1.0 if name == role else 0.0,
                              ladder=ladder.name, rung=rung, role=name)
