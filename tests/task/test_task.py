"""@ladder_task on a real LocalCluster: every fallback trigger, constraints, climb back."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import sys
import threading
import time
from pathlib import Path

import pytest
import ray

from ray_ladder import Constraints, Ladder, LadderExhaustedError, ladder_task, last_rung
from ray_ladder.task import call_info
from ray_ladder.testing import LocalCluster, wait_until

pytestmark = pytest.mark.ray

LADDER = Ladder.from_dict({
    "name": "tasks",
    "policy": {"probe_interval_s": 0.2, "pending_timeout_s": 20, "promotion_hysteresis": 2},
    "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}, "quality": 1.0,
         "tags": {"jurisdiction": "eu"}, "params": {"model": "large"}},
        {"name": "a100", "resources": {"ladder/a100": 1}, "quality": 0.9,
         "tags": {"jurisdiction": "eu"}, "params": {"model": "medium"}},
        {"name": "cpu", "num_cpus": 1, "label_selector": {"ladder.node-type": "head"},
         "quality": 0.5, "tags": {"jurisdiction": "us"}, "params": {"model": "small"}},
    ],
})


@ladder_task(LADDER)
def where(x, *, rung):
    """Which rung ran it, and with which model."""
    return x, rung.name, rung.params["model"]


@ladder_task(LADDER)
def work(x, seconds=0.0, marker=None, fail_on=(), *, rung):
    """Sleep, touch a marker file when started, raise MemoryError on chosen rungs."""
    if marker:
        Path(marker).touch()
    if rung.name in fail_on:
        raise MemoryError(f"no room on {rung.name}")
    time.sleep(seconds)
    return x * 2, rung.name


@ray.remote(num_cpus=1)
def hold(ready: str, release: str) -> str:
    """Occupy a node's slot until the release file appears (the rung stays feasible)."""
    Path(ready).touch()
    deadline = time.monotonic() + 120
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "released"


@pytest.fixture(scope="module")
def cluster(local_cluster):
    nodes = {name: {"num_cpus": 1, "resources": {f"ladder/{name}": 1},
                    "labels": {"ladder.rung": name}} for name in ("h100", "a100")}
    c = local_cluster(nodes)
    # Warm one worker per rung so pending timeouts measure scheduling, not startup.
    assert {r[1] for r in ray.get([where.remote(0)])} == {"h100"}
    ray.get([where.options(constraints=Constraints(jurisdiction="us")).remote(0),
             hold.options(resources={"ladder/a100": 1}).remote("/dev/null", "/")])
    return c


def ensure_h100(cluster: LocalCluster) -> None:
    """Re-add a killed h100 node so later tests see the full cluster."""
    if not cluster.nodes("h100"):
        cluster.add_node("h100")
    wait_until(lambda: ray.get(where.remote(0))[1] == "h100", timeout_s=60,
               message="h100 back in use")


def test_remote_returns_a_real_object_ref(cluster):
    ref = where.remote(7)
    assert isinstance(ref, ray.ObjectRef)
    ready, _ = ray.wait([ref], timeout=60)
    assert ready == [ref]
    assert ray.get(ref) == (7, "h100", "large")
    assert last_rung(ref) == "h100"

    @ray.remote
    def consume(value):
        return value[0] + 1

    assert ray.get(consume.remote(ref)) == 8  # passed on like any ref
    assert ray.get(where.remote(ray.put(5)))[0] == 5  # ref arguments arrive as values


def test_direct_call_and_bad_arguments_raise_type_error(cluster):
    with pytest.raises(TypeError, match=r"where\.remote"):
        where(1)
    with pytest.raises(TypeError, match="rung"):
        where.remote(1, rung="h100")
    with pytest.raises(TypeError):
        where.remote()


def test_infeasible_rung_is_skipped_without_waiting(cluster):
    ladder = LADDER.model_copy(update={"rungs": [
        LADDER.rungs[0].model_copy(update={"name": "tpu", "resources": {"ladder/tpu": 1}}),
        *LADDER.rungs]})

    @ladder_task(ladder, pending_timeout_s=60)
    def f(*, rung):
        return rung.name

    start = time.monotonic()
    ref = f.remote()
    assert ray.get(ref) == "h100"
    assert time.monotonic() - start < 30  # far below the 60 s pending timeout
    assert call_info(ref)["attempts"] == []


