"""The teams scenario's checkpoint moment, for ``bench/teams.py`` (its step log and count
are the ones ``tests/fleet/test_teams_tune_train_ray.py`` checks): a Tune trial bound to
team b borrows a's idle h100 units, a's demand arrives, the reclaim notice asks the trial
for a checkpoint and it resumes on ``l4`` from there. ``borrower_steps_lost_past_checkpoint``
counts the steps done on the unit after the checkpoint it resumed from (goal 0).

Each step of the training function appends one JSON line to a log:
``{"run", "step", "rung", "time", "resumed_from"}`` (``run``: one per start of the
function; ``resumed_from``: the checkpoint's step it started from).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from ray_ladder.core.spec import Ladder
from ray_ladder.demo.teams.scenario import GRACE_S, H100_UNITS, LOWER, SHARED, team_fleet

#: A trial's ladder: the shared h100, then b's own rung.
TRIAL_LADDER = Ladder.from_yaml(f"""
name: teams-trial
policy: {{probe_interval_s: 0.25}}
rungs:
  - {{name: {SHARED}, resources: {{ladder/{SHARED}: 1}}}}
  - {{name: {LOWER['b']}, resources: {{ladder/{LOWER['b']}: 1}}}}
""")
#: A checkpoint every this many steps of 0.1 s, or at once on a notice.
EVERY = 20


def log_step(path: str, run: str, step: int, rung: str, resumed_from: int) -> None:
    """Append one step to the log at ``path``."""
    with open(path, "a") as f:
        f.write(json.dumps({"run": run, "step": step, "rung": rung, "time": time.time(),
                            "resumed_from": resumed_from}) + "\n")


def read_steps(path: Path) -> list[dict[str, Any]]:
    """The log's whole lines (a line being written is left out)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def runs(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The log cut into the runs of the training function (one per actor or group)."""
    out: list[list[dict[str, Any]]] = []
    for e in entries:
        if not out or out[-1][0]["run"] != e["run"]:
            out.append([])
        out[-1].append(e)
    return out


def steps_lost(entries: list[dict[str, Any]]) -> int:
    """Steps a run did past the checkpoint the next run resumed from (0: every move was
    at a checkpoint).

    Example:
        >>> log = [{"run": "x", "step": s, "resumed_from": 0} for s in (1, 2, 3)]
        >>> steps_lost(log + [{"run": "y", "step": 3, "resumed_from": 2}])
        1
    """
    cut = runs(entries)
    return sum(max(0, before[-1]["step"] - after[0]["resumed_from"])
               for before, after in zip(cut, cut[1:], strict=False))


def tune_fn(config: dict[str, Any]) -> None:
    """Steps of 0.1 s; a checkpoint every ``EVERY`` steps or when ``should_checkpoint()``
    says (a reclaim notice); runs until Tune stops the trial."""
    from ray import tune

    from ray_ladder.tune import current_rung, should_checkpoint

    run, step = uuid.uuid4().hex, 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            step = json.loads(Path(d, "state.json").read_text())["step"]
    resumed_from, rung = step, current_rung().name
    while True:
        time.sleep(0.1)
        step += 1
        log_step(config["log"], run, step, rung, resumed_from)
        if step % EVERY == 0 or should_checkpoint():
            with tempfile.TemporaryDirectory() as d:
                Path(d, "state.json").write_text(json.dumps({"step": step}))
                tune.report({"step": step}, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            tune.report({"step": step})


def _entry_h100(team: str) -> dict[str, Any]:
    from ray_ladder.cluster.grants import GrantReader

    return dict(((GrantReader().get(team) or {}).get("rungs") or {}).get(SHARED) or {})


def _wait(check: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (out := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the checkpoint run waited {timeout_s:.0f}s for {what}")
        time.sleep(0.05)
    return out


def run_trial(folder: Path, timeout_s: float = 120.0) -> dict[str, Any]:
    """Run the trial behind an arbiter with the scenario's fleet on the running cluster,
    reclaim a's units under it, stop once it stepped on l4; its figures."""
    from ray import tune

    from ray_ladder.demo.teams.script import _clean_up
    from ray_ladder.fleet import start_arbiter
    from ray_ladder.testing.demand import steady_demand
    from ray_ladder.tune import Tuner, with_ladder

    log, flag = folder / "steps.jsonl", folder / "stop"
    arbiter = start_arbiter(team_fleet(GRACE_S))
    tuner = Tuner(with_ladder(tune_fn, TRIAL_LADDER, team="b"), param_space={"log": str(log)},
                  run_config=tune.RunConfig(
                      storage_path=str(folder / "results"), verbose=0,
                      stop=lambda trial_id, result: flag.exists(),
                      failure_config=tune.FailureConfig(max_failures=3)))
    fit = threading.Thread(target=tuner.fit, daemon=True)
    fit.start()
    try:
        with contextlib.ExitStack() as demand:  # a's demand stands until b's trial ended
            try:
                _wait(lambda: sum(e["rung"] == SHARED for e in read_steps(log)) >= 5,
                      timeout_s, "b's trial to step on a's idle h100")
                demand.enter_context(steady_demand("a", "bench-a", {SHARED: H100_UNITS}))
                noticed_at = time.time()
                _wait(lambda: _entry_h100("b").get("noticed", 0) >= 1, timeout_s,
                      "a notice to b")
                deadline = float(_entry_h100("b").get("deadline") or 0.0)
                first = _wait(lambda: next((e for e in read_steps(log)
                                            if e["rung"] == LOWER["b"]
                                            and e["time"] > noticed_at), None),
                              timeout_s, "b's trial to resume on l4")
            finally:
                flag.touch()
                fit.join(120)
    finally:
        _clean_up(arbiter)
    entries = read_steps(log)
    last = max(e["time"] for e in entries if e["rung"] == SHARED)
    return {"borrower_steps_lost_past_checkpoint": steps_lost(entries),
            "borrower_trial_steps": len(entries),
            "borrower_trial_off_unit_before_deadline": last < deadline,
            "borrower_trial_notice_to_last_h100_step_s": round(last - noticed_at, 3),
            "borrower_trial_notice_to_l4_step_s": round(first["time"] - noticed_at, 3),
            "borrower_trial_notice_deadline_s": round(deadline - noticed_at, 3)}
