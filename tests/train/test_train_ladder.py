"""Ray Train v2 on a ladder, on a real local cluster (one 8-GPU node, two 4-GPU nodes): start
on the top shape, a SIGKILLed node resumes lower from the last checkpoint, the returning node
is climbed to at a checkpoint, residency holds, a shape that never fits is skipped."""

from __future__ import annotations

import importlib.util
import re
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import ray.cloudpickle

from ray_ladder import Ladder, LadderExhaustedError
from ray_ladder.cluster.capacity import ray_node_states
from ray_ladder.testing import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.long]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ladder.py"


def _load_example() -> Any:
    # The example's model and training loop are what users read; they travel by value
    # (the examples folder is not importable on Ray's workers).
    spec = importlib.util.spec_from_file_location("train_ladder", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)
    return module


ex = _load_example()
LADDER = Ladder.from_yaml(ex.LADDER_YAML)
EVERY = 5
CONFIG = {"checkpoint_every": EVERY, "lr": 0.5, "global_batch": 64, "seed": 11,
          "step_time_s": 0.1, "hub": "grad-hub"}
#: Residency: the free 8-GPU node is in the US; an EU run must never get a worker there.
EU_LADDER = Ladder.from_yaml("""
name: residency
policy: {probe_interval_s: 0.25}
rungs:
  - {name: us-h100x8, resources: {ladder/h100: 2}, train: {workers: 4}, tags: {jurisdiction: us}}
  - {name: eu-a100x8, resources: {ladder/a100: 2}, train: {workers: 4}, tags: {jurisdiction: eu}}
  - {name: eu-a100x4, resources: {ladder/a100: 2}, train: {workers: 2}, tags: {jurisdiction: eu},
     params: {grad_accum_steps: 2}}
""")
#: 16 GPUs in one gang: no node set here can ever hold it.
NEVER_LADDER = Ladder.from_yaml("""
name: too-big
policy: {probe_interval_s: 0.25}
rungs:
  - {name: h100x16, resources: {ladder/h100: 4}, train: {workers: 4}}
  - {name: h100x8, resources: {ladder/h100: 2}, train: {workers: 4}}
""")


@pytest.fixture(scope="module")
def s3() -> Any:
    """A real S3 API server (moto) on loopback, started before the cluster so its
    processes see the (fake) credentials; the story's checkpoints live in its bucket."""
    pytest.importorskip("moto.server", reason="needs moto[server] (the test extras)")
    import pyarrow.fs as pafs

    from ray_ladder.jobs.sandbox import FAKE_AWS, s3_server

    with s3_server("train") as uri:
        endpoint = re.search(r"endpoint_override=([^&]+)", uri).group(1)
        yield pafs.S3FileSystem(
            access_key=FAKE_AWS["AWS_ACCESS_KEY_ID"], secret_key=FAKE_AWS[
                "AWS_SECRET_ACCESS_KEY"], endpoint_override=endpoint, scheme="http",
            region=FAKE_AWS["AWS_DEFAULT_REGION"])


@pytest.fixture(scope="module")
def cluster(local_cluster: Any, s3: Any) -> Any:
    c = local_cluster(ex.NODE_TYPES, initial=ex.INITIAL)
    c.hub = ex.start_hub(CONFIG["hub"])  # held for the module: the handle keeps it alive
    return c


@pytest.fixture
def idle(cluster: Any) -> Any:
    """Every node of the example up and idle before the test; whatever it killed comes back."""
    _all_nodes_back(cluster)
    yield cluster
    _all_nodes_back(cluster)


def _all_nodes_back(cluster: Any) -> None:
    for node_type, count in ex.INITIAL.items():
        for _ in range(count - len(cluster.nodes(node_type))):
            cluster.add_node(node_type)
    ids = {h.node_id for h in cluster.nodes()}

    def idle_now() -> bool:
        nodes = {n.node_id: n for n in ray_node_states() if n.alive}
        return ids <= set(nodes) and all(
            nodes[i].available.get(k, 0) == v for i in ids for k, v in nodes[i].total.items()
            if k.startswith("ladder/"))

    wait_until(idle_now, 90, 0.1, "every node up and idle")


def _run(cluster: Any, tmp: Path, ladder: Ladder, storage: str | None = None,
         **trainer_kwargs: Any) -> Any:
    log = ex.StepLog(tmp / "steps.jsonl")
    config = {**CONFIG, "steps": 100_000, "step_log": str(log.path),
              "stop_file": str(tmp / "stop")}
    fit = ex.FitThread(ex.make_trainer(ladder, config, storage or str(tmp),
                                       **trainer_kwargs))
    return SimpleNamespace(log=log, config=config, fit=fit, stop=tmp / "stop")


