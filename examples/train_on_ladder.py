"""Train a real small model on a ladder: lose the top rung mid-training, resume lower, climb back.

Run it::

    python examples/train_on_ladder.py

It starts a LocalCluster (a head for the CPU rung, one "h100" node, one "a100" node: custom
resources, no real GPU needed) and trains a softmax-regression digit classifier (numpy,
scikit-learn's bundled digits) with Ray Tune on the ladder below, checkpointing every few
steps. Mid-training the h100 node is SIGKILLed (a spot preemption): the trial resumes from
its last checkpoint on a100. Later the h100 node is added back: the trial moves up at its
next checkpoint. It prints the trial's path across rungs, time and cost per rung, and the
final test accuracy, and checks that the model equals an uninterrupted run's.

The training is deterministic: the batch of step ``t`` is drawn from ``(seed, t)`` and
the checkpoint holds the whole state (weights, bias, step), so a resumed run is
bit-identical to an uninterrupted one with the same seed and step count.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

LADDER_YAML = """
name: train-ladder
description: on-prem H100 first, cloud A100 next, on-prem CPUs last.
policy: {promotion_hysteresis: 2, probe_interval_s: 0.5}
rungs:
  - name: h100
    resources: {ladder/h100: 1}
    label_selector: {ladder.rung: h100}
    cost_per_hour: 12.3
    tags: {jurisdiction: eu, site: onprem}
    params: {step_time_s: 0.05}
  - name: a100
    resources: {ladder/a100: 1}
    cost_per_hour: 4.1
    tags: {jurisdiction: us, site: cloud, spot: "true"}
    params: {step_time_s: 0.08}
  - name: cpu
    num_cpus: 1
    label_selector: {ladder.pool: cpu}
    cost_per_hour: 0.1
    tags: {jurisdiction: eu, site: onprem}
    params: {step_time_s: 0.15, dtype: float32}
"""

#: Node types of the demo cluster: the head hosts the CPU rung (label ladder.pool=cpu).
NODE_TYPES: dict[str, dict[str, Any]] = {
    "h100": {"num_cpus": 1, "resources": {"ladder/h100": 1}, "labels": {"ladder.rung": "h100"}},
    "a100": {"num_cpus": 1, "resources": {"ladder/a100": 1}, "labels": {"ladder.rung": "a100"}},
}
HEAD: dict[str, Any] = {"num_cpus": 2, "labels": {"ladder.pool": "cpu"}}

N_CLASSES = 10


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's bundled 8x8 digits (no download), scaled to [0, 1], fixed split.

    The CSV that scikit-learn ships is read directly: importing scikit-learn (and SciPy)
    takes seconds, which a resuming trial would pay before its first step.
    """
    spec = importlib.util.find_spec("sklearn")
    path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz" if spec else None
    if path is not None and path.exists():
        data = np.loadtxt(path, delimiter=",")
        x, y = data[:, :-1], data[:, -1]
    else:  # a layout we do not know: let scikit-learn read it
        from sklearn.datasets import load_digits

        digits = load_digits()
        x, y = digits.data, digits.target
    x = x.astype(np.float64) / 16.0
    y = y.astype(np.int64)
    return x[:1500], y[:1500], x[1500:], y[1500:]


def init_model(n_features: int = 64) -> dict[str, Any]:
    """Zero weights: the whole state a checkpoint must hold is (w, b, step)."""
    return {"w": np.zeros((n_features, N_CLASSES)), "b": np.zeros(N_CLASSES), "step": 0}


def sgd_step(model: dict[str, Any], x: np.ndarray, y: np.ndarray, config: dict[str, Any],
             dtype: str = "float64") -> float:
    """One mini-batch step of softmax regression; the batch depends on (seed, step) only."""
    step = model["step"]
    rng = np.random.default_rng([int(config.get("seed", 0)), step])
    idx = rng.choice(len(x), size=int(config.get("batch_size", 64)), replace=False)
    xb, yb = x[idx].astype(dtype), y[idx]
    w, b = model["w"].astype(dtype), model["b"].astype(dtype)
    logits = xb @ w + b
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    loss = float(-np.log(p[np.arange(len(yb)), yb] + 1e-12).mean())
    p[np.arange(len(yb)), yb] -= 1.0
    lr = float(config.get("lr", 0.5))
    model["w"] = (w - lr * (xb.T @ p) / len(yb)).astype(np.float64)
    model["b"] = (b - lr * p.mean(axis=0)).astype(np.float64)
    model["step"] = step + 1
    return loss


def accuracy(model: dict[str, Any], x: np.ndarray, y: np.ndarray) -> float:
    """Share of correct predictions."""
    return float(((x @ model["w"] + model["b"]).argmax(axis=1) == y).mean())


def save_model(model: dict[str, Any], path: str) -> None:
    np.savez(os.path.join(path, "model.npz"), w=model["w"], b=model["b"], step=model["step"])


def load_model(path: str) -> dict[str, Any]:
    with np.load(os.path.join(path, "model.npz")) as f:
        return {"w": f["w"].copy(), "b": f["b"].copy(), "step": int(f["step"])}


