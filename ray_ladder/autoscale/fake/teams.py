"""The teams cloud story on Ray's autoscaler with the fake provider (issue 28), shared by
``tests/fleet/test_teams_cloud_ray.py`` (which asserts on it) and ``bench/teams.py``
(which prints its figures).

Two on-prem h100 units (static, on the head) are team a's quota; team b has none and a
cloud a100 rung (a fake autoscaler node type). b borrows both h100 units; a's demand
arrives, the arbiter sends b a notice, b's ladder falls and the hook asks for the cloud
rung, only then; a's demand goes, b is granted h100 again, its ladder climbs home and the
cloud node is given back (Ray's idle timeout). The arbiter is the caller's (this layer
does not import ``ray_ladder.fleet``): pass ``start_arbiter``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ray_ladder.autoscale.teams import CloudSample, cloud_figures
from ray_ladder.core.fleet import Fleet
from ray_ladder.core.spec import Ladder

LADDER = Ladder.from_yaml("""
name: b-work
policy: {promotion_hysteresis: 2, probe_interval_s: 0.25}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100-cloud, resources: {ladder/a100: 1}, quality: 0.9}
  - {name: cpu, num_cpus: 0, resources: {ladder/cpu: 1}, quality: 0.5}
""")
FLEET = Fleet.from_yaml("""
fleet: cloud-it
control_period_s: 0.25
rungs:
  h100: {resources: {ladder/h100: 1}}
  a100-cloud: {resources: {ladder/a100: 1}, cloud: true, cost_per_hour: 4}
teams:
  - {name: a, quota: {h100: 2}, cohort: onprem}
  - {name: b, cohort: onprem, reclaim_grace_s: 3}
