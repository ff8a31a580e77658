"""Another Ray cluster, read and driven over its dashboard: its nodes (Ray's state API,
``GET /api/v0/nodes``) and its jobs (Ray's Job Submission API).

A reading carries its own time: a cluster whose last good reading is older than its
``stale_after_s`` has its rungs counted unobtainable, and one that has not answered for
``lost_after_s`` is lost (the runner places its work elsewhere).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ray_ladder.core.clusters import ClusterSpec
from ray_ladder.core.placement import NodeState

#: How long one HTTP call to a cluster may take before the cluster counts as not answering.
HTTP_TIMEOUT_S = 3.0


def nodes_from_state_api(payload: dict[str, Any]) -> list[NodeState]:
    """Nodes from the JSON of ``GET /api/v0/nodes?detail=1``.

    The state API gives each node's liveness, labels and total resources, not what is
    free: a remote rung is obtainable while an alive node can host it (the job queues on
    a busy node, as a ``@ladder_task`` does), so ``available`` is the total.
    """
    rows = ((payload.get("data") or {}).get("result") or {}).get("result") or []
    return [NodeState(node_id=str(row.get("node_id")), alive=row.get("state") == "ALIVE",
                      total=row.get("resources_total") or {},
                      available=row.get("resources_total") or {},
                      labels=row.get("labels") or {})
            for row in rows]


def http_json(url: str, timeout_s: float = HTTP_TIMEOUT_S) -> dict[str, Any]:
    """GET ``url`` and parse its JSON body (raises ``OSError`` when it does not answer)."""
    with urllib.request.urlopen(url, timeout=timeout_s) as reply:  # noqa: S310 (http only)
        value = json.loads(reply.read().decode())
    return value if isinstance(value, dict) else {}


@dataclass
class RemoteCluster:
    """One cluster's last reading and when it last answered.

    Attributes:
        name: The cluster's name in the ladder file.
        spec: Its addresses and limits.
        nodes: Its nodes at the last good reading.
        read_at: When that reading was taken (the runner's clock; ``None``: never).
        since: When the runner began watching it (a cluster never read is lost only
            ``lost_after_s`` after this).
        get: The HTTP GET of its state API (the seam a test fakes).
        make_client: Makes its Job Submission client from the address (default: Ray's
            ``JobSubmissionClient``; the seam a test fakes).
    """

    name: str
    spec: ClusterSpec
    nodes: list[NodeState] = field(default_factory=list)
    read_at: float | None = None
    since: float = 0.0
    get: Callable[[str], dict[str, Any]] = http_json
    make_client: Callable[[str], Any] | None = None
    _client: Any = None
    _tried_at: float | None = None

    def due(self, now: float) -> bool:
        """Whether its ``poll_interval_s`` has passed since the last try to read it."""
        return self._tried_at is None or now - self._tried_at >= self.spec.poll_interval_s

    def read(self, now: float) -> bool:
        """Read its nodes now; whether it answered."""
        self._tried_at = now
        try:
            payload = self.get(f"{self.spec.address}/api/v0/nodes?detail=1&limit=10000")
        except (OSError, ValueError):
            return False
        self.nodes = nodes_from_state_api(payload)
        self.read_at = now
        return True

    def fresh(self, now: float) -> bool:
        """Whether its last reading is recent enough to trust."""
        return self.read_at is not None and now - self.read_at <= self.spec.stale_s

    def lost(self, now: float) -> bool:
        """Whether it has not answered for ``lost_after_s``."""
        last = self.since if self.read_at is None else self.read_at
        return now - last > self.spec.lost_after_s

    def jobs(self) -> Any:
        """Its ``ray.job_submission.JobSubmissionClient`` (made on first use)."""
        if self._client is None:
            if self.make_client is None:
                from ray.job_submission import JobSubmissionClient

                self._client = JobSubmissionClient(self.spec.address)
            else:
                self._client = self.make_client(self.spec.address)
        return self._client

    def forget_client(self) -> None:
        """Drop the client after an error (the next call connects afresh)."""
        self._client = None
