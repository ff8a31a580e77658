"""Tune on a ladder: preemption-to-resume time, steps lost, climb time, overhead vs plain Tune.

Prints one JSON object:

* ``preempt_to_resume_s``: SIGKILL of the trial's h100 node until its next training step
  runs on a100 (goal <= 5 s).
* ``steps_lost``: steps done on h100 after its last checkpoint, redone on a100 (goal <=
  one checkpoint interval).
* ``climb_at_checkpoint_s``: the re-added h100 node registered (``add_node`` returned)
  until the trial's next step runs on h100 (goal <= checkpoint interval + hysteresis x
  probe interval + 5 s); ``details.climb_from_add_call_s`` counts the node's start too.
* ``overhead_ratio``: wall time of an undisturbed ladder run / the same plain Tune run
  (``tune.with_resources`` on the h100 bundle), best of ``--repeats`` each, interleaved
  (goal <= 1.10).

Usage: ``python bench/tune_ladder.py [--repeats 3] [--steps 30]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_on_ladder.py"


def load_example() -> Any:
    import ray.cloudpickle

    spec = importlib.util.spec_from_file_location("train_on_ladder", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)  # examples/ is not importable on workers
    return module


class DriverClock:
    """Seconds spent in the ladder's driver-side hooks (a figure the machine's load barely
    moves, unlike wall times): scheduler, callback and first placement."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def install(self) -> None:
        from ray_ladder.tune.callback import LadderCallback
        from ray_ladder.tune.scheduler import LadderScheduler
        from ray_ladder.tune.trainable import LadderTrialSpec

        hooks = {LadderScheduler: ["on_trial_add", "on_trial_result", "on_trial_error",
                                   "on_trial_complete", "choose_trial_to_run"],
                 LadderCallback: ["on_trial_result", "on_trial_complete"],
                 LadderTrialSpec: ["first_choice"]}
        for cls, names in hooks.items():
            for name in names:
                setattr(cls, name, self._timed(getattr(cls, name)))

    def _timed(self, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
        return timed


def run_config(tmp: str, name: str, stop: Any = None) -> Any:
    from ray import tune

    return tune.RunConfig(storage_path=str(Path(tmp) / "results"), name=name, verbose=0,
                          stop=stop, failure_config=tune.FailureConfig(max_failures=3))


def wait_all_free(ladder: Any) -> None:
    """Start each run on an idle cluster (the last run's placement group is released)."""
    from ray_ladder.cluster.capacity import CapacityView
    from ray_ladder.testing import wait_until
    from ray_ladder.tune.trainable import LadderTrialSpec

    spec = LadderTrialSpec.build(ladder, None, 1)
    view = CapacityView(spec.trial_ladder, require_available=True)
    wait_until(lambda: all(c.state == "free" for c in view.refresh().rungs.values()), 60, 0.1,
               "every rung free")


def undisturbed(ex: Any, ladder: Any, tmp: str, ladder_on: bool, steps: int, i: int) -> float:
    """Wall time of one fit() of the same training, on the ladder or with plain Tune."""
    from ray import tune

    from ray_ladder.tune import Tuner, with_ladder

    wait_all_free(ladder)

    config = {"steps": steps, "checkpoint_every": 5, "seed": 1, "step_time_s": 0.05}
    name = f"{'ladder' if ladder_on else 'plain'}-{i}"
    if ladder_on:
        tuner = Tuner(with_ladder(ex.train_digits, ladder), param_space=config,
                      run_config=run_config(tmp, name))
    else:
        resources = tune.PlacementGroupFactory([{"CPU": 1, "ladder/h100": 1}],
                                               bundle_label_selector=[{"ladder.rung": "h100"}])
        tuner = tune.Tuner(tune.with_resources(ex.train_digits, resources), param_space=config,
                           run_config=run_config(tmp, name))
    t0 = time.perf_counter()
    result = tuner.fit()[0]
    wall = time.perf_counter() - t0
    if result.error is not None or result.metrics.get("step") != steps:
        raise RuntimeError(f"{name} did not finish: {result.error}")
    return wall


def disturbed(ex: Any, ladder: Any, cluster: Any, tmp: str) -> dict[str, Any]:
    """Kill the trial's h100 node mid-training, then add it back; time both moves."""
    from ray import tune

    from ray_ladder.tune import LadderScheduler, Tuner, rung_history, with_ladder

    every, step_time = 5, 0.1
    moves: list[tuple[float, dict[str, Any]]] = []  # (wall time, event) of each re-placement
    scheduler = LadderScheduler(on_event=lambda e: moves.append((time.time(), e.to_dict())))
    log = ex.StepLog(Path(tmp) / "steps.jsonl")
    flag = Path(tmp) / "stop"
    config = {"steps": 5000, "checkpoint_every": every, "seed": 2, "step_time_s": step_time,
              "step_log": str(log.path)}
    stop_flag = str(flag)
    tuner = Tuner(with_ladder(ex.train_digits, ladder), param_space=config,
                  tune_config=tune.TuneConfig(scheduler=scheduler),
                  run_config=run_config(tmp, "disturbed",
                                        stop=lambda trial_id, result: Path(stop_flag).exists()))
    wait_all_free(ladder)
    fit = ex.FitThread(tuner)
    fit.start()
    try:
        # Kill between checkpoints (2 steps past one) so the loss is measured, not zero.
        log.wait(lambda es: any(e["rung"] == "h100" and e["step"] >= 3 * every + 2 for e in es),
                 120, "steps on h100")
        killed_at = time.time()
        cluster.remove_node(cluster.nodes("h100")[0])
        low = log.wait(ex.first_step_on("a100", killed_at), 120, "a step on a100")
        log.wait(lambda es: sum(e["rung"] == "a100" for e in es) >= every, 120, "a100 steps")
        add_called_at = time.time()
        cluster.add_node("h100")
        added_at = time.time()  # the node is registered: the rung is back in Ray's view
        high = log.wait(ex.first_step_on("h100", add_called_at), 120, "a step on h100 again")
    finally:
        flag.touch()
        result = fit.join_results(120)[0]
    entries = log.read()
    # The killed process may log a step or two while SIGKILL lands: count up to the resume.
    last_top = max(e["step"] for e in entries if e["rung"] == "h100" and e["time"] < low["time"])
    fall_at = next(t for t, e in moves if e["direction"] == "down" and t > killed_at)
    climb_at = next(t for t, e in moves if e["direction"] == "up" and t > added_at)
    on_a100 = [e["step"] for e in entries if e["rung"] == "a100"]
    hysteresis, probe = ladder.policy.promotion_hysteresis, ladder.policy.probe_interval_s
    ckpt_interval_s = every * step_time
    return {
        "preempt_to_resume_s": round(low["time"] - killed_at, 2),
        "steps_lost": last_top - low["resumed_from"],
        "climb_at_checkpoint_s": round(high["time"] - added_at, 2),
        "fall_decided_s": round(fall_at - killed_at, 2),
        "fall_actor_restart_s": round(low["time"] - fall_at, 2),
        "climb_decided_s": round(climb_at - added_at, 2),
        "climb_actor_restart_s": round(high["time"] - climb_at, 2),
        "climb_from_add_call_s": round(high["time"] - add_called_at, 2),
        "climb_steps_lost": max(on_a100) - high["resumed_from"],
        "node_up_s": round(added_at - add_called_at, 2),
        "checkpoint_every_steps": every,
        "checkpoint_interval_s": ckpt_interval_s,
        "climb_goal_s": ckpt_interval_s + hysteresis * probe + 5,
        "path": [s.rung for s in rung_history(result)],
        "events": [e["reason"] for _, e in moves],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="undisturbed runs of each kind")
    parser.add_argument("--steps", type=int, default=30, help="steps of an undisturbed run")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # Tune's error report for the killed trial is expected

    from _machine import MachineProbe

    from ray_ladder import Ladder
    from ray_ladder.testing import LocalCluster

    probe = MachineProbe()
    ex = load_example()
    ladder = Ladder.from_yaml(ex.LADDER_YAML)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(ex.NODE_TYPES, head=ex.HEAD) as c:
        walls: dict[str, list[float]] = {"plain": [], "ladder": []}
        driver = DriverClock()
        driver.install()
        in_ladder_code = []
        for i in range(args.repeats):  # interleaved: both kinds see the same machine load
            walls["plain"].append(undisturbed(ex, ladder, tmp, False, args.steps, i))
            before = driver.seconds
            walls["ladder"].append(undisturbed(ex, ladder, tmp, True, args.steps, i))
            in_ladder_code.append(driver.seconds - before)
        moves = disturbed(ex, ladder, c, tmp)
    out = {
        "preempt_to_resume_s": moves.pop("preempt_to_resume_s"),
        "steps_lost": moves.pop("steps_lost"),
        "climb_at_checkpoint_s": moves.pop("climb_at_checkpoint_s"),
        "overhead_ratio": round(min(walls["ladder"]) / min(walls["plain"]), 3),
        "goals": {"preempt_to_resume_s": 5.0, "steps_lost": moves["checkpoint_every_steps"],
                  "climb_at_checkpoint_s": moves["climb_goal_s"], "overhead_ratio": 1.10},
        "details": {**moves,
                    "overhead_ratio_median": round(statistics.median(walls["ladder"])
                                                   / statistics.median(walls["plain"]), 3),
                    "undisturbed_wall_s": {k: [round(w, 2) for w in v] for k, v in walls.items()},
                    "ladder_driver_hooks_s": [round(x, 3) for x in in_ladder_code],
                    "undisturbed_steps": args.steps, "step_time_s": 0.05,
                    "bench_wall_s": round(time.perf_counter() - started, 1)},
        "machine": probe.report(),
    }
    print(json.dumps(out), file=JSON_OUT, flush=True)  # Ray teardown may end the process


if __name__ == "__main__":
    from _json_out import json_stdout

    JSON_OUT = json_stdout()
    main()
