"""Live capacity view: which rungs are obtainable now, from Ray's GCS, cached."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ray_ladder.placement import NodeState, RungCapacity, ladder_capacity
from ray_ladder.spec import Ladder


@dataclass(frozen=True)
class CapacitySnapshot:
    """Capacity of every rung at one moment.

    Attributes:
        time: ``time.monotonic()`` of the refresh.
        rungs: Rung name -> :class:`RungCapacity`.
        obtainable: Rung name -> bool, ready for :meth:`Selector.observe`.
    """

    time: float
    rungs: Mapping[str, RungCapacity]
    obtainable: Mapping[str, bool]


def ray_node_states() -> list[NodeState]:
    """Read every node from Ray's GCS: liveness, labels, total and available resources.

    Source of truth: ``ray.nodes()`` (alive flag, labels, totals) and the GCS's
    per-node available resources. Needs ``ray.init()`` first.
    """
    import ray
    from ray._private import state

    available = state.available_resources_per_node()
    out = []
    for node in ray.nodes():
        node_id = node["NodeID"]
        out.append(NodeState(
            node_id=node_id,
            alive=bool(node.get("Alive")),
            total=node.get("Resources") or {},
            available=available.get(node_id, {}),
            labels=node.get("Labels") or {},
        ))
    return out


class CapacityView:
    """Cached view of which rungs of a ladder are obtainable now.

    A read returns the cached snapshot while it is younger than ``refresh_interval_s``
    and refreshes it (one GCS round trip) otherwise, so a hot path never pays a GCS
    call per request. With :meth:`start`, a daemon thread refreshes in the background
    and reads never block.

    A compute rung is obtainable when an alive node can host one placement of it
    (``total > 0``); ``require_available=True`` demands a free one right now.

    Args:
        ladder: The ladder.
        refresh_interval_s: Snapshot lifetime (default: ``ladder.policy.probe_interval_s``).
        require_available: Count busy rungs as unobtainable.
        source: Returns node states (default: Ray's GCS via :func:`ray_node_states`).
        clock: Monotonic clock (injectable for tests).

    Example:
        >>> view = CapacityView(ladder, refresh_interval_s=0.5)  # doctest: +SKIP
        >>> selector.observe(view.obtainable(), now=time.monotonic())  # doctest: +SKIP
    """

    def __init__(
        self,
        ladder: Ladder,
        refresh_interval_s: float | None = None,
        *,
        require_available: bool = False,
        source: Callable[[], list[NodeState]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ladder = ladder
        self.refresh_interval_s = (ladder.policy.probe_interval_s if refresh_interval_s is None
                                   else refresh_interval_s)
        self.require_available = require_available
        self._source = source or ray_node_states
        self._clock = clock
        self._snapshot: CapacitySnapshot | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> CapacitySnapshot:
        """Read Ray's state now and replace the cached snapshot."""
        rungs = ladder_capacity(self.ladder, self._source(),
                                require_available=self.require_available)
        snap = CapacitySnapshot(self._clock(), rungs,
                                {name: c.obtainable for name, c in rungs.items()})
        self._snapshot = snap
        return snap

    def snapshot(self) -> CapacitySnapshot:
        """The cached snapshot, refreshed first when older than the interval."""
        snap = self._snapshot
        if snap is not None and (self._thread is not None
                                 or self._clock() - snap.time < self.refresh_interval_s):
            return snap
        with self._lock:
            snap = self._snapshot
            if snap is None or self._clock() - snap.time >= self.refresh_interval_s:
                snap = self.refresh()
            return snap

    def obtainable(self) -> Mapping[str, bool]:
        """Rung name -> obtainable, ready for ``Selector.observe``."""
        return self.snapshot().obtainable

    def __getitem__(self, rung: str) -> RungCapacity:
        return self.snapshot().rungs[rung]

    def start(self) -> CapacityView:
        """Refresh in a daemon thread every ``refresh_interval_s``; reads never block."""
        if self._thread is None:
            self.refresh()
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="ladder-capacity",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the background refresher."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_interval_s):
            try:
                self.refresh()
            except Exception:  # a failed refresh keeps the last snapshot
                continue
