"""The cluster's event store: every part's transitions and alerts, bounded, in Ray's KV.

Layout (namespace ``ray_ladder`` of the GCS internal KV, which lives as long as the
cluster and is reachable without joining it):

* ``events/<writer>/<slot>``: one process's events, a ring of ``CHUNKS_PER_WRITER`` chunks
  of up to ``CHUNK_EVENTS`` events each (JSON). A writer is one process (a router replica,
  an orchestrator, a Tune driver, a hook actor), so no two processes write one key.
* ``status/<part>/<id>``: the latest status entry of one ladder in use (see
  :mod:`ray_ladder.cluster.board`); ``ladders/<name>``: a ladder's rungs, best first.

Bounds: ``CHUNK_EVENTS * CHUNKS_PER_WRITER`` events per writer, the newest ``MAX_WRITERS``
writers, none older than ``RETENTION_S``; a new writer prunes the rest when it starts.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

logger = logging.getLogger(__name__)

KV_NAMESPACE = "ray_ladder"
EVENTS_PREFIX = "events/"
STATUS_PREFIX = "status/"
LADDERS_PREFIX = "ladders/"
CHUNK_EVENTS = 64
CHUNKS_PER_WRITER = 8
MAX_WRITERS = 64
RETENTION_S = 7 * 86400.0
#: A status entry not refreshed for this long is deleted by the next writer that starts.
STATUS_RETENTION_S = 3600.0
TIMEOUT_S = 5.0
#: How long the writer thread gathers events before one write (a fall emits a few at once).
FLUSH_DELAY_S = 0.05


class Kv(Protocol):
    """The four KV operations the store needs (Ray's GCS, or a dict in tests)."""

    def keys(self, prefix: str) -> list[str]: ...
    def get_many(self, keys: list[str]) -> dict[str, bytes]: ...
    def put(self, key: str, value: bytes) -> None: ...
    def delete(self, key: str) -> None: ...


class MemoryKv:
    """A dict as the store's KV (tests, and the pure parts' examples).

    Example:
        >>> kv = MemoryKv(); kv.put("a", b"1"); kv.get_many(kv.keys(""))
        {'a': b'1'}
    """

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def keys(self, prefix: str) -> list[str]:
        return [k for k in self.data if k.startswith(prefix)]

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        return {k: self.data[k] for k in keys if k in self.data}

    def put(self, key: str, value: bytes) -> None:
        self.data[key] = value

    def delete(self, key: str) -> None:
        self.data.pop(key, None)


class GcsKv:
    """The store's KV on a GCS client (this process's own, or a bare one for the CLI).

    Args:
        client: A ``ray._raylet.GcsClient`` (see :mod:`ray_ladder.cluster.ray_private`).
        timeout_s: Per-call timeout.
    """

    def __init__(self, client: Any, timeout_s: float = TIMEOUT_S) -> None:
        self.client = client
        self.timeout_s = timeout_s

    def keys(self, prefix: str) -> list[str]:
        from ray_ladder.cluster import ray_private

        return ray_private.gcs_kv_keys(self.client, prefix, KV_NAMESPACE, self.timeout_s)

    def get_many(self, keys: list[str]) -> dict[str, bytes]:
        from ray_ladder.cluster import ray_private

        return ray_private.gcs_kv_multi_get(self.client, keys, KV_NAMESPACE, self.timeout_s)

    def put(self, key: str, value: bytes) -> None:
        from ray_ladder.cluster import ray_private

        ray_private.gcs_kv_put(self.client, key, value, KV_NAMESPACE, self.timeout_s)

    def delete(self, key: str) -> None:
        from ray_ladder.cluster import ray_private

        ray_private.gcs_kv_del(self.client, key, KV_NAMESPACE, self.timeout_s)


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


class EventRing:
    """One writer's events as a ring of chunks (pure: what to write, not how).

    Example:
        >>> ring = EventRing("w1", chunk_events=2, chunks=2)
        >>> for i in range(5):
        ...     _ = ring.add({"wall": float(i)})  # the event, with its id
        >>> sorted(ring.dirty())  # chunk 2 (slot 0) holds event 4; slot 1 holds 2 and 3
        ['events/w1/00', 'events/w1/01']
    """

    def __init__(self, writer: str, *, chunk_events: int = CHUNK_EVENTS,
                 chunks: int = CHUNKS_PER_WRITER) -> None:
        self.writer = writer
        self.chunk_events = chunk_events
        self.chunks = chunks
        self.seq = 0  # events added so far (ids)
        self.chunk = 0  # number of the chunk being filled
        self.events: list[dict[str, Any]] = []
        self._dirty: dict[str, dict[str, Any]] = {}

    def key(self, chunk: int) -> str:
        return f"{EVENTS_PREFIX}{self.writer}/{chunk % self.chunks:02d}"

    def add(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """Add one event (gets an ``id``); returns it as stored."""
        stored = {"id": f"{self.writer}:{self.seq}", **event}
        self.seq += 1
        if len(self.events) >= self.chunk_events:
            self.chunk += 1
            self.events = []
        self.events.append(stored)
        self._dirty[self.key(self.chunk)] = {
            "writer": self.writer, "chunk": self.chunk, "updated": stored.get("wall"),
            "events": list(self.events)}
        return stored

    def dirty(self) -> dict[str, dict[str, Any]]:
        """Chunks changed since the last call (key -> payload); clears the list."""
        out, self._dirty = self._dirty, {}
        return out


class StoreWriter:
    """This process's writer: events and status entries go to the KV from a daemon thread.

    Callers never wait on the GCS (the router's event loop, an orchestrator's): they
    append to memory and the thread writes, about ``FLUSH_DELAY_S`` later. A failed write
    is retried with the next one; status entries keep only their latest value.

    Args:
        kv: Returns the KV to write to, or None when this process cannot reach one now.
        writer_id: This writer's name in keys (default: host, pid and a random suffix).

    Example:
        >>> kv = MemoryKv(); w = StoreWriter(lambda: kv, start=False)
        >>> _ = w.add_event({"wall": 1.0, "ladder": "l", "kind": "transition"})
        >>> w.flush()  # False: the KV was unreachable, the events wait
        True
        >>> [e["ladder"] for e in read_events(kv)]
        ['l']
    """

    def __init__(self, kv: Callable[[], Kv | None], writer_id: str | None = None, *,
                 start: bool = True) -> None:
        self._kv = kv
        self.writer_id = writer_id or (
            f"{socket.gethostname()[:24]}-{os.getpid()}-{uuid.uuid4().hex[:6]}")
        self._ring = EventRing(self.writer_id)
        self._entries: dict[str, bytes] = {}
        self._pending: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pruned = False
        self.errors = 0
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._run, name="ladder-event-store",
                                            daemon=True)
            self._thread.start()

    def add_event(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """Queue one event (a JSON-ready dict with ``wall``); returns it with its ``id``."""
        with self._lock:
            stored = self._ring.add(event)
            self._pending.update(self._ring.dirty())
        self._wake.set()
        return stored

    def publish(self, key: str, entry: Mapping[str, Any]) -> None:
        """Queue ``entry`` under ``key`` (the latest value wins)."""
        with self._lock:
            self._entries[key] = json.dumps(entry).encode()
        self._wake.set()

    def flush(self) -> bool:
        """Write what is queued now; False when the KV was not reachable (kept for later)."""
        kv = self._kv()
        if kv is None:
            return False
        if not self._pruned:
            self._pruned = True
            try:
                prune(kv, time.time(), keep_writer=self.writer_id)
            except Exception:  # pruning is housekeeping; the writes matter
                logger.debug("event store prune failed", exc_info=True)
        with self._lock:
            chunks, self._pending = self._pending, {}
            entries, self._entries = self._entries, {}
        try:
            for key, payload in chunks.items():
                kv.put(key, json.dumps(payload).encode())
            for key, value in entries.items():
                kv.put(key, value)
        except Exception:
            self.errors += 1
            logger.debug("event store write failed", exc_info=True)
            with self._lock:  # keep them, newer versions first
                self._pending = {**chunks, **self._pending}
                self._entries = {**entries, **self._entries}
            return False
        return True

    def _run(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(FLUSH_DELAY_S)  # gather the burst a fall emits into one write
            self._wake.clear()
            if not self.flush():
                time.sleep(1.0)  # GCS unreachable (restarting, shutting down): back off
                if self._pending or self._entries:
                    self._wake.set()


def read_events(kv: Kv, *, ladder: str | None = None, since: float | None = None
                ) -> list[dict[str, Any]]:
    """Every stored event (optionally of one ladder, at or after wall time ``since``),
    oldest first. An event stored before causes were data gets ``cause: "other"`` (its
    reason sentence is never parsed for one).

    Example:
        >>> read_events(MemoryKv())
        []
    """
    out = []
    for payload in (_loads(v) for v in kv.get_many(kv.keys(EVENTS_PREFIX)).values()):
        if not isinstance(payload, dict):
            continue
        for event in payload.get("events") or []:
            if ladder is not None and event.get("ladder") != ladder:
                continue
            if since is not None and float(event.get("wall") or 0.0) < since:
                continue
            event.setdefault("cause", "other")
            out.append(event)
    out.sort(key=lambda e: (float(e.get("wall") or 0.0), str(e.get("id"))))
    return out


def read_entries(kv: Kv, prefix: str) -> dict[str, dict[str, Any]]:
    """The JSON entries under ``prefix`` (status entries, ladders), by key."""
    got = kv.get_many(kv.keys(prefix))
    return {k: v for k, v in ((k, _loads(raw)) for k, raw in got.items())
            if isinstance(v, dict)}


def prune(kv: Kv, now: float, *, keep_writer: str | None = None,
          max_writers: int = MAX_WRITERS, retention_s: float = RETENTION_S) -> int:
    """Delete the chunks of writers beyond the newest ``max_writers`` or older than
    ``retention_s``, and status entries older than ``STATUS_RETENTION_S``; returns how
    many keys went.

    Example:
        >>> prune(MemoryKv(), now=0.0)
        0
    """
    newest: dict[str, float] = {}
    keys_of: dict[str, list[str]] = {}
    for key, payload in read_entries(kv, EVENTS_PREFIX).items():
        writer = key[len(EVENTS_PREFIX):].rsplit("/", 1)[0]
        keys_of.setdefault(writer, []).append(key)
        newest[writer] = max(newest.get(writer, 0.0), float(payload.get("updated") or 0.0))
    ranked = sorted(newest, key=lambda w: newest[w], reverse=True)
    doomed = [w for i, w in enumerate(ranked) if w != keep_writer
              and (i >= max_writers or now - newest[w] > retention_s)]
    gone = [k for w in doomed for k in keys_of[w]]
    for key, entry in read_entries(kv, STATUS_PREFIX).items():
        if now - float(entry.get("time") or 0.0) > STATUS_RETENTION_S:
            gone.append(key)
    for key in gone:
        kv.delete(key)
    return len(gone)


_writer: StoreWriter | None = None
_writer_lock = threading.Lock()


def _process_kv() -> Kv | None:
    from ray_ladder.cluster import ray_private

    client = ray_private.process_gcs_client()
    return None if client is None else GcsKv(client)


def process_writer() -> StoreWriter | None:
    """This process's writer, started on first use; None where Ray is not initialized
    (unit tests, the simulator, the CLI), so recording costs nothing there."""
    global _writer
    if "ray" not in sys.modules:  # never import Ray just to find out
        return None
    import ray

    if not ray.is_initialized():
        return None
    if _writer is None:
        with _writer_lock:
            if _writer is None:
                _writer = StoreWriter(_process_kv)
                atexit.register(_writer.flush)
    return _writer


def record(event: Mapping[str, Any]) -> None:
    """Queue ``event`` in this process's writer, if it has one (see :func:`process_writer`)."""
    writer = process_writer()
    if writer is not None:
        writer.add_event(event)


def publish(key: str, entry: Mapping[str, Any]) -> None:
    """Queue a status entry in this process's writer, if it has one."""
    writer = process_writer()
    if writer is not None:
        writer.publish(key, entry)
