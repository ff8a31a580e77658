"""LocalCluster: a real heterogeneous Ray cluster on one machine, for tests and demos;
FakeNodes: the node table without one."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ray_ladder.cluster import ray_private
from ray_ladder.cluster.fake_nodes import FakeNodes, rung_node
from ray_ladder.cluster.local_processes import sigkill_node, start_with_retries
from ray_ladder.core.spec import Ladder, Rung

__all__ = ["FAST_HEALTH_CHECKS", "HEAD_TYPE", "NODE_TYPE_LABEL", "FakeNodes", "LocalCluster",
           "NodeHandle", "NodeType", "free_port", "node_type_for_rung", "wait_until"]

logger = logging.getLogger(__name__)

#: Set unless already set: no usage stats; Serve kills a proxy that misses 3 readiness
#: checks of 5 s (a loaded 2-core machine did): a slow start is not a dead proxy.
RAY_ENV_DEFAULTS = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "30"}
#: Health checks that notice a SIGKILLed node in about a second (default: ~14 s): a killed
#: raylet refuses the check at once (about threshold x period); the long timeout keeps a
#: live, CPU-starved raylet alive (docs/testing.md: 1.5 s was too short beside engines).
FAST_HEALTH_CHECKS: dict[str, Any] = {
    "health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
    "health_check_timeout_ms": 5000, "health_check_failure_threshold": 2}
NODE_TYPE_LABEL = "ladder.node-type"
HEAD_TYPE = "head"


@dataclass(frozen=True)
class NodeType:
    """What one kind of node advertises.

    Attributes:
        num_cpus: Logical CPUs (tasks only count them; the machine's cores are shared).
        num_gpus: Logical GPUs (no real GPU needed: Ray just counts them).
        resources: Custom resources, e.g. ``{"ladder/h100": 1}``.
        labels: Node labels, e.g. ``{"ladder.accelerator": "h100"}``.
        object_store_memory: Bytes of object store for the node.
    """

    num_cpus: float = 1
    num_gpus: float = 0
    resources: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    object_store_memory: int = 80 * 2**20

    @classmethod
    def coerce(cls, value: NodeType | Mapping[str, Any]) -> NodeType:
        """Accept a NodeType or a dict of its fields (unknown keys name the valid ones)."""
        if isinstance(value, NodeType):
            return value
        valid = set(cls.__dataclass_fields__)
        unknown = set(value) - valid
        if unknown:
            raise ValueError(f"unknown node type key(s) {sorted(unknown)}; valid: {sorted(valid)}")
        return cls(**value)


@dataclass(eq=False)
class NodeHandle:
    """A node started by :class:`LocalCluster`.

    Attributes:
        type: Its node type name.
        node_id: Ray node id (hex).
    """

    type: str
    node_id: str
    _node: Any = field(repr=False)
    alive: bool = True

    @property
    def logs_dir(self) -> str:
        """Where this node's Ray processes write their logs (Serve's under ``serve/``)."""
        return str(self._node.get_logs_dir_path())


def node_type_for_rung(rung: Rung, num_cpus: float = 1) -> NodeType | None:
    """The node type that makes ``rung`` obtainable, or None when the head already does.

    Custom resources, GPUs and ``accelerator_type`` become advertised resources; equality
    terms of the label selector become labels (``in(a,b)`` takes ``a``; negations are
    left out). A rung that asks only for CPUs runs on the head and needs no node type.
    """
    if not rung.is_compute:
        return None
    resources, labels = rung_node(rung, num_cpus)  # the one rule, FakeNodes' too
    cpus, gpus = resources.pop("CPU"), resources.pop("GPU", 0)
    if not resources and not gpus and len(labels) == 1:  # only ladder.rung: the head's
        return None
    return NodeType(num_cpus=cpus, num_gpus=gpus, resources=resources, labels=labels)


class LocalCluster:
    """A real multi-node Ray cluster on this machine, built from named node types.

    Each node is a real raylet (``ray.cluster_utils.Cluster``). Removing a node without
    ``graceful`` is a SIGKILL of its processes: a preemption. Health checks are fast so a
    killed node is noticed within about a second. It starts and stops only its own
    processes (never ``ray stop``). Every node carries the label ``ladder.node-type``;
    the head's is ``head`` (pin routers there with ``label_selector``).

    Args:
        node_types: Name -> :class:`NodeType` (or a dict of its fields).
        initial: Name -> how many nodes to start with (default: one of each type).
        head: The head node's type (default: 2 logical CPUs, no custom resources).
        connect: Call ``ray.init(address=...)`` so this process is the driver.
        system_config: Extra ``_system_config`` for the head (merged over fast checks).
        namespace: Ray namespace for the driver.
        log_to_driver: Print the workers' logs in the driver (``ray.init``'s option); bench
            scripts turn it off so stdout carries their JSON alone.
        include_dashboard: Run Ray's dashboard on the head (on a free 127.0.0.1 port); it
            writes the Prometheus service-discovery file of the session.
        temp_dir: Ray's temp directory (default ``/tmp/ray``; with ``include_dashboard`` a
            fresh one, removed at shutdown: Ray's job supervisor runs a job's driver on the
            cluster named in its ``ray_current_cluster`` file, which any cluster overwrites).

    Example:
        >>> with LocalCluster({"h100": {"resources": {"ladder/h100": 1}}}) as cluster:
        ...     node = cluster.nodes("h100")[0]
        ...     cluster.remove_node(node)             # preemption
        ...     node = cluster.add_node("h100")       # capacity returns
    """

    def __init__(
        self,
        node_types: Mapping[str, NodeType | Mapping[str, Any]],
        *,
        initial: Mapping[str, int] | None = None,
        head: NodeType | Mapping[str, Any] | None = None,
        connect: bool = True,
        system_config: Mapping[str, Any] | None = None,
        namespace: str | None = None,
        log_to_driver: bool = True,
        include_dashboard: bool = False,
        temp_dir: str | None = None,
    ) -> None:
        self.node_types = {name: NodeType.coerce(t) for name, t in node_types.items()}
        if HEAD_TYPE in self.node_types:
            raise ValueError(f"node type name {HEAD_TYPE!r} is reserved for the head node")
        self.initial = dict(initial) if initial is not None else dict.fromkeys(self.node_types, 1)
        unknown = set(self.initial) - set(self.node_types)
        if unknown:
            raise ValueError(f"initial names unknown node types {sorted(unknown)}; "
                             f"known: {sorted(self.node_types)}")
        self.head_type = NodeType.coerce(head) if head is not None else NodeType(
            num_cpus=2, object_store_memory=150 * 2**20)
        self.connect = connect
        self.system_config = {**FAST_HEALTH_CHECKS, **(system_config or {})}
        self.namespace = namespace
        self.log_to_driver = log_to_driver
        self.include_dashboard = include_dashboard
        self.temp_dir = temp_dir
        self._own_temp_dir = ""
        self._cluster: Any = None
        self._nodes: list[NodeHandle] = []
        self.head: NodeHandle | None = None

    @classmethod
    def from_ladder(cls, ladder: Ladder, *, nodes_per_rung: int = 1, num_cpus: float = 1,
                    **kwargs: Any) -> LocalCluster:
        """One node type per compute rung (named after it); CPU-only rungs use the head.

        Example:
            >>> cluster = LocalCluster.from_ladder(load_ladder("gpu.yaml"))  # doctest: +SKIP
        """
        types = {}
        for rung in ladder.rungs:
            t = node_type_for_rung(rung, num_cpus=num_cpus)
            if t is not None:
                types[rung.name] = t
        kwargs.setdefault("initial", dict.fromkeys(types, nodes_per_rung))
        return cls(types, **kwargs)

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The GCS address (``ray.init(address=...)``)."""
        if self._cluster is None:
            raise RuntimeError("LocalCluster is not started")
        return self._cluster.address

    def start(self) -> LocalCluster:
        """Start the head and the initial nodes; connect the driver if asked.

        A start that Ray gives up on (see :data:`~ray_ladder.cluster.local_processes.
        START_ATTEMPTS`) is stopped and tried again on a fresh port."""
        for name, value in RAY_ENV_DEFAULTS.items():
            os.environ.setdefault(name, value)
        return start_with_retries(self._start_once, "the local cluster")

    def _start_once(self) -> LocalCluster:
        from ray.cluster_utils import Cluster

        head = self.head_type
        port = self._pin_address()
        ray_private.ensure_default_address_dir()
        if self.include_dashboard and self.temp_dir is None:
            self.temp_dir = self._own_temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
        try:
            self._cluster = Cluster(
                initialize_head=True, connect=False,
                head_node_args={
                    "num_cpus": head.num_cpus,
                    "num_gpus": head.num_gpus,
                    "resources": dict(head.resources),
                    "labels": {NODE_TYPE_LABEL: HEAD_TYPE, **head.labels},
                    "object_store_memory": head.object_store_memory,
                    "include_dashboard": self.include_dashboard,
                    # The agent's port too: its default (52365) is taken by any other Ray
                    # cluster on the machine, and the Jobs API then has no agent to run on.
                    **({"dashboard_host": "127.0.0.1", "dashboard_port": free_port(),
                        "dashboard_agent_listen_port": free_port()}
                       if self.include_dashboard else {}),
                    "_system_config": self.system_config,
                    "gcs_server_port": port,
                    **({"temp_dir": self.temp_dir} if self.temp_dir else {}),
                },
            )
            node = self._cluster.head_node
            self.head = NodeHandle(HEAD_TYPE, node.node_id, node)
            if self.temp_dir:  # Cluster wrote its address to /tmp/ray's file only
                ray_private.write_current_cluster(self.address, self.temp_dir)
            for name, count in self.initial.items():
                for _ in range(count):
                    self._add_node_once(name, wait=False)
            self._cluster.wait_for_nodes()
            if self.connect:
                import ray

                ray.init(address=self.address, namespace=self.namespace,
                         logging_level=logging.WARNING,
                         log_to_driver=self.log_to_driver)
        except BaseException:
            self.shutdown()
            self._unpin_address()
            raise
        return self

    def shutdown(self) -> None:
        """Disconnect the driver (if this cluster connected it) and stop every node."""
        if self._cluster is None:
            return
        import ray

        if self.connect and ray.is_initialized():
            ray.shutdown()
        self._cluster.shutdown()
        self._cluster = None
        self._unpin_address()
        if self._own_temp_dir:
            shutil.rmtree(self._own_temp_dir, ignore_errors=True)
            self.temp_dir, self._own_temp_dir = None, ""
        for handle in self._nodes:
            handle.alive = False
        self._nodes.clear()

    def _pin_address(self) -> int:
        """Choose the head's GCS port and set ``RAY_ADDRESS`` to it before any process
        starts: every process of the cluster inherits it, so Ray code that looks for "the"
        cluster (``address="auto"``: Train's placement-group cleaner, job drivers, the CLI)
        finds this one even when another Ray cluster runs on the machine. Restored at
        shutdown."""
        from ray.util import get_node_ip_address

        port = free_port()
        self._previous_address = os.environ.get("RAY_ADDRESS")
        os.environ["RAY_ADDRESS"] = f"{get_node_ip_address()}:{port}"
        return port

    def _unpin_address(self) -> None:
        previous = getattr(self, "_previous_address", None)
        if previous is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = previous

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --- nodes -------------------------------------------------------------------------

    def add_node(self, type: str, *, wait: bool = True) -> NodeHandle:
        """Start one node of ``type`` (capacity returning). Main thread only (Ray's rule).

        Tried again, as :meth:`start` is, when Ray gives up on the node's start."""
        if type not in self.node_types:
            raise ValueError(f"unknown node type {type!r}; known: {sorted(self.node_types)}")
        return start_with_retries(lambda: self._add_node_once(type, wait=wait),
                                  f"a {type} node")

    def _add_node_once(self, type: str, *, wait: bool) -> NodeHandle:
        if self._cluster is None:
            raise RuntimeError("LocalCluster is not started")
        t = self.node_types[type]
        node = self._cluster.add_node(
            wait=wait,
            num_cpus=t.num_cpus,
            num_gpus=t.num_gpus,
            resources=dict(t.resources),
            labels={NODE_TYPE_LABEL: type, **t.labels},
            object_store_memory=t.object_store_memory,
            include_dashboard=False,
        )
        handle = NodeHandle(type, node.node_id, node)
        self._nodes.append(handle)
        return handle

    def remove_node(self, handle: NodeHandle, graceful: bool = False) -> None:
        """Stop a node; ``graceful=False`` SIGKILLs its processes (a preemption)."""
        if self._cluster is None:
            raise RuntimeError("LocalCluster is not started")
        if handle is self.head:
            raise ValueError("the head node cannot be removed (the driver is connected to it)")
        if not handle.alive:
            raise ValueError(f"node {handle.node_id[:8]} ({handle.type}) is already removed")
        if not graceful:
            sigkill_node(handle._node)
        self._cluster.remove_node(handle._node, allow_graceful=graceful)
        handle.alive = False
        self._nodes.remove(handle)

    def nodes(self, type: str | None = None) -> list[NodeHandle]:
        """Alive worker nodes started here, optionally of one type."""
        return [h for h in self._nodes if type is None or h.type == type]


