"""What the hook's tests on the fake provider share: the cluster, and a consumer of the hook
(``Consumer`` and ``hook_state`` live in ``ray_ladder.autoscale.fake.teams``, which the
teams bench shares)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ray_ladder.autoscale.fake.teams import Consumer, hook_state

__all__ = ["Consumer", "alive_node_types", "fake_cluster", "hook_state"]


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


def alive_node_types() -> set[str]:
    """The ``ladder.node-type`` labels of the alive nodes."""
    import ray

    return {n["Labels"].get("ladder.node-type") for n in ray.nodes() if n["Alive"]}
