"""A Ray Train run drained with a deadline: the ladder's move at the notice's checkpoint vs
Ray Train's own flow, in one run.

One LocalCluster (a head, an h100 node, an a100 node; the dashboard on, for the state API
that shows Ray Train's PreemptionWatcher running). A ``LadderTrainer`` run of 0.1 s steps
on ``h100x2``; once the watcher runs, the h100 node is drained through Ray's drain API
(``DRAIN_NODE_REASON_PREEMPTION``, deadline 12 s) and SIGKILLed at the deadline. The
training function polls ``ray.train.get_preemption_info()`` every step and reports one
checkpoint when it first sees the notice, through ``ray_ladder.train.report`` (the ladder
moves the run at that checkpoint) or plain ``ray.train.report`` (Ray Train waits for the
deadline, then restarts). Each twice: Ray Train's watcher polling every 0.5 s, and at its
default (5 s). Prints ONE JSON object on stdout (progress on stderr). Run:
``python bench/preemption_notice_train.py``. ``tests/preemption/test_notice_train.py``
runs the same drain.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray.cloudpickle  # noqa: E402
from _machine import MachineProbe  # noqa: E402

from ray_ladder import Ladder  # noqa: E402
from ray_ladder.cluster import ray_private  # noqa: E402
from ray_ladder.testing import wait_until  # noqa: E402

#: Ray Train's controller polls its workers this often (default 2 s); its preemption
#: watcher polls the GCS's drain table every RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S (5 s by
#: default). Ray Train reads both from the driver's environment when fit() starts its
#: controller (and passes them on), so setting them before fit() is enough.
TRAIN_ENV = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25"}
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


def read_steps(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def watcher_alive() -> bool:
    from ray.util.state import list_actors

    return bool(list_actors(filters=[("class_name", "=", "PreemptionWatcher"),
                                     ("state", "=", "ALIVE")]))


def drain_and_kill(cluster: Any, tmp: Path, *, ladder_report: bool,
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
        wait_until(lambda: sum(e["rung"] == "h100x2" for e in read_steps(log)) >= 5, 120, 0.05,
                   "5 steps on h100x2")
        # Ray Train's watcher of this group polls the drain table when it starts, then
        # every poll interval: drain once it runs, so the notice waits for its next poll.
        wait_until(watcher_alive, 60, 0.1, "Ray Train's PreemptionWatcher running")
        node = cluster.nodes("h100")[0]
        t0, notice_at = time.monotonic(), time.time()
        accepted, why = ray_private.drain_node(cluster.address, node.node_id, DEADLINE_S)
        assert accepted, why
        wait_until(lambda: time.monotonic() >= t0 + DEADLINE_S, DEADLINE_S + 1, 0.02)
        killed_at = time.time()
        cluster.remove_node(node)  # SIGKILL at the deadline
        first = wait_until(lambda: next((e for e in read_steps(log) if e["rung"] == "a100x2"),
                                        None), 60, 0.05, "a step on a100x2")
        wait_until(lambda: sum(e["rung"] == "a100x2" for e in read_steps(log)) >= 3, 30, 0.05,
                   "3 steps on a100x2")
    finally:
        stop.touch()
        fit.join(120)
    assert not fit.is_alive()
    entries = read_steps(log)
    last_top = max(e["step"] for e in entries if e["rung"] == "h100x2")
    run = SimpleNamespace(entries=entries, first=first, notice_at=notice_at,
                          killed_at=killed_at, last_top=last_top, result=out["result"],
                          lost=last_top - first["resumed_from"])
    print(f"\n{'lt.report' if ladder_report else 'ray.train.report'}: notice -> first "
          f"a100x2 step {first['time'] - notice_at:.2f} s (kill at {DEADLINE_S:.0f} s); "
          f"last h100x2 step {last_top}, resumed from {first['resumed_from']}, "
          f"{run.lost} steps lost")
    return run




def log(msg: str) -> None:
    print(f"[preemption_notice_train] {msg}", file=sys.stderr, flush=True)


def main() -> None:
    from ray_ladder.testing import LocalCluster

    probe = MachineProbe()
    t0 = time.monotonic()
    os.environ.update(TRAIN_ENV)
    rows = []
    with LocalCluster(NODES, log_to_driver=False, include_dashboard=True) as cluster:
        for poll in ("0.5", None):
            for ladder_report in (True, False):
                if poll is None:
                    os.environ.pop("RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S", None)
                else:
                    os.environ["RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S"] = poll
                with tempfile.TemporaryDirectory() as d:
                    run = drain_and_kill(cluster, Path(d), ladder_report=ladder_report,
                                         max_failures=3)
                seen = next(e["time"] for e in run.entries if e["rung"] == "h100x2"
                            and e["step"] == run.first["resumed_from"])
                row = {
                    "report": "lt.report" if ladder_report else "ray.train.report",
                    "watcher_poll_s": float(poll) if poll else 5.0,
                    "notice_checkpoint_s": round(seen - run.notice_at, 2),
                    "restart_decided_s": round(run.result.ladder.events[1]["time"]
                                               - run.notice_at, 2),
                    "first_step_next_rung_s": round(run.first["time"] - run.notice_at, 2),
                    "before_kill": run.first["time"] < run.killed_at,
                    "steps_lost": run.lost,
                    "reason": run.result.ladder.events[1]["reason"]}
                log(json.dumps(row))
                rows.append(row)

    def pick(report: str, poll: float) -> dict:
        return next(r for r in rows if r["report"] == report and r["watcher_poll_s"] == poll)

    result: dict[str, Any] = {"deadline_s": DEADLINE_S, "runs": rows}
    for poll, tag in ((0.5, "poll_0.5s"), (5.0, "poll_default")):
        ladder, plain = pick("lt.report", poll), pick("ray.train.report", poll)
        result[f"{tag}_ladder_first_step_next_rung_s"] = ladder["first_step_next_rung_s"]
        result[f"{tag}_plain_first_step_next_rung_s"] = plain["first_step_next_rung_s"]
        result[f"{tag}_move_ratio"] = round(ladder["first_step_next_rung_s"]
                                            / plain["first_step_next_rung_s"], 3)
        result[f"{tag}_ladder_steps_lost"] = ladder["steps_lost"]
        result[f"{tag}_plain_steps_lost"] = plain["steps_lost"]
    result["goals"] = {
        "ladder_moves_before_the_kill": all(r["before_kill"] for r in rows
                                            if r["report"] == "lt.report"),
        "ladder_steps_lost_0": all(r["steps_lost"] == 0 for r in rows
                                   if r["report"] == "lt.report"),
    }
    result["total_s"] = round(time.monotonic() - t0, 1)
    result["machine"] = probe.report()
    print(json.dumps(result), file=JSON_OUT, flush=True)


if __name__ == "__main__":
    from _json_out import json_stdout

    JSON_OUT = json_stdout()
    main()
