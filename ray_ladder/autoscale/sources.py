"""What the hook reads from Ray (nodes, the autoscaler's failed launches) and writes (requests)."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ray_ladder.autoscale.plan import LaunchFailure
from ray_ladder.cluster import ray_private, roles
from ray_ladder.cluster.capacity import NodeSource, ray_node_states
from ray_ladder.core.placement import ladder_capacity
from ray_ladder.core.spec import Ladder

logger = logging.getLogger(__name__)

KV_NAMESPACE = "ray_ladder"
REQUEST_PREFIX = "autoscale/request/"
STATE_PREFIX = "autoscale/state/"
#: A request entry not refreshed for this long belongs to a hook that is gone.
REQUEST_STALE_S = 120.0


HEAD_RESOURCE = "node:__internal_head__"


def present_placements(ladder: Ladder, node_source: NodeSource = ray_node_states,
                       ) -> tuple[dict[str, int], set[str]]:
    """Rung -> placements the alive nodes can host, and the rungs the head node hosts.

    The head never leaves the cluster, so a rung it can host needs no node request (and
    asking for a generic shape such as ``{"CPU": 1}`` could make the autoscaler launch an
    unrelated node type). ``node_source``: the hook's (Ray's GCS, or the fleet's shared
    node table). Needs ``ray.init``.
    """
    nodes = node_source()
    heads = [n for n in nodes if n.alive and HEAD_RESOURCE in n.total]
    on_head = {name for name, cap in ladder_capacity(ladder, heads).items() if cap.total > 0}
    return ({name: cap.total for name, cap in ladder_capacity(ladder, nodes).items()},
            on_head)


def spill_wanted(entries: Iterable[Mapping[str, Any]], ladder: str, now: float,
                 fresh_s: float = roles.SPILL_FRESH_S) -> dict[str, int]:
    """Rung -> placements ``ladder``'s Serve routers want for their sustained spill (the
    replicas each router published, summed over its apps; stale entries left out).

    Example:
        >>> spill_wanted([{"time": 95.0, "ladder": "gpu", "rungs": {"h100": 3}},
        ...               {"time": 99.0, "ladder": "gpu", "rungs": {"h100": 1}},
        ...               {"time": 10.0, "ladder": "gpu", "rungs": {"h100": 5}},
        ...               {"time": 99.0, "ladder": "other", "rungs": {"h100": 7}}],
        ...              "gpu", now=100.0)
        {'h100': 4}
    """
    out: dict[str, int] = {}
    for entry in entries:
        at, rungs = entry.get("time"), entry.get("rungs")
        if entry.get("ladder") != ladder or not isinstance(at, (int, float)) \
                or not isinstance(rungs, Mapping) or not -5.0 <= now - at < fresh_s:
            continue
        for rung, n in rungs.items():
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                out[rung] = out.get(rung, 0) + n
    return out


def read_spill(ladder: str, now: float) -> dict[str, int]:
    """:func:`spill_wanted` from the routers' entries in Ray's KV (``serve/spill/<app>``)."""
    entries = []
    for key in ray_private.kv_list(roles.SPILL_PREFIX, namespace=roles.KV_NAMESPACE):
        raw = ray_private.kv_get(key.decode(), namespace=roles.KV_NAMESPACE)
        with contextlib.suppress(ValueError):
            entry = json.loads(raw) if raw else None
            if isinstance(entry, dict):
                entries.append(entry)
    return spill_wanted(entries, ladder, now)


def autoscaler_v2_enabled() -> bool:
    """Whether the cluster runs Ray's autoscaler v2."""
    return ray_private.is_autoscaler_v2()


def launch_failures_v1(report: Mapping[str, Any]) -> list[LaunchFailure]:
    """Failed launches in a v1 monitor status (``DEBUG_AUTOSCALING_STATUS``).

    Source of truth: the autoscaler's ``NodeProviderAvailabilityTracker``, published as
    ``autoscaler_report.node_availability_summary`` (latest attempt per node type).

    Example:
        >>> launch_failures_v1({"autoscaler_report": {"node_availability_summary": {
        ...     "node_availabilities": {"h100": {"node_type": "h100", "is_available": False,
        ...     "last_checked_timestamp": 12, "unavailable_node_information": {
        ...     "category": "InsufficientInstanceCapacity", "description": "none"}}}}}})[0].time
        12
    """
    summary = ((report.get("autoscaler_report") or {}).get("node_availability_summary")
               or {})
    out = []
    for node_type, record in (summary.get("node_availabilities") or {}).items():
        if record.get("is_available", True):
            continue
        info = record.get("unavailable_node_information") or {}
        out.append(LaunchFailure(node_type, record.get("last_checked_timestamp", 0),
                                 info.get("category", ""), info.get("description", "")))
    return out