def test_pending_rung_falls_after_timeout_then_climbs_back(cluster, tmp_path):
    ready, release = tmp_path / "ready", tmp_path / "release"
    blocker = hold.options(resources={"ladder/h100": 1}).remote(str(ready), str(release))
    wait_until(ready.exists, timeout_s=60, message="blocker holds h100")
    task = work.options(pending_timeout_s=2)
    try:
        start = time.monotonic()
        ref = task.remote(1)
        assert ray.get(ref, timeout=60) == (2, "a100")
        assert time.monotonic() - start >= 2
        attempts = call_info(ref)["attempts"]
        assert attempts[0]["rung"] == "h100" and "not scheduled within 2s" in attempts[0]["reason"]
        assert attempts[0]["cause"] == "timeout"
        # The ladder now knows h100 is busy: the next call goes straight down, with no
        # attempt on h100 (one there would wait the 2 s pending timeout and be recorded).
        # How long the call took is the machine's speed as much (not asserted).
        ref = task.remote(2)
        assert ray.get(ref, timeout=60) == (4, "a100")
        assert call_info(ref)["attempts"] == [], call_info(ref)
    finally:
        release.touch()
    assert ray.get(blocker) == "released"
    wait_until(lambda: ray.get(task.remote(3))[1] == "h100", timeout_s=60,
               message="climb back to h100 once it is free")
    moves = [(e.kind, e.from_rung, e.to_rung, e.direction) for e in work.events()]
    assert ("transition", "h100", "a100", "down") in moves
    assert ("transition", "a100", "h100", "up") in moves
    assert ("call", "h100", "a100", "down") in moves


def test_node_killed_under_the_task_reruns_on_next_rung(cluster, tmp_path):
    marker = tmp_path / "started"
    ref = work.remote(5, 4.0, str(marker))
    wait_until(marker.exists, timeout_s=60, message="task started on h100")
    cluster.remove_node(cluster.nodes("h100")[0])  # SIGKILL: a preemption
    try:
        assert ray.get(ref, timeout=90) == (10, "a100")
        first = call_info(ref)["attempts"][0]
        assert first["rung"] == "h100"
        assert any(name in first["reason"] for name in ("NodeDied", "WorkerCrashed"))
        assert first["cause"] == "failed"
        assert first["error"] in ("NodeDiedError", "WorkerCrashedError")
        moves = [(e.kind, e.from_rung, e.to_rung) for e in work.events()]
        assert ("transition", "h100", "a100") in moves
    finally:
        ensure_h100(cluster)