def train_digits(config: dict[str, Any]) -> None:
    """The Tune training function: resumes from Tune's checkpoint, adapts to its rung.

    Config keys: ``steps``, ``checkpoint_every``, ``lr``, ``batch_size``, ``seed``;
    ``step_log`` (optional) appends one JSON line per step (step, rung, time) so a
    watcher can see where each step ran.
    """
    from ray import tune

    from ray_ladder.tune import current_rung

    try:
        rung_name, params = current_rung().name, current_rung().params
    except RuntimeError:  # the same function also runs under plain Tune (the benchmark)
        rung_name, params = None, {}
    dtype = params.get("dtype", "float64")
    step_time_s = float(config.get("step_time_s", params.get("step_time_s", 0.0)))
    x, y, x_test, y_test = load_data()
    model = init_model(x.shape[1])
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            model = load_model(d)
    resumed_from = model["step"]
    steps, every = int(config["steps"]), int(config.get("checkpoint_every", 5))
    log = config.get("step_log")
    while model["step"] < steps:
        t0 = time.perf_counter()
        loss = sgd_step(model, x, y, config, dtype)
        # digits is tiny: pace each step like a bigger model on this rung would take
        time.sleep(max(0.0, step_time_s - (time.perf_counter() - t0)))
        step = model["step"]
        if log:
            with open(log, "a") as f:
                f.write(json.dumps({"step": step, "rung": rung_name, "time": time.time(),
                                    "resumed_from": resumed_from, "pid": os.getpid()}) + "\n")
        metrics: dict[str, Any] = {"step": step, "loss": loss}
        if rung_name:
            metrics["rung"] = rung_name
        if step % every == 0 or step == steps:
            metrics["test_accuracy"] = accuracy(model, x_test, y_test)
            with tempfile.TemporaryDirectory() as d:
                save_model(model, d)
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))
        else:
            tune.report(metrics)


def train_reference(config: dict[str, Any]) -> dict[str, Any]:
    """The same training, uninterrupted, in this process (float64 throughout)."""
    x, y, _, _ = load_data()
    model = init_model(x.shape[1])
    while model["step"] < int(config["steps"]):
        sgd_step(model, x, y, config)
    return model


class StepLog:
    """Reads the JSON lines ``train_digits`` appends, and waits on them."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        lines = self.path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def wait(self, condition: Callable[[list[dict[str, Any]]], Any], timeout_s: float = 120.0,
             what: str = "") -> Any:
        """Poll until ``condition(entries)`` is truthy; return it (TimeoutError otherwise)."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = condition(self.read())
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"step log: {what or 'condition'} not met in {timeout_s}s")
            time.sleep(0.02)


def first_step_on(rung: str, after: float) -> Callable[[list[dict[str, Any]]], Any]:
    """Condition: the first logged step on ``rung`` later than wall time ``after``."""
    def cond(entries: list[dict[str, Any]]) -> Any:
        return next((e for e in entries if e["rung"] == rung and e["time"] > after), None)
    return cond


class FitThread(threading.Thread):
    """``tuner.fit()`` in a thread, so the main thread can kill and add nodes (Ray's rule)."""

    def __init__(self, tuner: Any) -> None:
        super().__init__(daemon=True, name="tuner-fit")
        self.tuner = tuner
        self.results: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.results = self.tuner.fit()
        except BaseException as err:  # re-raised by join_results in the main thread
            self.error = err

    def join_results(self, timeout_s: float = 300.0) -> Any:
        self.join(timeout_s)
        if self.is_alive():
            raise TimeoutError(f"tuner.fit() still running after {timeout_s}s")
        if self.error is not None:
            raise self.error
        return self.results


def main() -> None:
    from ray import tune

    from ray_ladder import Ladder
    from ray_ladder.testing import LocalCluster
    from ray_ladder.tune import Tuner, rung_history, with_ladder

    ladder = Ladder.from_yaml(LADDER_YAML)
    config = {"steps": 80, "checkpoint_every": 5, "lr": 0.5, "batch_size": 64, "seed": 7}
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(NODE_TYPES, head=HEAD) as cluster:
        log = StepLog(Path(tmp) / "steps.jsonl")
        tuner = Tuner(
            with_ladder(train_digits, ladder),
            param_space={**config, "step_log": str(log.path)},
            run_config=tune.RunConfig(
                storage_path=str(Path(tmp) / "results"), verbose=0,
                failure_config=tune.FailureConfig(max_failures=3)),
        )
        fit = FitThread(tuner)
        fit.start()
        log.wait(lambda es: any(e["rung"] == "h100" and e["step"] >= 22 for e in es), 180,
                 "22 steps on h100")
        killed_at = time.time()
        cluster.remove_node(cluster.nodes("h100")[0])  # SIGKILL: a spot preemption
        print(f"killed the h100 node at step {log.read()[-1]['step']}")
        first = log.wait(first_step_on("a100", killed_at), 120, "a step on a100")
        print(f"  resumed on a100 at step {first['step']} "
              f"{first['time'] - killed_at:.1f}s after the kill")
        log.wait(lambda es: sum(e["rung"] == "a100" for e in es) >= 15, 120, "15 a100 steps")
        added_at = time.time()
        cluster.add_node("h100")
        print("h100 node added back")
        back = log.wait(first_step_on("h100", added_at), 120, "a step on h100 again")
        print(f"  back on h100 at step {back['step']} {back['time'] - added_at:.1f}s later")
        result = fit.join_results()[0]
        with result.checkpoint.as_directory() as d:
            model = load_model(d)  # before the temporary storage goes away

    print("\npath across rungs:")
    for span in rung_history(result):
        print(f"  {span.rung:5s} iterations {span.first_iteration}-{span.last_iteration}  "
              f"{span.seconds():5.1f}s  ${span.cost:.5f}  left: {span.ended_by or '-'}")
    block = result.metrics["ladder"]
    for rung, t in block["per_rung"].items():
        print(f"  total on {rung}: {t['seconds']:.1f}s, ${t['cost']:.5f}")
    reference = train_reference(config)
    same = np.array_equal(model["w"], reference["w"]) and np.array_equal(model["b"],
                                                                        reference["b"])
    print(f"final test accuracy {result.metrics['test_accuracy']:.3f} after "
          f"{model['step']} steps; identical to an uninterrupted run: {same}")


if __name__ == "__main__":
    main()
