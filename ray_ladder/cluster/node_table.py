"""One node-table read for every ladder on the cluster.

Without a fleet, every part that places work (each Serve router, each driver's task
orchestrator, each Tune scheduler and Train run, each autoscaler hook) reads Ray's node
table itself, every probe interval: three GCS calls (``GetAllNodeInfo``,
``GetAllAvailableResources``, ``GetDrainingNodes``) per reader per interval. With a fleet,
the arbiter (``ray_ladder.fleet``) reads it once every ``node_table_period_s`` and
publishes it in Ray's KV under :data:`NODE_TABLE_KEY`; a :class:`SharedNodeTable` reader
uses that table while it is at most its own refresh interval old (``max_age_s``), and
reads the GCS itself otherwise, so a reader never sees older data than it would by
reading on its own schedule plus one interval. A table absent, published by an arbiter
that stopped, or published less often than the reader refreshes is not used; the reader
asks the KV again after :data:`RECHECK_S`.

Ages are wall-clock differences between the arbiter's node and the reader's; a table
that looks younger than ``-max_age_s`` (the clocks disagree) is not used, and one table
is used by a process for at most ``max_age_s`` of its own monotonic clock.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ray_ladder.core.placement import NodeState

KV_NAMESPACE = "ray_ladder"
NODE_TABLE_KEY = "fleet/nodes"
#: How long a reader that found no usable table waits before asking the KV again.
RECHECK_S = 2.0


@dataclass(frozen=True)
class Table:
    """One published node table: when it was read (wall clock), the publisher's period."""

    published: float
    every_s: float
    nodes: tuple[NodeState, ...]


def encode(nodes: Iterable[NodeState], published: float, every_s: float) -> bytes:
    """The KV value of a node table (compact JSON, one list per node).

    Example:
        >>> node = NodeState("n1", True, {"CPU": 4.0}, {"CPU": 2.0}, {"zone": "a"})
        >>> decode(encode([node], 10.0, 0.25)).nodes[0] == node
        True
    """
    rows = [[n.node_id, n.alive, dict(n.total), dict(n.available), dict(n.labels),
             n.draining, n.drain_deadline] for n in nodes]
    return json.dumps({"t": published, "every": every_s, "nodes": rows},
                      separators=(",", ":")).encode()


def decode(raw: bytes) -> Table:
    """A node table from its KV value (:func:`encode`)."""
    doc = json.loads(raw)
    nodes = tuple(NodeState(node_id=r[0], alive=bool(r[1]), total=r[2], available=r[3],
                            labels=r[4], draining=bool(r[5]), drain_deadline=r[6])
                  for r in doc["nodes"])
    return Table(float(doc["t"]), float(doc["every"]), nodes)


def usable(table: Table, max_age_s: float, now: float) -> bool:
    """Whether a reader that refreshes every ``max_age_s`` may use ``table`` at ``now``.

    Example:
        >>> t = Table(published=100.0, every_s=0.25, nodes=())
        >>> usable(t, 1.0, 100.5), usable(t, 1.0, 101.5), usable(t, 0.1, 100.05)
        (True, False, False)
    """
    age = now - table.published
    return table.every_s <= max_age_s and -max_age_s <= age <= max_age_s


def publish(nodes: Iterable[NodeState], now: float, every_s: float) -> None:
    """Write the node table the arbiter just read (needs ``ray.init``)."""
    from ray_ladder.cluster import ray_private

    ray_private.kv_put(NODE_TABLE_KEY, encode(nodes, now, every_s), namespace=KV_NAMESPACE)