""")
OPTIONS = {"node_types": {"h100": [], "a100-cloud": ["a100"]}, "interval_s": 0.25,
           "drain_s": 1.0, "provision_timeout_s": 120.0}
CLOUD = {"ladder/a100": 1.0}
UNITS = 2


@contextmanager
def cloud_cluster() -> Iterator[Any]:
    """The story's FakeAutoscalingCluster (h100 units and a CPU rung on the head, the a100
    node type bought on demand, a short idle timeout) with this process's driver."""
    import ray

    from ray_ladder.autoscale.fake.cluster import FakeAutoscalingCluster, fake_worker_type

    c = FakeAutoscalingCluster(
        {"a100": fake_worker_type({"ladder/a100": 1}, labels={"ladder.node-type": "a100"})},
        head_resources={"CPU": 2, "ladder/h100": UNITS, "ladder/cpu": 8},
        idle_timeout_minutes=0.1)
    c.start()
    try:
        ray.init(address=c.address, logging_level=logging.WARNING, log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def hook_state(hook: Any) -> dict[str, Any]:
    """The hook actor's latest state."""
    import ray

    return ray.get(hook.state.remote(), timeout=30)  # type: ignore[no-any-return]


class Consumer:
    """Sends one small task every 0.2 s to the rung the hook says is serving.

    Each task returns ``(rung, ladder.node-type label of the node it ran on)``; ``sent``
    keeps ``(time, rung, ref)`` and ``requests`` the hook's node request at each send.
    """

    def __init__(self, hook: Any, ladder: Ladder) -> None:
        import ray

        @ray.remote(max_retries=0)
        def where(rung: str) -> tuple[str, str]:
            labels: dict[str, Any] = dict(ray.get_runtime_context().get_node_labels())
            return rung, str(labels.get("ladder.node-type", ""))

        self.hook, self.ladder, self.where = hook, ladder, where
        self.sent: list[tuple[float, str | None, Any]] = []
        self.requests: list[list[dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            state = hook_state(self.hook)
            if not state:  # the hook has not made its first step yet
                continue
            rung = state["serving"]
            self.requests.append(state["request"])
            ref = None if rung is None else \
                self.where.options(**self.ladder.rung(rung).placement()).remote(rung)
            self.sent.append((time.time(), rung, ref))

    def __enter__(self) -> Consumer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def results(self) -> list[tuple[str, str]]:
        """Every task's answer.

        Raises:
            RuntimeError: a task was not sent (the hook named no rung to send it to).
        """
        import ray

        if any(ref is None for _, _, ref in self.sent):
            raise RuntimeError("no rung to send work to")
        return ray.get([ref for _, _, ref in self.sent], timeout=120)  # type: ignore[no-any-return]


class Timeline:
    """Reports both teams' demand and samples the hook, the cloud nodes and the ground
    truth (b may borrow every h100 unit a does not want), every 0.2 s."""

    def __init__(self, hook: Any) -> None:
        self.hook = hook
        self.demand = {"a": 0, "b": UNITS}
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def set_a(self, units: int) -> float:
        """a's demand from now on; returns when (the ground truth changes here)."""
        from ray_ladder.cluster.grants import report_demand

        self.demand["a"] = units
        report_demand("a", "story", {"h100": units})
        return time.time()

    def _run(self) -> None:
        import ray

        from ray_ladder.cluster.grants import report_demand

        while not self._stop.wait(0.2):
            for team, units in self.demand.items():
                report_demand(team, "story", {"h100": units})
            state = hook_state(self.hook)
            cloud = sum(1 for n in ray.nodes() if n["Alive"]
                        and n["Labels"].get("ladder.node-type") == "a100")
            self.samples.append({"time": time.time(), "serving": state.get("serving"),
                                 "asked": CLOUD in (state.get("request") or []),
                                 "cloud_nodes": cloud, "free": self.demand["a"] < UNITS})

    def __enter__(self) -> Timeline:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def latest(self) -> dict[str, Any]:
        """The newest sample (empty before the first)."""
        return self.samples[-1] if self.samples else {}


@dataclass(frozen=True)
class CloudRun:
    """What one story recorded (wall-clock times).

    Attributes:
        samples: The timeline's samples (``time``, ``serving``, ``asked``,
            ``cloud_nodes``, ``free``).
        reclaim_at: When a's demand arrived.
        home_at: When a's demand went.
        answers: ``(rung, node type)`` of each of b's tasks.
        launches: The fake provider's ``launching`` events.
    """

    samples: list[dict[str, Any]]
    reclaim_at: float
    home_at: float
    answers: list[tuple[str, str]]
    launches: list[dict[str, Any]]

    def figures(self) -> dict[str, float]:
        """:func:`ray_ladder.autoscale.teams.cloud_figures` over the timeline."""
        return cloud_figures([CloudSample(s["time"], s["cloud_nodes"], s["free"])
                              for s in self.samples])


def _until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the cloud story waited {timeout_s:.0f}s: {what}")
        time.sleep(0.05)


def run_cloud_story(cluster: Any, start_arbiter: Callable[[Fleet], Any]) -> CloudRun:
    """Play the story on ``cluster`` (:func:`cloud_cluster`, a driver connected) with
    the arbiter ``start_arbiter(FLEET)`` starts; b's work is a :class:`Consumer`."""
    from ray_ladder.autoscale import start_hook, stop_hook
    from ray_ladder.cluster.grants import GrantReader, report_demand

    start_arbiter(FLEET)
    report_demand("b", "story", {"h100": UNITS})
    grants = GrantReader()
    _until(lambda: (grants.get("b") or {}).get("rungs", {}).get("h100", {}).get("held")
           == UNITS, 60, "b never borrowed a's idle h100 units")
    hook = start_hook(LADDER, OPTIONS, team="b", detached=False)
    try:
        with Timeline(hook) as line, Consumer(hook, LADDER) as work:
            _until(lambda: line.latest().get("serving") == "h100", 60,
                   "b's ladder never served from its borrowed h100")
            settle = time.time() + 2.0  # b runs on borrowed units a while: no cloud ask
            _until(lambda: line.latest().get("time", 0) > settle, 60, "samples")
            reclaim_at = line.set_a(UNITS)
            _until(lambda: line.latest().get("serving") == "a100-cloud", 90,
                   "b never moved to the cloud rung after the reclaim")
            home_at = line.set_a(0)
            _until(lambda: line.latest().get("serving") == "h100", 60,
                   "b never climbed home to h100")
            _until(lambda: line.latest().get("cloud_nodes") == 0
                   and not line.latest()["asked"], 90, "the cloud node was not given back")
        answers = work.results()
    finally:
        stop_hook(LADDER.name)
    launches = [e for e in cluster.events() if e["event"] == "launching"]
    return CloudRun(line.samples, reclaim_at, home_at, answers, launches)
