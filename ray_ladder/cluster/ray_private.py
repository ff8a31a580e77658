"""The one door to Ray's private APIs: every use of a Ray internal in ray_ladder goes here.

Each function names the private thing it wraps. ``tests/cluster/test_ray_private.py`` pins
every one of them to the Ray series in ``pyproject.toml``, so a Ray upgrade is a change to
this file (and that test) only. Imports happen inside the functions: importing this module
costs nothing and never imports Ray.

Ray Train v2's internals have their own door beside this one,
:mod:`ray_ladder.cluster.ray_private_train` (same rules, same pin test).

One exception, by design: ``ray_ladder/serve/scaling.py`` is cloudpickled by value into the
Serve controller, which may not have ray_ladder installed, so it reads the KV directly (the
same ``_internal_kv_get`` as :func:`kv_get`; the pin test covers it too).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

#: The Ray series these internals were read from (``ray>=2.60,<2.61`` in pyproject.toml).
RAY_SERIES = "2.60"

#: Everything this module reaches, as ``module: attribute`` (the pin test resolves each).
PRIVATE_USES: tuple[tuple[str, str], ...] = (
    ("ray._private.state", "available_resources_per_node"),
    ("ray._private.worker", "global_worker"),
    ("ray._private.worker", "print_to_stdstream"),
    ("ray._private.ray_constants", "PROCESS_TYPE_RAYLET"),
    ("ray._private.ray_constants", "DEBUG_AUTOSCALING_STATUS"),
    ("ray._private.services", "get_node_ip_address"),
    ("ray._common.ray_option_utils", "task_options"),
    ("ray.experimental.internal_kv", "_internal_kv_get"),
    ("ray.experimental.internal_kv", "_internal_kv_put"),
    ("ray.experimental.internal_kv", "_internal_kv_del"),
    ("ray.experimental.internal_kv", "_internal_kv_list"),
    ("ray.experimental.internal_kv", "_internal_kv_initialized"),
    ("ray.autoscaler._private.util", "validate_config"),
    ("ray.autoscaler._private.fake_multi_node.node_provider", "FakeMultiNodeProvider"),
    ("ray.autoscaler.v2.utils", "is_autoscaler_v2"),
    ("ray.autoscaler.v2.sdk", "get_cluster_status"),
    ("ray.serve.handle", "DeploymentResponse._fetch_future_result_async"),
    ("ray.tune.execution.tune_controller", "TuneController._set_trial_status"),
    ("ray._raylet", "GcsClient"),
    ("ray._private.services", "canonicalize_bootstrap_address_or_die"),
    ("ray.experimental.internal_kv", "internal_kv_get_gcs_client"),
)


# --- GCS and the core worker -------------------------------------------------------------

def available_resources_per_node() -> dict[str, dict[str, float]]:
    """Per-node available resources from the GCS (``ray._private.state``)."""
    from ray._private import state

    return dict(state.available_resources_per_node())


def core_worker_identity() -> int:
    """Identity of this process's core worker: a new ``ray.init`` gives a new one."""
    from ray._private.worker import global_worker

    return id(getattr(global_worker, "core_worker", None))


def node_ip_address() -> str:
    """This machine's IP as Ray sees it (``ray._private.services``)."""
    import ray._private.services as services

    return str(services.get_node_ip_address())


def raylet_processes(node: Any) -> list[Any]:
    """The raylet process infos of a ``ray._private.node.Node`` (for a whole-node kill)."""
    from ray._private import ray_constants

    return list(node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET, []))


def redirect_worker_output(sink: Any) -> Any:
    """Send the log lines Ray prints for workers to ``sink``; returns the original printer."""
    import ray._private.worker as ray_worker

    original = ray_worker.print_to_stdstream
    ray_worker.print_to_stdstream = sink
    return original


def restore_worker_output(original: Any) -> None:
    """Undo :func:`redirect_worker_output`."""
    import ray._private.worker as ray_worker

    ray_worker.print_to_stdstream = original


def task_option_table() -> dict[str, Any]:
    """Ray's own table of task options and their validators."""
    try:
        from ray._common.ray_option_utils import task_options
    except ImportError:  # older layout
        from ray._private.ray_option_utils import task_options  # type: ignore[no-redef]
    return dict(task_options)


# --- the internal KV ---------------------------------------------------------------------

def kv_initialized() -> bool:
    """Whether this process can reach the GCS's internal KV."""
    from ray.experimental.internal_kv import _internal_kv_initialized

    return bool(_internal_kv_initialized())


def kv_get(key: str, namespace: str | None = None) -> bytes | None:
    """One value of the internal KV, or ``None``."""
    from ray.experimental.internal_kv import _internal_kv_get

    value = _internal_kv_get(key, namespace=namespace)
    return None if value is None else bytes(value)


def kv_put(key: str, value: str | bytes, namespace: str | None = None) -> None:
    """Write (overwrite) one value of the internal KV."""
    from ray.experimental.internal_kv import _internal_kv_put

    _internal_kv_put(key, value, overwrite=True, namespace=namespace)


