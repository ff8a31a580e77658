"""The LadderScheduler's bookkeeping: a capacity view per ladder, a state per trial."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ray_ladder.cluster.capacity import (
    CapacitySnapshot,
    CapacityView,
    NodeSource,
    ray_node_states,
    reads_ray,
    resolve_node_source,
)
from ray_ladder.cluster.fleet_teams import check_bound_team
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.placement import NodeState
from ray_ladder.core.selector import Selector
from ray_ladder.tune.history import RungSpan
from ray_ladder.tune.lifecycle import Phase
from ray_ladder.tune.trainable import LadderTrialSpec

logger = logging.getLogger("ray_ladder.tune.scheduler")


class View:
    """Capacity of one ladder, refreshed in a daemon thread so Tune's loop never waits.

    Keeps the node list each snapshot was computed from (to tell a dead node from a
    trial that failed on a healthy one). A run bound to a fleet team reads the team's
    view (its grants and reclaim notices: docs/teams.md). ``refresh()`` forces a read of
    the GCS itself when a decision needs the state of right now (after a failure); the
    background refresh reads through the fleet's shared node table while it is fresh
    (``node_source`` None: Ray's GCS, see ``cluster/node_table.py``).
    """

    def __init__(self, spec: LadderTrialSpec, node_source: NodeSource | None,
                 clock: Callable[[], float]) -> None:
        self.interval_s = spec.ladder.policy.probe_interval_s
        self._node_source = resolve_node_source(node_source, "LadderScheduler",
                                                max_age_s=self.interval_s)
        self._direct = ray_node_states if node_source is None else node_source
        self._now = True  # the next read is of the GCS itself (a forced refresh)
        self._clock = clock
        self._read_nodes: list[NodeState] = []
        self.view = CapacityView(spec.trial_ladder, require_available=True, node_source=self._read,
                                 team=check_bound_team(spec.team),  # bound before ray.init()?
                                 part=spec.part)
        self.state: tuple[CapacitySnapshot, list[NodeState], float] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _read(self) -> list[NodeState]:
        self._read_nodes = list((self._direct if self._now else self._node_source)())
        return self._read_nodes

    def refresh(self, now: bool = True) -> CapacitySnapshot:
        """Read capacity: of right now (``now``), or through the shared table."""
        with self._lock:
            self._now = now
            snap = self.view.refresh()
            self.state = (snap, self._read_nodes, self._clock())
            return snap

    def current(self) -> tuple[CapacitySnapshot, list[NodeState], float]:
        """The latest snapshot (read now if there is none), its nodes and its time."""
        if self._thread is None:
            self.refresh()
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name="ladder-tune-capacity")
            self._thread.start()
        state = self.state
        assert state is not None
        return state

    @property
    def snap(self) -> CapacitySnapshot:
        return self.current()[0]

    @property
    def at(self) -> float:
        return self.current()[2]

    def node_alive(self, node_id: str | None) -> bool:
        return any(n.node_id == node_id and n.alive for n in self.current()[1])

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        import ray

        while not self._stop.wait(self.interval_s):
            if reads_ray(self._node_source) and not ray.is_initialized():
                return  # the run is over and Ray shut down
            try:
                self.refresh(now=False)
            except Exception as err:  # keep the last snapshot; Ray may be shutting down
                logger.debug("ladder capacity refresh failed: %s", err)


@dataclass
class TrialState:
    """What the scheduler knows of one ladder trial (its lifecycle: :attr:`phase`)."""

    trial_id: str
    spec: LadderTrialSpec
    constraints: Constraints | None
    selector: Selector
    placed: str | None = None  # rung of the trial's current resources
    node_id: str | None = None  # node of its last actor
    spans: list[RungSpan] = field(default_factory=list)
    phase: Phase = "placed"  # see ray_ladder.tune.lifecycle (its rules)
    released: tuple[str, str] | None = None  # (rung, node) it just left; counts as free
    observed_at: float = float("-inf")  # capacity snapshot its selector saw last
    free: list[str] = field(default_factory=list)  # rungs free at the last placement