def read_launch_failures() -> list[LaunchFailure]:
    """The launch failures Ray's autoscaler (v1 or v2) records now. Needs ray.init."""
    import ray

    if autoscaler_v2_enabled():
        status = ray_private.autoscaler_v2_status(ray.get_runtime_context().gcs_address)
        return [LaunchFailure(r.ray_node_type_name, float(r.failed_ts_s or r.request_ts_s),
                              "LaunchFailed", r.details or "")
                for r in status.failed_launches]
    raw = ray_private.autoscaling_status_v1()
    if not raw:
        return []
    try:
        return launch_failures_v1(json.loads(raw))
    except (ValueError, AttributeError):
        logger.warning("unreadable autoscaler status; no launch failures read")
        return []


def _kv_put(key: str, value: Any) -> None:
    ray_private.kv_put(key, json.dumps(value), namespace=KV_NAMESPACE)


def _kv_get(key: str) -> Any:
    raw = ray_private.kv_get(key, namespace=KV_NAMESPACE)
    return None if raw is None else json.loads(raw)


def save_state(ladder: str, state: Mapping[str, Any]) -> None:
    """Publish a hook's state (the CLI and a restarted hook read it)."""
    _kv_put(STATE_PREFIX + ladder, state)


def load_state(ladder: str) -> dict[str, Any] | None:
    """The last state a hook published for ``ladder``, or None."""
    return _kv_get(STATE_PREFIX + ladder)


def save_roles(ladder: str, state: Mapping[str, Any]) -> None:
    """Publish the per-rung roles of a hook state, the small entry consumers poll.

    The Serve rung deployments' autoscaling policy and every capacity view read it (see
    :mod:`ray_ladder.cluster.roles`); the full state stays for the CLI and restarts.
    """
    _kv_put(roles.ROLES_PREFIX + ladder, roles.summarize(state))


def _union(now: float, own_key: str | None = None) -> tuple[list[dict], list[dict]]:
    bundles: list[dict] = []
    selectors: list[dict] = []
    for key in sorted(ray_private.kv_list(REQUEST_PREFIX, namespace=KV_NAMESPACE)):
        name = key.decode() if isinstance(key, bytes) else key
        entry = _kv_get(name)
        if not entry or (name != own_key
                         and now - float(entry.get("time", 0)) > REQUEST_STALE_S):
            continue
        bundles.extend(dict(b) for b in entry["bundles"])
        selectors.extend(dict(s) for s in entry["label_selectors"])
    return bundles, selectors


def _send(bundles: list[dict], selectors: list[dict]) -> None:
    from ray.autoscaler.sdk import request_resources

    if any(selectors):  # label demand: autoscaler v2 launches by label, v1 ignores it
        request_resources(bundles=bundles, bundle_label_selectors=selectors)
    else:
        request_resources(bundles=bundles)


def submit_request(ladder: str, bundles: Sequence[Mapping[str, float]],
                   label_selectors: Sequence[Mapping[str, str]], now: float) -> list[dict]:
    """Record this ladder's node request and hand the union of all ladders' to Ray.

    ``request_resources`` holds one cluster-wide request (each call replaces it), so every
    hook stores its own part in Ray's KV and sends the union: ladders never erase each
    other's requests. Returns the bundles sent.
    """
    key = REQUEST_PREFIX + ladder
    _kv_put(key, {"time": now, "bundles": [dict(b) for b in bundles],
                  "label_selectors": [dict(s) for s in label_selectors]})
    all_bundles, all_selectors = _union(now, own_key=key)
    _send(all_bundles, all_selectors)
    return all_bundles


def withdraw_request(ladder: str) -> None:
    """Drop this ladder's part of the node request (other ladders' parts stay)."""
    ray_private.kv_del(REQUEST_PREFIX + ladder, namespace=KV_NAMESPACE)
    _send(*_union(time.time()))
