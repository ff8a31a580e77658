"""FakeNodes: a node table a test scripts, the node source seam's fake (no Ray needed)."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace

from ray_ladder.core.placement import NodeState, labels_satisfying
from ray_ladder.core.spec import Ladder, Rung

#: The label every node built for a rung carries (LocalCluster's nodes too).
RUNG_LABEL = "ladder.rung"


def rung_node(rung: Rung, num_cpus: float = 1) -> tuple[dict[str, float], dict[str, str]]:
    """What a node built to host ``rung`` advertises: ``(resources, labels)``.

    Custom resources in whole units (at least 1), ``accelerator_type:<T>``, the rung's
    GPUs, and ``max(num_cpus, rung.num_cpus)`` CPUs; the equality terms of its label
    selector (``in(a,b)`` takes ``a``, negations need no label) and ``ladder.rung``.
    :class:`FakeNodes` and :class:`~ray_ladder.testing.LocalCluster` build nodes this way.

    Example:
        >>> rung_node(Rung(name="h100", resources={"ladder/h100": 0.5},
        ...                label_selector={"zone": "in(a,b)"}))
        ({'ladder/h100': 1.0, 'CPU': 1}, {'zone': 'a', 'ladder.rung': 'h100'})
    """
    resources = {k: max(v, 1.0) for k, v in rung.resources.items()}
    if rung.accelerator_type:
        resources[f"accelerator_type:{rung.accelerator_type}"] = 1.0
    if rung.num_gpus:
        resources["GPU"] = max(rung.num_gpus, resources.get("GPU", 0.0))
    resources["CPU"] = max(num_cpus, rung.num_cpus or 0, resources.get("CPU", 0.0))
    labels = labels_satisfying(rung.label_selector)
    labels[RUNG_LABEL] = rung.name
    return resources, labels


class FakeNodes:
    """A node source whose node table a test scripts, as httpx ships ``MockTransport``.

    ``nodes()`` answers a ``list[NodeState]`` as
    :func:`~ray_ladder.cluster.capacity.ray_node_states` does on a real cluster, so it
    goes wherever a node source is taken (``node_source=``: ``CapacityView``, the Tune
    ``LadderScheduler``, the Train ``LadderScalingPolicy``). Each change shows in the next
    read: :meth:`add` (capacity arrives), :meth:`kill` (the GCS marks the node dead),
    :meth:`drain` (a preemption notice, with its deadline), :meth:`use` / :meth:`free`
    (work takes and gives back units), :meth:`remove` (the node leaves the table).
    Thread-safe: a view refreshing in its own thread may read while the test changes it.

    Args:
        ladder: The ladder whose rung names :meth:`add` accepts.
        num_cpus: CPUs of a node built for a rung (at least the rung's own).

    Attributes:
        reads: How many times the table was read (a cache's test counts them).

    Example:
        >>> from ray_ladder.cluster.capacity import CapacityView
        >>> ladder = Ladder.from_dict({"name": "l", "rungs": [
        ...     {"name": "h100", "resources": {"ladder/h100": 1}},
        ...     {"name": "cpu", "num_cpus": 1}]})
        >>> nodes = FakeNodes(ladder)
        >>> nodes.add("h100") + nodes.add("cpu")
        ['h100-1', 'cpu-1']
        >>> view = CapacityView(ladder, 0, node_source=nodes, follow_hook=False)
        >>> dict(view.obtainable())
        {'h100': True, 'cpu': True}
        >>> nodes.kill("h100-1")
        >>> dict(view.obtainable())
        {'h100': False, 'cpu': True}
    """

    def __init__(self, ladder: Ladder | None = None, *, num_cpus: float = 1) -> None:
        self.ladder = ladder
        self.num_cpus = num_cpus
        self.reads = 0
        self._nodes: dict[str, NodeState] = {}
        self._rung: dict[str, str | None] = {}  # node id -> the rung it was built for
        self._counts: dict[str, int] = {}  # id prefix -> ids given so far
        self._lock = threading.RLock()  # use/free read, then change

    def __call__(self) -> list[NodeState]:
        """Every node in the table, as ``ray_node_states()`` answers (dead ones too)."""
        with self._lock:
            self.reads += 1
            return list(self._nodes.values())

    def add(self, rung_or_resources: str | Rung | Mapping[str, float], *,
            node_id: str | None = None, labels: Mapping[str, str] | None = None,
            count: int = 1) -> list[str]:
        """Add ``count`` alive, idle nodes; return their ids.

        Args:
            rung_or_resources: A rung of the ladder (or its name): the node advertises
                what :func:`rung_node` says; or the resources to advertise, as given.
            node_id: The id of the one node (default: ``<rung>-<n>``, ``node-<n>``).
            labels: Labels on top of the rung's.
            count: How many nodes (more than one only without ``node_id``).
        """
        if count < 1 or (node_id is not None and count != 1):
            raise ValueError(f"count must be >= 1, and 1 with a node_id (got {count})")
        rung = self._rung_named(rung_or_resources)
        if rung is not None:
            total, base = rung_node(rung, self.num_cpus)
        else:
            assert isinstance(rung_or_resources, Mapping)
            total, base = dict(rung_or_resources), {}
        prefix = rung.name if rung is not None else "node"
        with self._lock:
            if node_id in self._nodes:
                raise ValueError(f"node {node_id!r} is in the table already (remove it first)")
            ids = [node_id] if node_id is not None else [self._next_id(prefix)
                                                         for _ in range(count)]
            for nid in ids:
                self._nodes[nid] = NodeState(nid, True, dict(total), dict(total),
                                             {**base, **(labels or {})})
                self._rung[nid] = rung.name if rung is not None else None
        return ids

    def kill(self, node_id: str) -> None:
        """The node dies (a SIGKILL, a preemption): dead in the table, nothing available."""
        self._change(node_id, alive=False, available={})

    def drain(self, node_id: str, *, deadline: float | None = None) -> None:
        """A preemption notice: Ray drains the node until ``deadline`` (wall-clock
        seconds; ``None``: no deadline given). It stays alive until :meth:`kill`."""
        self._change(node_id, draining=True, drain_deadline=deadline)

    def use(self, node_id: str, resources: Mapping[str, float] | None = None) -> None:
        """Work takes ``resources`` of the node's available units (``None``: all of them).

        Raises ``ValueError`` when the node has less free than asked (a test's mistake; a
        dead node has nothing free).
        """
        with self._lock:
            node = self._known(node_id)
            take = dict(node.available) if resources is None else resources
            short = {k: v for k, v in take.items()
                     if v < 0 or node.available.get(k, 0.0) < v - 1e-9}
            if short:
                raise ValueError(f"node {node_id!r} has {dict(node.available)} free; "
                                 f"cannot use {short}")
            self._change(node_id, available={k: v - take.get(k, 0.0)
                                             for k, v in node.available.items()})

    def free(self, node_id: str, resources: Mapping[str, float] | None = None) -> None:
        """Work gives ``resources`` back (``None``: all: the node is idle again). On a
        dead node this does nothing: what ran there died with it."""
        with self._lock:
            node = self._known(node_id)
            if not node.alive:
                return
            back = dict(node.total) if resources is None else resources
            if any(v < 0 for v in back.values()):
                raise ValueError(f"cannot free negative units {dict(back)}")
            self._change(node_id, available={
                k: min(t, node.available.get(k, 0.0) + back.get(k, 0.0))
                for k, t in node.total.items()})

    def remove(self, node_id: str) -> None:
        """The node leaves the table (Ray forgot it; a later :meth:`add` may reuse its id)."""
        with self._lock:
            self._known(node_id)
            del self._nodes[node_id]
            del self._rung[node_id]

    def node(self, node_id: str) -> NodeState:
        """The state of one node now."""
        with self._lock:
            return self._known(node_id)

    def node_ids(self, rung: str | None = None) -> list[str]:
        """Ids of the alive nodes, in the order added; with ``rung``, those built for it."""
        with self._lock:
            return [nid for nid, n in self._nodes.items()
                    if n.alive and (rung is None or self._rung[nid] == rung)]

    # --- helpers ------------------------------------------------------------------------

    def _rung_named(self, what: str | Rung | Mapping[str, float]) -> Rung | None:
        if isinstance(what, Rung):
            return what
        if isinstance(what, str):
            if self.ladder is None:
                raise ValueError(f"add({what!r}) names a rung: pass the ladder to FakeNodes")
            return self.ladder.rung(what)
        return None

    def _next_id(self, prefix: str) -> str:
        while True:
            n = self._counts[prefix] = self._counts.get(prefix, 0) + 1
            if f"{prefix}-{n}" not in self._nodes:
                return f"{prefix}-{n}"

    def _known(self, node_id: str) -> NodeState:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise ValueError(f"unknown node {node_id!r}; known: {sorted(self._nodes)}") from None

    def _change(self, node_id: str, **fields: object) -> None:
        with self._lock:
            self._nodes[node_id] = replace(self._known(node_id), **fields)  # type: ignore[arg-type]
