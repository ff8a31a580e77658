"""What a restarted orchestrator needs to carry on: the task specs, kept outside it.

The orchestrator is an ordinary Ray actor with ``max_restarts`` and
``max_task_retries`` (docs/reliability.md): when it dies, Ray restarts it and
resubmits every call still in flight, whose arguments the driver (the owner of those
actor tasks) still holds. What the fresh process lacks is the registration of each
task's option set, which the driver sent once. The driver therefore also writes each
pickled :class:`~ray_ladder.task.options.TaskSpec` to Ray's internal KV under its job id,
and a restarted orchestrator reads it back when a call names a key it does not know.

Entries of a job are deleted when its driver exits normally (``atexit``), and entries
of dead jobs (a driver that was killed) are collected when the next driver starts an
orchestrator.
"""

from __future__ import annotations

import atexit
import logging

from ray_ladder.cluster import ray_private

logger = logging.getLogger(__name__)

KV_NAMESPACE = "ray_ladder"
PREFIX = "task/spec/"
#: Seconds a GCS round trip of the garbage collection may take.
GC_TIMEOUT_S = 5.0
#: Calls one driver's call survives while in flight: each orchestrator death re-runs it
#: once (Ray's own default for task retries is 3 as well).
CALL_RETRIES = 3
#: Orchestrator restarts (-1: as often as it dies, so new calls always find one).
RESTARTS = -1

_cleanup_registered: set[str] = set()


def spec_key(job_id: str, key: str) -> str:
    """The KV key of one registered option set of job ``job_id``.

    Example:
        >>> spec_key("01000000", "fam:abc")
        'task/spec/01000000/fam:abc'
    """
    return f"{PREFIX}{job_id}/{key}"


def save_spec(job_id: str, key: str, blob: bytes) -> None:
    """Keep ``blob`` (a pickled TaskSpec) for a restarted orchestrator of ``job_id``."""
    ray_private.kv_put(spec_key(job_id, key), blob, namespace=KV_NAMESPACE)
    if job_id not in _cleanup_registered:
        _cleanup_registered.add(job_id)
        atexit.register(drop_job, job_id)


def load_spec(job_id: str, key: str) -> bytes | None:
    """The pickled spec the driver of ``job_id`` registered under ``key``, or ``None``."""
    try:
        return ray_private.kv_get(spec_key(job_id, key), namespace=KV_NAMESPACE)
    except Exception:  # the GCS is unreachable: the call waits for a registration
        logger.warning("cannot read the spec of ladder task %s", key, exc_info=True)
        return None


def drop_job(job_id: str) -> None:
    """Delete every spec of ``job_id`` (its driver is leaving)."""
    try:
        if not ray_private.kv_initialized():
            return
        for raw in ray_private.kv_list(f"{PREFIX}{job_id}/", namespace=KV_NAMESPACE):
            ray_private.kv_del(raw.decode(), namespace=KV_NAMESPACE)
    except Exception:  # Ray already shut down: the next driver's collect() removes them
        logger.debug("cannot drop the task specs of job %s", job_id, exc_info=True)


def collect_dead_jobs() -> int:
    """Delete the specs of jobs whose driver is gone; returns how many keys went."""
    try:
        client = ray_private.process_gcs_client()
        if client is None:
            return 0
        keys = ray_private.gcs_kv_keys(client, PREFIX, KV_NAMESPACE, GC_TIMEOUT_S)
        if not keys:
            return 0
        live = ray_private.gcs_live_jobs(client, GC_TIMEOUT_S)
        dead = [k for k in keys if k[len(PREFIX):].split("/", 1)[0] not in live]
        for k in dead:
            ray_private.gcs_kv_del(client, k, KV_NAMESPACE, GC_TIMEOUT_S)
        return len(dead)
    except Exception:  # best effort: leftovers are a few small keys
        logger.debug("cannot collect task specs of dead jobs", exc_info=True)
        return 0