def kv_del(key: str, namespace: str | None = None) -> None:
    """Delete one key of the internal KV."""
    from ray.experimental.internal_kv import _internal_kv_del

    _internal_kv_del(key, namespace=namespace)


def kv_list(prefix: str, namespace: str | None = None) -> list[bytes]:
    """Keys of the internal KV that start with ``prefix``."""
    from ray.experimental.internal_kv import _internal_kv_list

    return [bytes(k) for k in _internal_kv_list(prefix, namespace=namespace)]


def autoscaling_status_v1() -> bytes | None:
    """The v1 monitor's debug status (``DEBUG_AUTOSCALING_STATUS`` in the KV)."""
    from ray._private import ray_constants

    return kv_get(ray_constants.DEBUG_AUTOSCALING_STATUS)


# --- the autoscaler ----------------------------------------------------------------------

def is_autoscaler_v2() -> bool:
    """Whether the cluster runs Ray's autoscaler v2 (False when it cannot tell)."""
    try:
        from ray.autoscaler.v2.utils import is_autoscaler_v2 as v2

        return bool(v2())
    except Exception:  # older Ray or no GCS answer: v1
        return False


def autoscaler_v2_status(gcs_address: str) -> Any:
    """Autoscaler v2's cluster status (``failed_launches`` and friends)."""
    from ray.autoscaler.v2.sdk import get_cluster_status

    return get_cluster_status(gcs_address)


def validate_cluster_config(config: dict[str, Any]) -> None:
    """Ray's own ``ray up`` validator (``ray-schema.json``); raises jsonschema's error."""
    from ray.autoscaler._private.util import validate_config

    validate_config(config)


def fake_multinode_provider_class() -> type:
    """Ray's fake multi-node provider class (the base of the stock-out provider)."""
    from ray.autoscaler._private.fake_multi_node.node_provider import FakeMultiNodeProvider

    return FakeMultiNodeProvider  # type: ignore[no-any-return]


# --- Serve and Tune ----------------------------------------------------------------------

def replica_assigned(response: Any) -> Awaitable[Any]:
    """The first half of ``await response``: resolves once a replica took the request.

    ``DeploymentResponse._fetch_future_result_async`` lets the router time "taken by a
    replica" apart from "answered".
    """
    return response._fetch_future_result_async()  # type: ignore[no-any-return]


def serve_llm_tokenize_models() -> tuple[type, type]:
    """Ray Serve LLM's ``TokenizeChatRequest`` and ``TokenizeCompletionRequest`` (what
    ``LLMServer.tokenize`` takes; not re-exported by ``ray.serve.llm``)."""
    from ray.llm._internal.serve.core.configs.openai_api_models import (
        TokenizeChatRequest,
        TokenizeCompletionRequest,
    )

    return TokenizeChatRequest, TokenizeCompletionRequest


def set_trial_status(tune_controller: Any, trial: Any, status: str) -> None:
    """Set a trial's status the way Tune's controller does (``_set_trial_status``)."""
    tune_controller._set_trial_status(trial, status)


# --- a bare GCS client (operating a cluster without joining it) ---------------------------

def resolve_gcs_address(address: str) -> str:
    """``host:port`` of the GCS for ``address`` (``auto``: ``RAY_ADDRESS``, then the last
    ``ray start`` on this machine), the way ``ray status`` resolves it; raises
    ``ConnectionError`` when ``auto`` finds no cluster."""
    from ray._private.services import canonicalize_bootstrap_address_or_die

    return str(canonicalize_bootstrap_address_or_die(address))


def gcs_client(address: str) -> Any:
    """A GCS client of ``address`` that does not join the cluster (no driver, no job), as
    ``ray status`` makes one (``ray._raylet.GcsClient``). Blocks until the GCS answers."""
    from ray._raylet import GcsClient  # type: ignore[attr-defined]

    return GcsClient(address=address)


def process_gcs_client() -> Any | None:
    """This Ray process's own GCS client (None before ``ray.init`` or after shutdown)."""
    from ray.experimental.internal_kv import internal_kv_get_gcs_client

    return internal_kv_get_gcs_client()


def gcs_kv_keys(client: Any, prefix: str, namespace: str, timeout_s: float) -> list[str]:
    """Keys of the internal KV that start with ``prefix`` (one round trip)."""
    keys = client.internal_kv_keys(prefix.encode(), namespace.encode(), timeout=timeout_s)
    return [k.decode() if isinstance(k, bytes) else str(k) for k in keys]


def gcs_kv_multi_get(client: Any, keys: list[str], namespace: str,
                     timeout_s: float) -> dict[str, bytes]:
    """Values of ``keys`` (absent ones left out), in one round trip."""
    if not keys:
        return {}
    got = client.internal_kv_multi_get([k.encode() for k in keys], namespace=namespace.encode(),
                                       timeout=timeout_s)
    return {(k.decode() if isinstance(k, bytes) else str(k)): bytes(v)
            for k, v in got.items() if v is not None}


