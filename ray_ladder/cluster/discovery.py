"""Every ladder in use on a running cluster, found read-only from outside it.

A bare GCS client (the way ``ray status`` reads a cluster: no driver, no job, no actor)
reads the status entries every part publishes (:mod:`ray_ladder.cluster.board`), the
autoscaler hooks' roles, the node and job tables and the event store.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from ray_ladder.cluster import event_store, roles
from ray_ladder.core.placement import NodeState, rung_capacity
from ray_ladder.core.spec import Ladder

#: Give up on an address whose GCS has not answered within this long.
CONNECT_TIMEOUT_S = 6.0
#: An entry not refreshed within max(STALE_STEPS x its interval, STALE_MIN_S) is gone.
STALE_STEPS = 5
STALE_MIN_S = 15.0
LAST_EVENTS = 5
TIMEOUT_S = 5.0


class ClusterUnreachable(ConnectionError):
    """No Ray cluster answered at the address (the message says what was tried)."""


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ClusterUnreachable(f"{address!r} is not host:port")
    return host.strip("[]"), int(port)


def connect(address: str = "auto", timeout_s: float = CONNECT_TIMEOUT_S) -> ClusterReader:
    """A read-only reader of the cluster at ``address`` (``auto``: ``RAY_ADDRESS`` or the
    last ``ray start`` here); raises :class:`ClusterUnreachable` within about
    ``timeout_s``.

    Example:
        >>> reader = connect("127.0.0.1:6379")  # doctest: +SKIP
    """
    from ray_ladder.cluster import ray_private

    try:
        resolved = ray_private.resolve_gcs_address(address)
    except (ConnectionError, ValueError) as err:
        raise ClusterUnreachable(f"no Ray cluster found for address {address!r}: {err}"
                                 ) from None
    # Ray resolves 127.0.0.1 to this node's IP; knock where the user pointed first.
    shown = address if address != "auto" and ":" in address else resolved
    if shown != resolved:
        shown = f"{shown} ({resolved})"
    for target in dict.fromkeys([address if ":" in address else resolved, resolved]):
        host, port = _split(target)
        try:  # a closed port answers at once; the GCS client alone would retry for 40 s
            socket.create_connection((host, port), timeout=min(2.0, timeout_s)).close()
            break
        except OSError as err:
            why = err.strerror or str(err)
    else:
        raise ClusterUnreachable(f"nothing answers at {shown}: {why}")
    box: dict[str, Any] = {}

    def make() -> None:
        try:
            client = ray_private.gcs_client(resolved)
            ray_private.gcs_nodes(client, TIMEOUT_S)  # proves it is a GCS
            box["client"] = client
        except BaseException as err:  # reported below
            box["error"] = err

    thread = threading.Thread(target=make, name="ladder-gcs-connect", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if "client" not in box:
        reason = box.get("error") or f"no answer within {timeout_s:g} s"
        raise ClusterUnreachable(f"no Ray GCS at {shown}: {reason}")
    return ClusterReader(resolved, box["client"])


class ClusterReader:
    """Reads one cluster through a GCS client; never writes.

    Args:
        address: The GCS address (for messages).
        client: A GCS client (``None`` with ``kv`` for tests).
        kv: The KV to read (default: the client's).
    """

    def __init__(self, address: str, client: Any, kv: event_store.Kv | None = None) -> None:
        self.address = address
        self.client = client
        self.kv = kv or event_store.GcsKv(client)

    def nodes(self) -> list[dict[str, Any]]:
        """The node table (see ``ray_private.gcs_nodes``)."""
        from ray_ladder.cluster import ray_private

        return ray_private.gcs_nodes(self.client, TIMEOUT_S)

    def live_jobs(self) -> set[str]:
        """Ids of the drivers alive now."""
        from ray_ladder.cluster import ray_private

        return ray_private.gcs_live_jobs(self.client, TIMEOUT_S)

    def events(self, ladder: str | None = None, since: float | None = None
               ) -> list[dict[str, Any]]:
        """Stored events, oldest first (see :func:`event_store.read_events`)."""
        return event_store.read_events(self.kv, ladder=ladder, since=since)

    def ladders(self) -> dict[str, dict[str, Any]]:
        """Known ladders by name: rungs best first (and ``spec`` where published)."""
        entries = event_store.read_entries(self.kv, event_store.LADDERS_PREFIX)
        return {str(e.get("ladder")): e for e in entries.values()}

    def hook_roles(self) -> dict[str, dict[str, Any]]:
        """The roles entries of the autoscaler hooks, by ladder."""
        got = event_store.read_entries(self.kv, roles.ROLES_PREFIX)
        return {k[len(roles.ROLES_PREFIX):]: v for k, v in got.items()}

    def teams(self) -> list[dict[str, Any]]:
        """The fleet arbiter's grants entries, one per team (``[]`` without a fleet)."""
        from ray_ladder.cluster import grants

        got = event_store.read_entries(self.kv, grants.GRANTS_PREFIX)
        return [got[k] for k in sorted(got)]

    def report(self, now: float | None = None) -> dict[str, Any]:
        """Every ladder in use (see :func:`build_report`), and the fleet's teams."""
        out = build_report(
            entries=event_store.read_entries(self.kv, event_store.STATUS_PREFIX).values(),
            hooks=self.hook_roles(), nodes=self.nodes(), live_jobs=self.live_jobs(),
            events=self.events(), ladders=self.ladders(),
            now=time.time() if now is None else now, address=self.address)
        out["teams"] = self.teams()
        return out


def is_live(entry: Mapping[str, Any], live_jobs: set[str], now: float) -> bool:
    """Whether a status entry belongs to a part still running: refreshed recently, and,
    for a driver's parts (tasks, Tune), its driver is alive.

    Example:
        >>> is_live({"part": "serve", "time": 100.0, "interval_s": 1.0}, set(), now=110.0)
        True
        >>> is_live({"part": "task", "time": 100.0, "job_id": "01"}, {"02"}, now=101.0)
        False
    """
    limit = max(STALE_STEPS * float(entry.get("interval_s") or 1.0), STALE_MIN_S)
    if now - float(entry.get("time") or 0.0) > limit:
        return False
    return not (entry.get("part") in ("task", "tune") and entry.get("job_id") not in live_jobs)


def nodes_per_rung(ladder: Ladder, nodes: list[dict[str, Any]]) -> dict[str, int]:
    """Rung -> alive nodes that can host one placement of it (compute rungs only)."""
    states = [NodeState(n["node_id"], bool(n["alive"]), n["total"], n["total"], n["labels"])
              for n in nodes if n["alive"]]
    return {r.name: sum(1 for s in states if rung_capacity(r, [s]).total > 0)
            for r in ladder.rungs if r.is_compute}


def _matches(event: Mapping[str, Any], entry: Mapping[str, Any]) -> bool:
    if event.get("ladder") != entry.get("ladder") or event.get("part") != entry.get("part"):
        return False
    return entry.get("part") == "tune" or event.get("source") == entry.get("source")


def _user(entry: Mapping[str, Any], nodes: list[dict[str, Any]],
          hook: Mapping[str, Any] | None, events: list[dict[str, Any]],
          now: float) -> dict[str, Any]:
    spec = entry.get("spec")
    counts: dict[str, int] = {}
    if spec:
        counts = nodes_per_rung(Ladder.model_validate(spec), nodes)
    hook_rungs = (hook or {}).get("rungs") or {}
    rungs = [dict(r) for r in entry.get("rungs") or []]
    total = sum(int(r.get("served_1m") or 0) for r in rungs) + sum(
        int(v) for v in (entry.get("unanswered_1m") or {}).values())
    for r in rungs:
        r["nodes"] = counts.get(r["name"])
        r["share_1m"] = round(int(r.get("served_1m") or 0) / total, 4) if total else None
        r["hook_role"] = (hook_rungs.get(r["name"]) or {}).get("role") if hook else None
    differ = [c for c in entry.get("by_constraints") or []
              if c.get("current") != entry.get("current")]
    last = [e for e in events if e.get("kind") in ("transition", "alert")
            and _matches(e, entry)][-LAST_EVENTS:]
    out = {k: entry.get(k) for k in ("part", "source", "ladder", "job_id", "pid", "node_id",
                                       "current", "current_index", "degraded_s",
                                       "alert_fired", "max_degraded_seconds")}
    out.update(age_s=round(now - float(entry.get("time") or now), 3), rungs=rungs,
               by_constraints=differ, unanswered_1m=entry.get("unanswered_1m") or {},
               last_transitions=last)
    for key in ("trials", "slow"):
        if entry.get(key):
            out[key] = entry[key]
    return out


def _hook(name: str, roles_entry: Mapping[str, Any], nodes: list[dict[str, Any]],
          ladders: Mapping[str, Any], events: list[dict[str, Any]],
          now: float) -> dict[str, Any]:
    meta = ladders.get(name) or {}
    counts = nodes_per_rung(Ladder.model_validate(meta["spec"]), nodes) \
        if meta.get("spec") else {}
    serving = roles_entry.get("serving")
    order = list(meta.get("rungs") or (roles_entry.get("rungs") or {}))
    hook_events = [e for e in events if e.get("ladder") == name and e.get("part") == "hook"]
    return {
        "part": "hook", "source": "hook", "ladder": name, "current": serving,
        "current_index": order.index(serving) if serving in order else -1,
        "age_s": round(now - float(roles_entry.get("time") or now), 3),
        "rungs": [{"name": rung, "role": r.get("role"), "status": r.get("status"),
                   "nodes": counts.get(rung)}
                  for rung, r in (roles_entry.get("rungs") or {}).items()],
        "last_transitions": hook_events[-LAST_EVENTS:],
    }


def build_report(*, entries: Any, hooks: Mapping[str, Mapping[str, Any]],
                 nodes: list[dict[str, Any]], live_jobs: set[str],
                 events: list[dict[str, Any]], ladders: Mapping[str, Any], now: float,
                 address: str = "") -> dict[str, Any]:
    """The status report (pure): live users, one per (part, ladder, source), newest
    entry first; running hooks; how many entries were left out as gone.

    Example:
        >>> build_report(entries=[], hooks={}, nodes=[], live_jobs=set(), events=[],
        ...              ladders={}, now=0.0)["ladders"]
        []
    """
    newest: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    gone = 0
    for entry in entries:
        if not is_live(entry, live_jobs, now):
            gone += 1
            continue
        key = (entry.get("part"), entry.get("ladder"), entry.get("source"))
        if key not in newest or float(entry.get("time") or 0) > float(newest[key]["time"]):
            newest[key] = entry
    current_hooks = {name: r for name, r in hooks.items() if roles.is_current(r, now)}
    users = [_user(e, nodes, current_hooks.get(str(e.get("ladder"))), events, now)
             for _, e in sorted(newest.items(), key=lambda kv: tuple(map(str, kv[0])))]
    users += [_hook(name, r, nodes, ladders, events, now)
              for name, r in sorted(current_hooks.items())]
    return {"address": address, "time": now, "ladders": users, "gone_entries": gone,
            "alive_nodes": sum(1 for n in nodes if n["alive"])}