def test_a_node_start_ray_gives_up_on_is_stopped_and_started_again(cluster, monkeypatch):
    """On a CPU-starved machine Ray can give up on a healthy node's start (the raylet aborts
    after ~15 s without its agent's port file); LocalCluster stops what that try left and
    starts the node again, so the returning capacity still arrives."""
    import psutil
    from ray._private import node as ray_node

    from ray_ladder.cluster import ray_private

    real_init = ray_node.Node.__init__
    failed: list[int] = []

    def init_that_gives_up_once(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        if not failed and not self.head:
            failed.append(ray_private.raylet_processes(self)[0].process.pid)
            raise Exception("The current node timed out during startup.")  # Ray's own

    cluster.remove_node(cluster.nodes("h100")[0])
    monkeypatch.setattr(ray_node.Node, "__init__", init_that_gives_up_once)
    try:
        handle = cluster.add_node("h100")
    finally:
        monkeypatch.undo()
        ensure_h100(cluster)
    assert failed, "the first try did not start a node"
    assert [h.node_id for h in cluster.nodes("h100")] == [handle.node_id]
    wait_until(lambda: not psutil.pid_exists(failed[0])
               or psutil.Process(failed[0]).status() == psutil.STATUS_ZOMBIE,
               timeout_s=10, message="the failed try's raylet stopped")
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert handle.node_id in alive
    assert ray.get(where.remote(1))[1] == "h100"


def test_fallback_on_goes_down_one_rung_other_errors_propagate(cluster):
    task = work.options(fallback_on=(MemoryError,))
    ref = task.remote(3, fail_on=("h100",))
    assert ray.get(ref, timeout=60) == (6, "a100")
    first = call_info(ref)["attempts"][0]
    assert "MemoryError" in first["reason"]
    assert (first["cause"], first["error"]) == ("failed", "MemoryError")
    ref = work.remote(3, fail_on=("h100",))  # MemoryError not chosen: it propagates
    with pytest.raises(MemoryError):
        ray.get(ref, timeout=60)
    assert last_rung(ref) == "h100"


def test_exhausted_ladder_lists_every_attempt(cluster):
    task = work.options(fallback_on=MemoryError)
    with pytest.raises(LadderExhaustedError) as info:
        ray.get(task.remote(1, fail_on=("h100", "a100", "cpu")), timeout=60)
    tried = [(a.rung, a.cause, a.error) for a in info.value.attempts]
    assert tried[:3] == [("h100", "failed", "MemoryError"), ("a100", "failed", "MemoryError"),
                         ("cpu", "failed", "MemoryError")]
    assert all(a.time > 0 for a in info.value.attempts)
    with pytest.raises(LadderExhaustedError, match="max_attempts"):
        ray.get(task.options(max_attempts=1).remote(1, fail_on=("h100",)), timeout=60)


def test_constraints_are_hard_also_when_falling(cluster):
    eu = work.options(constraints=Constraints(jurisdiction="eu"), fallback_on=MemoryError)
    with pytest.raises(LadderExhaustedError) as info:
        ray.get(eu.remote(1, fail_on=("h100", "a100")), timeout=60)
    assert "cpu" not in {a.rung for a in info.value.attempts}  # us rung never tried
    us = where.options(constraints={"jurisdiction": "us"})
    assert ray.get(us.remote(1))[1] == "cpu"


def test_two_hundred_tasks_survive_kill_and_return_of_top_node(cluster):
    eu = work.options(constraints=Constraints(jurisdiction="eu"), max_attempts=6)
    refs = [eu.remote(i, 0.02) for i in range(80)]
    cluster.remove_node(cluster.nodes("h100")[0])
    refs += [eu.remote(i, 0.02) for i in range(80, 140)]
    try:
        wait_until(lambda: ray.get(eu.remote(-1))[1] == "a100", timeout_s=60,
                   message="ladder fell to a100")
    finally:
        cluster.add_node("h100")
    wait_until(lambda: ray.get(eu.remote(-1))[1] == "h100", timeout_s=60,
               message="ladder climbed back to h100")
    refs += [eu.remote(i, 0.02) for i in range(140, 200)]
    results = ray.get(refs, timeout=120)
    assert [value for value, _ in results] == [2 * i for i in range(200)]  # none lost
    rungs = [rung for _, rung in results]
    assert set(rungs) <= {"h100", "a100"}  # never the us cpu rung
    assert "a100" in rungs and rungs[-1] == "h100"
    assert [last_rung(r) for r in refs[-5:]] == rungs[-5:]


def test_native_path_uses_ray_label_fallback(cluster, tmp_path, caplog):
    ladder = Ladder.from_dict({
        "name": "native",
        "policy": {"probe_interval_s": 0.2},
        "rungs": [
            {"name": "h100", "num_cpus": 1, "label_selector": {"ladder.rung": "h100"}},
            {"name": "a100", "num_cpus": 1, "label_selector": {"ladder.rung": "a100"}},
        ],
    })

    @ladder_task(ladder, path="native")
    def f(x, *, rung):
        return x, rung.name

    assert f.path == "native"
    # The raylet falls on a *perceived* busy node, and its view of h100 lags the last
    # test's work there by a moment: poll until a call lands on the free top rung.
    def on_h100():
        ref = f.remote(1)
        return ref if ray.get(ref) == (1, "h100") else None

    with caplog.at_level(logging.INFO, logger="ray_ladder.events"):
        first = wait_until(on_h100, timeout_s=60, message="native call on h100")
    assert last_rung(first) == "h100"
    logged = [json.loads(r.getMessage()) for r in caplog.records
              if r.name == "ray_ladder.events"]
    assert {"task", "from", "to", "direction", "reason", "kind", "cause"} <= set(logged[0])
    assert [e.to_rung for e in f.events()][:1] == ["h100"]
    ready, release = tmp_path / "ready", tmp_path / "release"
    blocker = hold.options(label_selector={"ladder.rung": "h100"}).remote(str(ready),
                                                                          str(release))
    wait_until(ready.exists, timeout_s=60, message="blocker holds h100")
    try:
        ref = f.remote(2)  # busy primary: the raylet falls without a timeout
        assert ray.get(ref, timeout=60) == (2, "a100") and last_rung(ref) == "a100"
    finally:
        release.touch()
    assert ray.get(blocker) == "released"
    assert f.options(path="orchestrated").path == "orchestrated"


def test_batch_embedding_example_runs_on_the_ladder(cluster):
    path = Path(__file__).resolve().parents[2] / "examples" / "batch_embedding.py"
    spec = importlib.util.spec_from_file_location("batch_embedding_example", path)
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example
    spec.loader.exec_module(example)
    ray.cloudpickle.register_pickle_by_value(example)  # workers cannot import examples/
    docs = example.load_corpus()[:200]
    report = example.run_job(docs, chunk_size=50)
    assert report["chunks"] == 4 and sum(report["chunks_per_rung"].values()) == 4
    dims = {r.name: r.params["dim"] for r in example.LADDER.rungs}
    for result in report["results"]:
        vectors = result["vectors"]
        assert vectors.shape == (50, dims[result["rung"]])
        # Unit vectors: each docstring is (one of) its own nearest neighbours.
        sims = vectors @ vectors.T
        assert abs(sims.max(axis=1) - sims.diagonal()).max() < 1e-5
        assert abs(sims.diagonal() - 1).max() < 1e-5


def test_batched_tiny_calls_keep_each_answer_to_its_own_call(cluster):
    from ray_ladder.task.orchestrator.registry import get_orchestrator

    @ladder_task(LADDER)
    def tiny(i, *, rung):
        if i == 57:
            return threading.Lock()  # a value Ray cannot serialize
        if i == 99:
            raise KeyError(i)
        return i

    ray.get(tiny.remote(0))  # the lane learns these calls are tiny
    before = ray.get(get_orchestrator().status.remote())["stats"]["attempts"]
    refs = [tiny.remote(i) for i in range(300)]
    ray.cancel(refs[150])  # cancelling one call leaves the others of its batch alone
    ray.wait(refs, num_returns=len(refs), timeout=120)
    attempts = ray.get(get_orchestrator().status.remote())["stats"]["attempts"] - before
    assert attempts < 300  # tiny calls shared attempts
    for i, ref in enumerate(refs):
        if i == 57:
            with pytest.raises(Exception, match="(?i)lock|serializ|pickle"):
                ray.get(ref)
        elif i == 99:
            with pytest.raises(KeyError):
                ray.get(ref)
        elif i == 150:
            # The cancel may come after the call finished.
            with contextlib.suppress(ray.exceptions.TaskCancelledError):
                assert ray.get(ref) == i
        else:
            assert ray.get(ref) == i


def test_cancel_stops_the_attempt_and_frees_the_rung(cluster, tmp_path):
    marker = tmp_path / "started"
    ref = work.remote(1, 60.0, str(marker))
    wait_until(marker.exists, timeout_s=60, message="task started on h100")
    ray.cancel(ref)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(ref, timeout=60)
    start = time.monotonic()
    assert ray.get(where.remote(0), timeout=60)[1] == "h100"  # the slot is free again
    assert time.monotonic() - start < 20


def test_pending_clock_starts_when_arguments_are_ready(cluster):
    @ray.remote(num_cpus=0)
    def slow_input():
        time.sleep(3)
        return 21

    # The argument takes longer than pending_timeout_s; the call must not fall for it.
    ref = work.options(pending_timeout_s=1).remote(slow_input.remote())
    assert ray.get(ref, timeout=60) == (42, "h100")
    assert call_info(ref)["attempts"] == []