def gcs_kv_put(client: Any, key: str, value: bytes, namespace: str, timeout_s: float) -> None:
    """Write (overwrite) one value of the internal KV."""
    client.internal_kv_put(key.encode(), value, overwrite=True, namespace=namespace.encode(),
                           timeout=timeout_s)


def gcs_kv_del(client: Any, key: str, namespace: str, timeout_s: float) -> None:
    """Delete one key of the internal KV."""
    client.internal_kv_del(key.encode(), False, namespace=namespace.encode(), timeout=timeout_s)


def gcs_nodes(client: Any, timeout_s: float) -> list[dict[str, Any]]:
    """Every node the GCS knows: id, alive, labels, total resources, metrics address."""
    out = []
    for info in client.get_all_node_info(timeout=timeout_s).values():
        out.append({
            "node_id": info.node_id.hex(),
            "alive": info.state == 0,  # GcsNodeInfo.GcsNodeState.ALIVE
            "labels": dict(info.labels),
            "total": dict(info.resources_total),
            "is_head": bool(info.is_head_node),
            "metrics": f"{info.node_manager_address}:{info.metrics_export_port}",
            "session_dir": info.session_dir,
        })
    return out


def gcs_live_jobs(client: Any, timeout_s: float) -> set[str]:
    """Hex ids of the jobs (drivers) the GCS counts as alive."""
    jobs = client.get_all_job_info(skip_submission_job_info_field=True,
                                   skip_is_running_tasks_field=True, timeout=timeout_s)
    return {info.job_id.hex() for info in jobs.values() if not info.is_dead}


# --- drain notices (issue 15: a preemption notice is a node Ray drains) -------------------

PRIVATE_USES += (
    ("ray._private.state", "GlobalState.get_draining_nodes"),
    ("ray.core.generated.autoscaler_pb2", "DrainNodeReason"),
)


def draining_nodes() -> dict[str, float | None]:
    """Node id (hex) -> drain deadline (wall-clock seconds, ``None``: none given) of every
    node the GCS is draining.

    Source of truth: the GCS node manager's draining table, the one Ray's own Serve
    controller and Ray Data read (``ray._private.state.state.get_draining_nodes()``, a
    deadline of 0 ms meaning none). ``ray drain-node``, a SIGTERMed ``ray start --block``
    (a KubeRay pod; never the raylet itself) and autoscaler v2 (idle nodes) fill it. The
    drain reason is not in this table (nor in ``ray.nodes()``); a busy node is drained
    only for preemption, since Ray rejects an idle-termination drain of a busy node.
    """
    from ray._private.state import state

    return {node: (ms / 1000.0 if ms else None)
            for node, ms in state.get_draining_nodes().items()}


def drain_node(address: str, node_id: str, deadline_s: float | None,
               message: str = "spot reclaim") -> tuple[bool, str]:
    """Ask the GCS to drain ``node_id`` for preemption (what ``ray drain-node --reason
    DRAIN_NODE_REASON_PREEMPTION`` does); ``deadline_s`` from now (``None``: no deadline).
    Returns (accepted, rejection message)."""
    import time

    from ray._raylet import GcsClient  # type: ignore[attr-defined]
    from ray.core.generated.autoscaler_pb2 import DrainNodeReason  # type: ignore[attr-defined]

    deadline_ms = 0 if deadline_s is None else int((time.time() + deadline_s) * 1000)
    client = GcsClient(address=resolve_gcs_address(address))
    accepted, rejection = client.drain_node(
        node_id, DrainNodeReason.Value("DRAIN_NODE_REASON_PREEMPTION"), message, deadline_ms)
    return bool(accepted), str(rejection)


# --- objects: where a value is (the task ladder's data path) ------------------------------
PRIVATE_USES += (("ray._raylet", "CoreWorker.object_exists"),)


def object_exists(ref: Any, memory_store_only: bool = False) -> bool:
    """``CoreWorker.object_exists``: ``ref``'s value is in this process's memory store (a
    small value, or an error) or, unless ``memory_store_only``, this node's object store."""
    from ray._private.worker import global_worker

    return bool(global_worker.core_worker.object_exists(  # type: ignore[attr-defined]
        ref, memory_store_only=memory_store_only))


def write_current_cluster(address: str, temp_dir: str) -> None:
    """Record ``address`` as the cluster of ``temp_dir`` (its ``ray_current_cluster`` file,
    which ``ray start --head`` writes): a job's driver resolves "its" cluster from it, so
    two clusters on one machine, each with its own temp directory, each need theirs."""
    from ray._private.utils import write_ray_address

    write_ray_address(address, temp_dir)


def ensure_default_address_dir() -> None:
    """Create the folder of Ray's default ``ray_current_cluster`` file (``/tmp/ray``):
    ``ray.cluster_utils.Cluster`` writes its head's address there even for a cluster
    with its own temp directory, and fails on a machine where no Ray ran before."""
    import os

    from ray._private.utils import get_ray_address_file

    os.makedirs(os.path.dirname(get_ray_address_file(None)), exist_ok=True)