def ray_node_states() -> list[NodeState]:
    """Read every node from Ray's GCS: liveness, labels, total and available resources.

    Source of truth: ``ray.nodes()`` (alive flag, labels, totals), the GCS's per-node
    available resources, and the GCS's draining-node table for preemption notices
    (:func:`ray_private.draining_nodes`: node -> drain deadline, filled by the
    ``DrainNode`` call that a SIGTERMed ``ray start --block`` (a deleted KubeRay pod)
    and ``ray drain-node`` make; a SIGTERM to the raylet itself is no notice, and
    autoscaler v2 drains only idle nodes). Needs ``ray.init()`` first.
    """
    import ray

    from ray_ladder.cluster import ray_private

    available = ray_private.available_resources_per_node()
    draining = ray_private.draining_nodes()
    out = []
    for node in ray.nodes():
        node_id = node["NodeID"]
        out.append(NodeState(
            node_id=node_id,
            alive=bool(node.get("Alive")),
            total=node.get("Resources") or {},
            available=available.get(node_id, {}),
            labels=node.get("Labels") or {},
            draining=node_id in draining,
            drain_deadline=draining.get(node_id),
        ))
    return out


def _kv_table() -> bytes | None:
    from ray_ladder.cluster import ray_private

    return ray_private.kv_get(NODE_TABLE_KEY, namespace=KV_NAMESPACE)


class _Latest:
    """The last table this process read, shared by its readers (one KV read serves all)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.table: Table | None = None
        self.seen_at = 0.0  # monotonic time this process first read ``table``


_LATEST = _Latest()


class SharedNodeTable:
    """A node source that reads the fleet arbiter's published table while it is fresh.

    Args:
        max_age_s: The oldest table this reader uses (its own refresh interval).
        direct: The GCS read used when no fresh table is published.
        kv_get: Reads the published value (default: Ray's KV).
        wall_clock: Wall clock (ages are wall-clock differences).
        clock: Monotonic clock.

    Attributes:
        reads: ``{"shared": n, "gcs": n}``: how this reader was answered.
        last: How the last read was answered (``shared``, ``gcs``; ``""`` before any).

    Example:
        >>> from ray_ladder.testing import FakeNodes
        >>> nodes = FakeNodes()
        >>> _ = nodes.add({"CPU": 1})
        >>> value = encode(nodes(), 100.0, 0.25)
        >>> table = SharedNodeTable(0.5, direct=lambda: [], kv_get=lambda: value,
        ...                         wall_clock=lambda: 100.2, latest=_Latest())
        >>> len(table()), table.reads
        (1, {'shared': 1, 'gcs': 0})
    """

    def __init__(self, max_age_s: float, *,
                 direct: Callable[[], list[NodeState]] | None = None,
                 kv_get: Callable[[], bytes | None] = _kv_table,
                 wall_clock: Callable[[], float] = time.time,
                 clock: Callable[[], float] = time.monotonic,
                 latest: _Latest | None = None) -> None:
        self.max_age_s = max_age_s
        self._direct = direct or ray_node_states
        self._kv_get, self._wall, self._clock = kv_get, wall_clock, clock
        self._latest = latest or _LATEST
        self.reads = {"shared": 0, "gcs": 0}
        self.last = ""
        self._ask_after = 0.0  # monotonic: no KV read before this (nothing usable there)

    def __call__(self) -> list[NodeState]:
        """Every node's state: the shared table if usable, else the GCS's."""
        table = self._shared()
        self.last = "gcs" if table is None else "shared"
        self.reads[self.last] += 1
        return self._direct() if table is None else list(table.nodes)

    def _fresh(self, table: Table | None, seen_at: float) -> bool:
        return (table is not None and usable(table, self.max_age_s, self._wall())
                and self._clock() - seen_at <= self.max_age_s)

    def _shared(self) -> Table | None:
        latest = self._latest
        with latest.lock:
            if self._fresh(latest.table, latest.seen_at):
                return latest.table
            if self._clock() < self._ask_after:
                return None
        raw = self._kv_get()  # outside the lock: a KV round trip
        table = decode(raw) if raw else None
        with latest.lock:
            if table is not None and (latest.table is None
                                      or table.published != latest.table.published):
                latest.table, latest.seen_at = table, self._clock()
            if self._fresh(latest.table, latest.seen_at):
                return latest.table
            gone = table is None or self._wall() - table.published > RECHECK_S \
                or table.every_s > self.max_age_s
            if gone:  # no arbiter, or one that stopped, or too slow for this reader
                self._ask_after = self._clock() + RECHECK_S
            return None
