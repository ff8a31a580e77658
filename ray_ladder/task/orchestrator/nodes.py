"""The orchestrator's node cache: node states from the GCS, refreshed in the background,
minus nodes that just killed an attempt."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from ray_ladder.cluster.capacity import NodeSource, ray_node_states
from ray_ladder.cluster.node_table import SharedNodeTable
from ray_ladder.cluster.roles import HookRoles
from ray_ladder.core.placement import NodeState


class NodeCache:
    """Node states from the GCS, refreshed in the background, minus suspected nodes.

    A node that just killed an attempt is *suspected*: it counts as dead at once,
    before the GCS's health checks confirm it, so the retry goes elsewhere.

    It also reads the autoscaler hook's roles of every ladder a task follows, in the same
    background refresh, so that the capacity views never call the GCS on the event loop.

    Args:
        node_source: Returns node states (default: Ray's GCS, through the fleet's shared
            node table while it is as fresh as the refresh interval: cluster/node_table.py).
    """

    def __init__(self, node_source: NodeSource | None = None) -> None:
        self._shared = SharedNodeTable(1.0) if node_source is None else None
        self._node_source: NodeSource = node_source or self._shared or ray_node_states
        self._nodes: list[NodeState] = []
        self._suspects: dict[str, float] = {}  # node id -> suspected until (monotonic)
        self.version = 0
        self.refreshed_at = 0.0
        self._hook = HookRoles()
        self._roles: dict[str, dict[str, Any] | None] = {}  # ladder name -> hook roles

    def follow(self, ladder: str) -> None:
        """Read the hook roles of ``ladder`` from the next refresh on."""
        self._roles.setdefault(ladder, None)

    def hook_roles(self, ladder: str) -> dict[str, Any] | None:
        """The hook roles of ``ladder`` as of the last refresh (a CapacityView hook_source)."""
        return self._roles.get(ladder)

    def refresh(self, interval_s: float | None = None) -> None:
        """Read node states (and the hook roles); ``interval_s``: how often this is called
        (the oldest shared node table it may use)."""
        if self._shared is not None and interval_s is not None:
            self._shared.max_age_s = interval_s
        nodes = self._node_source()
        for ladder in list(self._roles):
            self._roles[ladder] = self._hook.get(ladder)
        now = time.monotonic()
        dead = {n.node_id for n in nodes if not n.alive}
        self._suspects = {n: t for n, t in self._suspects.items() if t > now and n not in dead}
        self._nodes = nodes
        self.refreshed_at = now
        self.version += 1

    def suspect(self, node_id: str, ttl_s: float) -> None:
        self._suspects[node_id] = max(self._suspects.get(node_id, 0.0), time.monotonic() + ttl_s)
        self.version += 1

    def nodes(self) -> list[NodeState]:
        if not self._suspects:
            return self._nodes
        return [replace(n, alive=False) if n.node_id in self._suspects else n
                for n in self._nodes]