def wait_until(condition: Any, timeout_s: float = 30.0, interval_s: float = 0.05,
               message: str = "") -> Any:
    """Poll ``condition()`` until it returns a truthy value; return that value.

    Raises ``TimeoutError`` (with ``message`` and the last exception, if any) after
    ``timeout_s``. Use it instead of sleeps in tests.

    Example:
        >>> wait_until(lambda: True)
        True
    """
    deadline = time.monotonic() + timeout_s
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as err:  # keep polling; report the last one on timeout
            last_error = err
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise TimeoutError(f"condition not met within {timeout_s}s: {message}{detail}")
        time.sleep(interval_s)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (for Serve's HTTP proxy in tests)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def open_loop(send: Any, rate: float, duration_s: float, workers: int = 64,
              until: Callable[[], bool] | None = None) -> list[Any]:
    """Call ``send(i)`` at ``rate`` a second for ``duration_s`` (or until ``until()``) on a
    clock of its own (open loop: a slow answer never delays the next call), ``workers`` at
    once at most; return the results in call order (load for tests and ``bench/``).

    Example:
        >>> open_loop(lambda i: i * i, rate=100, duration_s=0.05)
        [0, 1, 4, 9, 16]
    """
    calls = max(1, round(rate * duration_s))
    start = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        futures = []
        for i in range(calls):
            if until is not None and until():
                break
            ahead = start + i / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)  # pacing the load, not waiting for a condition
            futures.append(pool.submit(send, i))
        return [f.result() for f in futures]
