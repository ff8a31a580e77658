"""A Ray Train run on a draining rung checkpoints when Ray Train's preemption info says so
and moves to the next rung at that checkpoint, before the kill, losing no step; a run that
reports through plain ``ray.train.report`` (Ray's own flow) waits for the deadline."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import ray.cloudpickle

from ray_ladder import Ladder
from ray_ladder.cluster import ray_private
from ray_ladder.core.placement import PREEMPTION_NOTICE
from ray_ladder.testing import wait_until

os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")  # before ray.train is imported
# Ray Train's controller polls its workers this often (default 2 s); Ray Train's preemption
# watcher polls the GCS's drain table every RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S (5 s by
# default). Both are read by Ray Train from the driver's environment when fit() starts its
# controller (Ray Train propagates them), so setting them before fit() is enough.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

DEADLINE_S = 12.0
STEP_S = 0.1
LADDER = Ladder.from_yaml("""
name: notice-train
policy: {promotion_hysteresis: 2, probe_interval_s: 0.25}
rungs:
  - {name: h100x2, resources: {ladder/h100: 1}, train: {workers: 2}}
  - {name: a100x2, resources: {ladder/a100: 1}, train: {workers: 2}}
""")
NODES = {"h100": {"num_cpus": 1, "resources": {"ladder/h100": 2}},
         "a100": {"num_cpus": 1, "resources": {"ladder/a100": 2}}}

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers get train_fn


def train_fn(config: dict[str, Any]) -> None:
    """Steps of 0.1 s; a checkpoint when Ray Train's preemption info first shows (and every
    ``every`` steps), through ``ray_ladder.train.report`` or plain ``ray.train.report``."""
    import tempfile

    import ray.train
    from ray.train.collective import broadcast_from_rank_zero

    import ray_ladder.train as lt

    rank = ray.train.get_context().get_world_rank()
    rung = lt.current_rung().name
    report = lt.report if config["ladder_report"] else ray.train.report
    step = resumed_from = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            step = resumed_from = json.loads(Path(d, "state.json").read_text())["step"]
    saved_on_notice = False
    while True:
        time.sleep(STEP_S)
        step += 1
        if rank == 0:
            with open(config["log"], "a") as f:
                f.write(json.dumps({"step": step, "rung": rung, "time": time.time(),
                                    "resumed_from": resumed_from}) + "\n")
        noticed = ray.train.get_preemption_info() is not None  # every worker, every step
        if (noticed and not saved_on_notice) or step % config["every"] == 0:
            saved_on_notice = saved_on_notice or noticed
            with tempfile.TemporaryDirectory() as d:
                if rank == 0:
                    Path(d, "state.json").write_text(json.dumps({"step": step}))
                report({"step": step}, checkpoint=ray.train.Checkpoint.from_directory(d)
                       if rank == 0 else None)
        if broadcast_from_rank_zero(rank == 0 and os.path.exists(config["stop"])):
            return


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _watcher_alive() -> bool:
    from ray.util.state import list_actors

    return bool(list_actors(filters=[("class_name", "=", "PreemptionWatcher"),
                                     ("state", "=", "ALIVE")]))


@pytest.fixture(scope="module")
def cluster(local_cluster: Any) -> Any:
    return local_cluster(NODES, include_dashboard=True)  # the state API: list_actors


def _drain_and_kill(cluster: Any, tmp: Path, *, ladder_report: bool,
                    max_failures: int) -> SimpleNamespace:
    """Start a run on h100x2, drain its node (deadline DEADLINE_S), SIGKILL it then."""
    from ray.train.v2.api.config import FailureConfig, RunConfig

    from ray_ladder.train import LadderTrainer

    if not cluster.nodes("h100"):
        cluster.add_node("h100")
    log, stop = tmp / "steps.jsonl", tmp / "stop"
    trainer = LadderTrainer(
        train_fn, ladder=LADDER,
        train_loop_config={"log": str(log), "stop": str(stop), "every": 1000,
                           "ladder_report": ladder_report},
        run_config=RunConfig(name=f"notice-{tmp.name}", storage_path=str(tmp / "results"),
                             failure_config=FailureConfig(max_failures=max_failures)))
    out: dict[str, Any] = {}
    fit = threading.Thread(target=lambda: out.update(result=trainer.fit()), daemon=True)
    fit.start()
    try:
        wait_until(lambda: sum(e["rung"] == "h100x2" for e in _read(log)) >= 5, 120, 0.05,
                   "5 steps on h100x2")
        # Ray Train's watcher of this group polls the drain table when it starts, then
        # every poll interval: drain once it runs, so the notice waits for its next poll.
        wait_until(_watcher_alive, 60, 0.1, "Ray Train's PreemptionWatcher running")
        node = cluster.nodes("h100")[0]
        t0, notice_at = time.monotonic(), time.time()
        accepted, why = ray_private.drain_node(cluster.address, node.node_id, DEADLINE_S)
        assert accepted, why
        wait_until(lambda: time.monotonic() >= t0 + DEADLINE_S, DEADLINE_S + 1, 0.02)
        killed_at = time.time()
        cluster.remove_node(node)  # SIGKILL at the deadline
        first = wait_until(lambda: next((e for e in _read(log) if e["rung"] == "a100x2"),
                                        None), 60, 0.05, "a step on a100x2")
        wait_until(lambda: sum(e["rung"] == "a100x2" for e in _read(log)) >= 3, 30, 0.05,
                   "3 steps on a100x2")
    finally:
        stop.touch()
        fit.join(120)
    assert not fit.is_alive()
    entries = _read(log)
    last_top = max(e["step"] for e in entries if e["rung"] == "h100x2")
    run = SimpleNamespace(entries=entries, first=first, notice_at=notice_at,
                          killed_at=killed_at, last_top=last_top, result=out["result"],
                          lost=last_top - first["resumed_from"])
    print(f"\n{'lt.report' if ladder_report else 'ray.train.report'}: notice -> first "
          f"a100x2 step {first['time'] - notice_at:.2f} s (kill at {DEADLINE_S:.0f} s); "
          f"last h100x2 step {last_top}, resumed from {first['resumed_from']}, "
          f"{run.lost} steps lost")
    return run


def test_a_run_that_honours_the_notice_moves_before_the_kill(
        cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S", "0.5")
    # max_failures=0: the early restart is a preemption (max_preemption_failures, -1 by
    # default), not a worker-group failure; counted as one, it would end the run.
    run = _drain_and_kill(cluster, tmp_path, ladder_report=True, max_failures=0)
    assert run.first["time"] < run.killed_at, "moved only at the kill"
    assert run.lost == 0, "steps lost"  # resumed from the last step run on h100x2
    at = next(e for e in run.entries if e["rung"] == "h100x2" and e["step"] == run.last_top)
    assert at["time"] > run.notice_at  # checkpointed on the notice
    summary = run.result.ladder
    assert summary.path == ["h100x2", "a100x2"]
    assert summary.spans[0].ended_by == "preempted"
    reason = summary.events[1]["reason"]
    assert reason.startswith(f"h100x2 {PREEMPTION_NOTICE}: moved at a committed checkpoint")
    assert run.result.error is None


def test_a_run_on_plain_ray_train_report_restarts_at_the_deadline(
        cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The control: the same function and drain, its notice checkpoint through Ray's own
    # report. The ladder asks, no worker stops, so Ray Train waits for the deadline.
    monkeypatch.setenv("RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S", "0.5")
    run = _drain_and_kill(cluster, tmp_path, ladder_report=False, max_failures=3)
    assert run.first["time"] > run.notice_at + DEADLINE_S - 1.0
    assert run.lost > 0  # trained past the notice's checkpoint until the deadline
    summary = run.result.ladder
    assert summary.path == ["h100x2", "a100x2"]
    assert summary.spans[0].ended_by == "preempted"
    assert summary.events[1]["reason"].startswith(
        f"h100x2 {PREEMPTION_NOTICE}: restarted at the drain's deadline")


def main() -> None:
    """The figures of docs/train.md's notice table, the same drain for each row: lt.report
    vs ray.train.report, watcher poll 0.5 s vs Ray's default (5 s). Prints JSON rows.

    Run from the repository root: ``python -m tests.preemption.test_notice_train``.
    """
    import tempfile

    from ray_ladder.testing import LocalCluster

    rows = []
    with LocalCluster(NODES, log_to_driver=False, include_dashboard=True) as cluster:
        for poll in ("0.5", None):
            for ladder_report in (True, False):
                if poll is None:
                    os.environ.pop("RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S", None)
                else:
                    os.environ["RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S"] = poll
                with tempfile.TemporaryDirectory() as d:
                    run = _drain_and_kill(cluster, Path(d), ladder_report=ladder_report,
                                          max_failures=3)
                seen = next(e["time"] for e in run.entries if e["rung"] == "h100x2"
                            and e["step"] == run.first["resumed_from"])
                rows.append({
                    "report": "lt.report" if ladder_report else "ray.train.report",
                    "watcher_poll_s": poll or "default (5)",
                    "notice_checkpoint_s": round(seen - run.notice_at, 2),
                    "restart_decided_s": round(run.result.ladder.events[1]["time"]
                                               - run.notice_at, 2),
                    "first_step_next_rung_s": round(run.first["time"] - run.notice_at, 2),
                    "before_kill": run.first["time"] < run.killed_at,
                    "steps_lost": run.lost,
                    "reason": run.result.ladder.events[1]["reason"]})
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