@pytest.fixture(scope="module")
def story(cluster: Any, s3: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One run of the example's story, watched from the step log; each test checks a part.
    Its checkpoints are in an S3 bucket (``storage_filesystem``: pyarrow's S3 client with
    an endpoint override): the lower shape resumes from there and climbs back from there."""
    _all_nodes_back(cluster)
    run = _run(cluster, tmp_path_factory.mktemp("story"), LADDER, storage="train/story",
               storage_filesystem=s3)
    a100_nodes = {h.node_id for h in cluster.nodes("a100-node")}
    big = cluster.nodes("h100-node")[0]
    started_at = time.time()
    run.fit.start()
    try:
        first = run.log.wait(lambda es: es[0] if es else None, 180, "a first step")
        run.log.wait(lambda es: es[-1]["step"] >= 2 * EVERY + 2, 120, "12 steps on h100x8")
        killed_at = time.time()
        cluster.remove_node(big)  # SIGKILL of the whole node: a preemption without notice
        low = run.log.wait(ex.first_step_on("a100x8", killed_at), 180, "a step on a100x8")
        run.log.wait(lambda es: sum(e["rung"] == "a100x8" for e in es) >= 8, 120,
                     "8 steps on a100x8")
        cluster.add_node("h100-node")
        added_at = time.time()
        back = run.log.wait(ex.first_step_on("h100x8", added_at), 180, "h100x8 again")
        run.log.wait(lambda es: es[-1]["rung"] == "h100x8"
                     and es[-1]["step"] >= back["step"] + EVERY, 120, "a checkpoint on h100x8")
    finally:
        run.stop.touch()
        result = run.fit.join_result(300)
    with result.checkpoint.as_directory() as d:
        model = ex.load_model(d)
    return SimpleNamespace(result=result, entries=run.log.read(), first=first, low=low,
                           back=back, killed_at=killed_at, started_at=started_at,
                           big=big.node_id, a100_nodes=a100_nodes, model=model,
                           config=run.config)


def test_starts_on_the_top_shape(story: Any) -> None:
    assert (story.first["rung"], story.first["world"], story.first["resumed_from"]) == (
        "h100x8", 4, 0)
    first = story.result.ladder.spans[0]
    assert first.rung == "h100x8" and set(first.node_ids) == {story.big}
    assert story.result.ladder.events[0]["reason"].startswith("first placement")


def test_a_killed_node_resumes_from_the_last_checkpoint_on_the_next_shape(story: Any) -> None:
    low = story.low
    # The killed process may log a step while SIGKILL lands: count top steps up to the resume.
    last_top = max(e["step"] for e in story.entries
                   if e["rung"] == "h100x8" and e["time"] < low["time"])
    assert low["world"] == 4 and low["resumed_from"] > 0 and low["resumed_from"] % EVERY == 0
    assert low["step"] == low["resumed_from"] + 1
    # One checkpoint interval, plus the checkpoint Ray Train had not committed yet when the
    # node died (it commits at its next poll of every worker).
    assert last_top - low["resumed_from"] <= 2 * EVERY
    lost, fell = story.result.ladder.spans[:2]
    # "node lost" once the GCS has marked the node dead, "workers lost" if Ray Train saw its
    # workers die first; never "workers failed" (that is the training code's own error).
    assert lost.ended_by in ("node lost", "workers lost")
    assert fell.rung == "a100x8" and set(fell.node_ids) == story.a100_nodes  # 2 + 2 workers
    assert sorted(fell.node_ids).count(sorted(story.a100_nodes)[0]) == 2
    event = story.result.ladder.events[1]
    assert (event["from"], event["to"], event["direction"]) == ("h100x8", "a100x8", "down")


def test_the_returning_node_is_climbed_to_at_the_next_checkpoint(story: Any) -> None:
    back = story.back
    on_low = [e["step"] for e in story.entries if e["rung"] == "a100x8"]
    # Moved up at a checkpoint boundary: the climb lost no step at all.
    assert back["resumed_from"] == max(on_low) and back["resumed_from"] % EVERY == 0
    assert back["step"] == back["resumed_from"] + 1 and back["world"] == 4
    spans = story.result.ladder.spans
    assert spans[1].ended_by == "climbed to h100x8"
    assert "climb at checkpoint" in story.result.ladder.events[2]["reason"]


def test_the_checkpoints_are_in_the_s3_bucket(story: Any, s3: Any) -> None:
    import pyarrow.fs as pafs

    ckpt = story.result.checkpoint
    assert isinstance(ckpt.filesystem, pafs.S3FileSystem)
    assert ckpt.path.startswith("train/story/")
    found = s3.get_file_info(pafs.FileSelector("train/story", recursive=True))
    assert any(f.path == ckpt.path for f in found)  # the one Train resumed and returned


def test_the_result_carries_the_path_time_and_cost(story: Any) -> None:
    summary = story.result.ladder
    # Each worker group is a span: a busy machine may make Train restart a group on the
    # same rung (a fresh clone beside other Ray work ended h100x8 -> a100x8 -> h100x8 ->
    # h100x8). That is a restart, not a move; the rungs the run moved through are these.
    path = summary.path
    moved = [rung for i, rung in enumerate(path) if i == 0 or rung != path[i - 1]]
    assert moved == ["h100x8", "a100x8", "h100x8"], summary.text()
    spans = summary.spans
    restarts = [a for a, b in zip(spans, spans[1:], strict=False) if a.rung == b.rung]
    failed = ("workers failed", "workers lost", "node lost", "failed")  # Train retried it
    assert all(a.ended_by in failed for a in restarts), \
        summary.text()
    assert summary.moves == 2 and summary.spans[-1].ended_by == "completed"
    assert set(summary.per_rung) == {"h100x8", "a100x8"}
    rates = {r.name: r.cost_per_hour for r in LADDER.rungs}
    for rung, t in summary.per_rung.items():
        assert t["seconds"] > 0 and t["cost"] == pytest.approx(rates[rung] * t["seconds"] / 3600)
    assert summary.seconds_below_top == pytest.approx(summary.per_rung["a100x8"]["seconds"])
    assert story.result.error is None  # Ray's own Result reads through
    assert story.result.metrics["rung"] == "h100x8"


def test_the_model_equals_an_uninterrupted_run_with_the_same_global_batch(story: Any) -> None:
    steps = story.model["step"]
    assert steps % EVERY == 0 and steps >= story.back["step"]
    reference = ex.train_reference({**story.config, "steps": steps})
    assert np.array_equal(story.model["w"], reference["w"])
    assert np.array_equal(story.model["b"], reference["b"])


def test_an_eu_run_never_gets_a_worker_on_a_non_eu_rung(idle: Any, tmp_path: Path) -> None:
    cluster = idle
    run = _run(cluster, tmp_path, EU_LADDER, constraints={"jurisdiction": "eu"})
    big = cluster.nodes("h100-node")[0].node_id
    run.fit.start()
    try:
        run.log.wait(lambda es: sum(e["rung"] == "eu-a100x8" for e in es) >= 2 * EVERY + 2,
                     180, "12 steps on eu-a100x8")
        killed_at = time.time()
        cluster.remove_node(cluster.nodes("a100-node")[0])  # the free us node still beckons
        run.log.wait(ex.first_step_on("eu-a100x4", killed_at), 180, "a step on eu-a100x4")
        run.log.wait(lambda es: sum(e["rung"] == "eu-a100x4" for e in es) >= 3, 120,
                     "3 steps on eu-a100x4")
    finally:
        run.stop.touch()
        result = run.fit.join_result(300)
    entries = run.log.read()
    assert {e["rung"] for e in entries} == {"eu-a100x8", "eu-a100x4"}
    assert result.ladder.path == ["eu-a100x8", "eu-a100x4"]
    assert result.ladder.top == "eu-a100x8"
    for span in result.ladder.spans:
        assert span.node_ids and big not in span.node_ids
    assert all(e["to"].startswith("eu-") for e in result.ladder.events)


def test_a_shape_that_never_fits_is_skipped_without_waiting(idle: Any, tmp_path: Path) -> None:
    run = _run(idle, tmp_path, NEVER_LADDER)
    started = time.time()
    run.fit.start()
    try:
        first = run.log.wait(lambda es: es[0] if es else None, 180, "a first step")
    finally:
        run.stop.touch()
        result = run.fit.join_result(300)
    # Ray Train would wait for a placement group that cannot be placed (60 s, then retry).
    assert first["rung"] == "h100x8" and first["time"] - started < 45
    assert result.ladder.path == ["h100x8"]
    assert result.ladder.events[0]["reason"] == "first placement; free: h100x8"


def test_no_shape_that_fits_ends_in_a_typed_answer(idle: Any, tmp_path: Path) -> None:
    only_too_big = Ladder.from_yaml(
        "name: too-big-only\nrungs:\n"
        "  - {name: h100x16, resources: {ladder/h100: 4}, train: {workers: 4}}\n")
    trainer = ex.make_trainer(only_too_big, {**CONFIG, "steps": 10}, str(tmp_path),
                              max_wait_s=1.0)
    with pytest.raises(LadderExhaustedError) as info:
        trainer.fit()
    (attempt,) = info.value.attempts
    assert attempt.rung == "h100x16" and attempt.reason.startswith("never: 4 workers needed")
