"""A fake multi-node provider whose cloud runs out of chosen node types (stock-outs)."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from ray.autoscaler.node_launch_exception import NodeLaunchException
from ray.autoscaler.tags import TAG_RAY_USER_NODE_TYPE

from ray_ladder.autoscale.fake.schedule import CapacitySchedule
from ray_ladder.cluster import ray_private

FakeMultiNodeProvider: Any = ray_private.fake_multinode_provider_class()

logger = logging.getLogger(__name__)

#: Environment variables read when the provider config does not name the files.
SCHEDULE_ENV = "RAY_LADDER_CAPACITY_SCHEDULE"
EVENTS_ENV = "RAY_LADDER_PROVIDER_EVENTS"
#: The category AWS puts on its "no capacity" answer (EC2 error code); GCP says
#: ZONE_RESOURCE_POOL_EXHAUSTED, Azure SkuNotAvailable / AllocationFailed.
DEFAULT_ERROR_CATEGORY = "InsufficientInstanceCapacity"


class StockoutProvider(FakeMultiNodeProvider):
    """Ray's fake multi-node provider, plus a cloud that can run out of node types.

    A launch of a node type the capacity schedule refuses raises
    :class:`~ray.autoscaler.node_launch_exception.NodeLaunchException` (category
    ``InsufficientInstanceCapacity`` by default), exactly what a cloud provider raises, so
    Ray's autoscaler records it in its node-availability tracker and reports it. Other
    launches start real raylets on this machine, like the stock fake provider.

    Provider config keys (all optional) beside the fake provider's own:

    * ``capacity_schedule``: path to a schedule file (see
      :class:`~ray_ladder.autoscale.fake.schedule.CapacitySchedule`); re-read when it changes,
      so a test or benchmark can turn capacity off and on. Env fallback:
      ``RAY_LADDER_CAPACITY_SCHEDULE``.
    * ``events_log``: path of a JSON-lines log of launches, refusals and terminations.
      Env fallback: ``RAY_LADDER_PROVIDER_EVENTS``. Events: ``refused``, ``launching``
      (a launch starts), ``launched`` (its raylet registered), ``terminated``.
    * ``error_category``: category of the raised exception.

    Plug it into an autoscaling config with ``provider: {type: external, module:
    ray_ladder.autoscale.fake.provider.StockoutProvider, ...}`` and ``RAY_FAKE_CLUSTER=1``.

    Example:
        >>> config["provider"] = {"type": "external",  # doctest: +SKIP
        ...     "module": "ray_ladder.autoscale.fake.provider.StockoutProvider",
        ...     "capacity_schedule": "/tmp/schedule.yaml"}
    """

    def __init__(self, provider_config: dict[str, Any], cluster_name: str) -> None:
        super().__init__(provider_config, cluster_name)
        schedule = provider_config.get("capacity_schedule") or os.environ.get(SCHEDULE_ENV)
        events = provider_config.get("events_log") or os.environ.get(EVENTS_ENV)
        self._schedule_path = Path(schedule) if schedule else None
        self._events_path = Path(events) if events else None
        self._category = provider_config.get("error_category", DEFAULT_ERROR_CATEGORY)
        self._schedule = CapacitySchedule()
        self._schedule_stamp: int | None = None
        self._epoch = time.time()  # t=0 when the schedule gives no epoch
        self._log_lock = threading.Lock()

    # --- schedule ------------------------------------------------------------------------

    def schedule(self) -> CapacitySchedule:
        """The capacity schedule in force (re-read when its file changed)."""
        path = self._schedule_path
        if path is None:
            return self._schedule
        try:
            stamp = path.stat().st_mtime_ns
        except OSError:
            return self._schedule
        if stamp != self._schedule_stamp:
            try:
                self._schedule = CapacitySchedule.load(path)
                self._schedule_stamp = stamp
            except Exception:  # a half-written file: keep the last schedule
                logger.exception("cannot read capacity schedule %s", path)
        return self._schedule

    def refuses(self, node_type: str, now: float | None = None) -> bool:
        """Whether a launch of ``node_type`` would be refused now."""
        return self.schedule().refused(node_type, time.time() if now is None else now,
                                       epoch=self._epoch)

    # --- provider API --------------------------------------------------------------------

    def create_node_with_resources_and_labels(
        self, node_config: dict[str, Any], tags: dict[str, str], count: int,
        resources: dict[str, float], labels: dict[str, str],
    ) -> Any:
        """Launch ``count`` nodes, or raise the cloud's "no capacity" error."""
        node_type = tags.get(TAG_RAY_USER_NODE_TYPE, "")
        if self.refuses(node_type):
            self._log("refused", node_type, count=count)
            raise NodeLaunchException(
                category=self._category,
                description=(f"We currently do not have sufficient {node_type} capacity "
                             "in the requested zone (ray-ladder fake provider)."),
                src_exc_info=None,
            )
        self._log("launching", node_type, count=count)
        before = set(self._nodes)
        out = super().create_node_with_resources_and_labels(
            node_config, tags, count, resources, labels)
        for node_id in sorted(set(self._nodes) - before):
            self._log("launched", node_type, node_id=node_id)
        return out

    def terminate_node(self, node_id: str) -> Any:
        """Terminate a node (the autoscaler's idle timeout or a scale-down)."""
        node_type = self._nodes.get(node_id, {}).get("tags", {}).get(TAG_RAY_USER_NODE_TYPE)
        out = super().terminate_node(node_id)
        self._log("terminated", node_type or "", node_id=node_id)
        return out

    def _log(self, event: str, node_type: str, **extra: Any) -> None:
        if self._events_path is None:
            return
        line = json.dumps({"time": time.time(), "event": event, "node_type": node_type,
                           **extra})
        with self._log_lock, self._events_path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
