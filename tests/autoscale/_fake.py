"""What the hook's tests on the fake provider share: the cluster, and a consumer of the hook."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ray_ladder import Ladder


@contextmanager
def fake_cluster(node_types: Iterable[str], schedule: str) -> Iterator[Any]:
    """A FakeAutoscalingCluster (one node type per name, ``ladder/<name>: 1``) with a driver.

    The cpu rung's ``ladder/cpu`` lives on the head only: with a bare ``num_cpus``, a
    backlog of cpu-rung tasks is CPU demand the autoscaler would meet by launching any node
    type with a CPU, and a fallback would not be the hook's doing.
    """
    import ray

    from ray_ladder.autoscale.fake.cluster import FakeAutoscalingCluster, fake_worker_type

    c = FakeAutoscalingCluster(
        {name: fake_worker_type({f"ladder/{name}": 1}, labels={"ladder.node-type": name})
         for name in node_types},
        head_resources={"CPU": 1, "ladder/cpu": 8}, schedule=schedule,
        idle_timeout_minutes=0.1)
    c.start()
    try:
        ray.init(address=c.address, logging_level="WARNING", log_to_driver=False)
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
            return rung, ray.get_runtime_context().get_node_labels().get("ladder.node-type", "")

        self.hook, self.ladder, self.where = hook, ladder, where
        self.sent: list[tuple[float, str | None, object]] = []
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
        """Every task's answer (raises if one was lost)."""
        import ray

        assert all(ref is not None for _, _, ref in self.sent), "no rung to send work to"
        return ray.get([ref for _, _, ref in self.sent], timeout=120)  # type: ignore[no-any-return]


def alive_node_types() -> set[str]:
    """The ``ladder.node-type`` labels of the alive nodes."""
    import ray

    return {n["Labels"].get("ladder.node-type") for n in ray.nodes() if n["Alive"]}
