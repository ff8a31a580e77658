"""@ladder_task's data path on a real LocalCluster: large answers and arguments never pass
through the orchestrator, survive their rung's node once answered, and runs queued behind
the lane's own attempts keep the pending rules."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import ray

from ray_ladder import Ladder, ladder_task, last_rung
from ray_ladder.task import call_info
from ray_ladder.testing import wait_until

pytestmark = pytest.mark.ray

MiB = 2**20
LADDER = Ladder.from_dict({
    "name": "data",
    "policy": {"probe_interval_s": 0.2, "pending_timeout_s": 20, "promotion_hysteresis": 1},
    "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}},
        {"name": "a100", "resources": {"ladder/a100": 1}},
        {"name": "cpu", "num_cpus": 1, "label_selector": {"ladder.node-type": "head"}},
    ],
})


@ladder_task(LADDER)
def big(i, *, rung):
    """8 MiB made on the rung."""
    return np.full(MiB, i, dtype=np.float64)


@ladder_task(LADDER)
def first_of(array, *, rung):
    """A small answer about a large argument."""
    return float(array[0]), rung.name


@ladder_task(LADDER)
def nap(i, seconds, *, rung):
    time.sleep(seconds)
    return i, rung.name


def status():
    from ray_ladder.task.orchestrator.registry import get_orchestrator

    return ray.get(get_orchestrator().status.remote())


@pytest.fixture(scope="module")
def cluster(local_cluster):
    nodes = {name: {"num_cpus": 1, "resources": {f"ladder/{name}": 1},
                    "labels": {"ladder.rung": name}, "object_store_memory": 300 * MiB}
             for name in ("h100", "a100")}
    c = local_cluster(nodes)
    assert ray.get(nap.remote(0, 0))[1] == "h100"
    return c


def test_a_large_answer_stays_where_it_was_made(cluster):
    from ray.experimental import get_object_locations

    refs = [big.remote(i) for i in range(6)]
    values = ray.get(refs, timeout=120)
    assert [float(v[0]) for v in values] == [float(i) for i in range(6)]
    assert all(v.shape == (MiB,) for v in values)
    assert {last_rung(r) for r in refs} == {"h100"}
    # The caller's object holds a reference, not the 8 MiB: no copy through the orchestrator.
    sizes = [loc["object_size"] for loc in get_object_locations(refs).values()]
    assert sizes and max(sizes) < 64 * 1024, sizes
    task = next(t for t in status()["tasks"].values() if t["name"].endswith("big"))
    assert task["large_answers"]  # and large answers are never batched

    @ray.remote(num_cpus=0)
    def total(array):
        return float(array.sum())

    assert ray.get(total.remote(refs[2])) == 2.0 * MiB  # passed on like any ref

    @ray.remote(num_cpus=0)
    class Reader:
        async def read(self, ref_list):
            return float((await ref_list[0])[0])

    assert ray.get(Reader.remote().read.remote([refs[3]]), timeout=60) == 3.0

    async def awaited():
        return float((await big.remote(7))[0])

    assert asyncio.run(asyncio.wait_for(awaited(), 60)) == 7.0


def _store_used_mib() -> int:
    """Bytes in every live node's object store, in MiB (the raylets' own figure)."""
    from ray._private.internal_api import node_stats

    return sum(node_stats(n["NodeManagerAddress"], n["NodeManagerPort"],
                          include_memory_info=False).store_stats.object_store_bytes_used
               for n in ray.nodes() if n["Alive"]) // MiB


def test_a_dropped_large_answer_leaves_every_object_store(cluster):
    # The orchestrator holds each answer's ref until the caller's ref goes: a cycle of
    # its own (a call and its attempt) kept 2 copies of every answer (the rung node's and
    # the driver node's) until its cyclic collector ran, which an idle actor never does.
    wait_until(lambda: _store_used_mib() < 8, 30, 0.2, "the stores empty before the calls")
    values = ray.get([big.remote(i) for i in range(10)], timeout=120)
    assert [float(v[0]) for v in values] == [float(i) for i in range(10)]
    assert _store_used_mib() >= 80  # 10 x 8 MiB, once on h100 at least
    del values  # the driver drops them: every copy goes
    wait_until(lambda: _store_used_mib() < 8, 30, 0.2, "the answers gone from every store")


def test_size_hint_sizes_buffers_strings_and_containers_without_serializing():
    from ray_ladder.task.transfer import LARGE_BYTES, size_hint

    assert size_hint(np.zeros(MiB)) == 8 * MiB
    assert size_hint({"pixels": np.zeros((512, 512, 3), dtype=np.uint8)}) > LARGE_BYTES
    assert size_hint([np.zeros(1000)] * 100) > LARGE_BYTES  # 100 x 8 KB
    assert size_hint("x" * 200_000) > LARGE_BYTES and size_hint(b"x" * 10) == 10
    assert size_hint([1, 2, 3]) < LARGE_BYTES and size_hint({"a": "b"}) < LARGE_BYTES
    assert size_hint(object()) == 0  # unknown: goes by value, as it always did


def test_large_arguments_go_by_reference(cluster):
    from ray_ladder.task.transfer import by_reference

    arrays = [np.full(MiB, i, dtype=np.float64) for i in range(5)]
    args, kwargs, any_ref = by_reference((arrays[0], 3, "small", b"x" * 10), {"k": arrays[1]})
    assert any_ref and isinstance(args[0], ray.ObjectRef) and isinstance(kwargs["k"], ray.ObjectRef)
    assert args[1:] == (3, "small", b"x" * 10)
    assert by_reference((1, [1, 2], {"a": "b"}), {}) == ((1, [1, 2], {"a": "b"}), {}, False)
    before = status()["stats"]["attempts"]
    refs = [first_of.remote(a) for a in arrays]
    assert ray.get(refs, timeout=120) == [(float(i), "h100") for i in range(5)]
    assert status()["stats"]["attempts"] - before == 5  # each ran alone (a ref argument)
    assert ray.get(first_of.remote(array=arrays[4]))[0] == 4.0  # keyword arguments too


def test_an_answered_large_value_outlives_its_rung(cluster):
    ref = big.remote(9)
    ray.wait([ref], timeout=60, fetch_local=False)  # answered; the driver has not read it
    cluster.remove_node(cluster.nodes("h100")[0])  # SIGKILL the node that made it
    try:
        assert float(ray.get(ref, timeout=60)[0]) == 9.0  # a copy is on the driver's node
    finally:
        cluster.add_node("h100")
        wait_until(lambda: ray.get(nap.remote(0, 0))[1] == "h100", timeout_s=60,
                   message="h100 back in use")


def test_calls_queued_behind_the_lanes_own_attempts_still_fall(cluster):
    # One h100 slot: one call runs, the next waits in Ray behind it (pipelined), the
    # third in the lane's queue. Both waiting calls fall after pending_timeout_s, as the
    # lane's own backlog always did. Which of the three gets the slot is the order the
    # orchestrator (an async actor) took them in: not always submission order (a
    # fresh-clone CI run gave call 0 two attempts ahead). 4 s: the first call must start
    # within it on a loaded 2-core CI machine (at 2 s it once did not); the calls outlast
    # it by 2 s.
    task = nap.options(pending_timeout_s=4)
    assert ray.get(task.remote(0, 0.05))[1] == "h100"  # warm; these calls are long
    # The first call gets the free slot, not a place behind the warm-up's attempt (the
    # lane counts an attempt until it has read its end).
    wait_until(lambda: all(t["in_flight"].get("h100", 0) == 0 for t in status()["tasks"].values()
                           if t["name"].endswith("nap")), 30, 0.05, "the warm-up attempt done")
    refs = [task.remote(i, 6.0) for i in range(3)]
    answers = ray.get(refs, timeout=120)
    infos = [call_info(r)["attempts"] for r in refs]
    assert [i for i, _ in answers] == [0, 1, 2], infos
    assert [rung for _, rung in answers].count("h100") <= 1, infos  # one slot, 6 s calls
    fell = [a[0]["reason"] for a in infos
            if a and a[0]["rung"] == "h100" and "not scheduled within 4s" in a[0]["reason"]]
    assert len(fell) >= 2, infos  # the two behind the slot's holder, whichever it was
    assert any("attempt(s) ahead" in reason for reason in fell), infos
