"""Data-parallel training on a ladder of worker-group shapes: lose the big node, resume on
two smaller ones, climb back when it returns.

Run it::

    python examples/train_ladder.py

It starts a LocalCluster with one 8-"GPU" node (``ladder/h100: 8``) and two 4-"GPU" nodes
(``ladder/a100: 4``): custom resources, no real GPU needed. A softmax-regression digit
classifier (numpy, scikit-learn's bundled digits) trains with Ray Train v2 on the ladder
below: four data-parallel workers of 2 GPUs each, gradients averaged across workers every
step, a checkpoint every few steps. Mid-run the 8-GPU node is SIGKILLed (a preemption):
Ray Train restarts the group from its last checkpoint on the two 4-GPU nodes. The node is
added back: the group moves up again at its next checkpoint. It prints the path across
rungs, time and cost per rung, and the final accuracy, which equals an uninterrupted run
with the same seed and the same global batch.

Why it is bit-identical: each step's global batch (64 samples, drawn from ``(seed, step)``)
is cut into 4 fixed shards. A worker computes the gradient of its shards (``grad_accum_steps``
shards each, so 4 workers x 1 and 2 workers x 2 cover the same 4); the workers exchange
the per-shard gradients and every one of them sums them in shard order: the same
floating-point sum on every shape, and in the reference.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")  # before ray.train is imported
# Ray Train's controller polls its workers this often (default 2 s): how soon it sees a
# lost worker and commits a checkpoint. The ladder observes capacity at the same polls.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np  # noqa: E402

LADDER_YAML = """
name: train-gang
description: one 8-GPU node first; two 4-GPU nodes next; one 4-GPU node, accumulating.
policy: {promotion_hysteresis: 2, probe_interval_s: 0.25}
rungs:
  - name: h100x8
    resources: {ladder/h100: 2}          # one worker: 2 GPUs
    train: {workers: 4}                  # the gang: 4 workers, all on the 8-GPU node
    cost_per_hour: 98.4                  # the whole gang, per hour
    tags: {site: onprem, jurisdiction: eu}
    params: {grad_accum_steps: 1}
  - name: a100x8
    resources: {ladder/a100: 2}
    train: {workers: 4}                  # 2 workers on each 4-GPU node
    cost_per_hour: 32.8
    tags: {site: cloud, jurisdiction: eu, spot: "true"}
    params: {grad_accum_steps: 1}
  - name: a100x4
    resources: {ladder/a100: 2}
    train: {workers: 2}                  # one 4-GPU node: half the workers, twice the shards
    cost_per_hour: 16.4
    tags: {site: cloud, jurisdiction: eu, spot: "true"}
    params: {grad_accum_steps: 2}
"""

NODE_TYPES: dict[str, dict[str, Any]] = {
    "h100-node": {"num_cpus": 1, "resources": {"ladder/h100": 8}},
    "a100-node": {"num_cpus": 1, "resources": {"ladder/a100": 4}},
}
INITIAL = {"h100-node": 1, "a100-node": 2}

N_CLASSES = 10
HUB_NAMESPACE = "ray-ladder-examples"
SHARDS = 4  # shards of each global batch; workers x grad_accum_steps must equal this


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's bundled 8x8 digits (no download), scaled to [0, 1], fixed split.

    The CSV that scikit-learn ships is read directly: importing scikit-learn takes seconds,
    which a restarting worker would pay before its first step.
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


def shard_indices(config: dict[str, Any], step: int, n: int) -> list[np.ndarray]:
    """The global batch of ``step`` (from ``(seed, step)`` only), cut into SHARDS shards."""
    rng = np.random.default_rng([int(config.get("seed", 0)), step])
    idx = rng.choice(n, size=int(config.get("global_batch", 64)), replace=False)
    return np.array_split(idx, SHARDS)


def shard_gradient(w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Summed softmax-regression gradient of one shard."""
    logits = x @ w + b
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    return x.T @ p, p.sum(axis=0)


def apply(model: dict[str, Any], grads: list[tuple[np.ndarray, np.ndarray]],
          config: dict[str, Any]) -> None:
    """Sum the shard gradients in shard order and take one SGD step on the global batch."""
    gw, gb = np.zeros_like(model["w"]), np.zeros_like(model["b"])
    for shard_w, shard_b in grads:
        gw += shard_w
        gb += shard_b
    lr, batch = float(config.get("lr", 0.5)), int(config.get("global_batch", 64))
    model["w"] = model["w"] - lr * gw / batch
    model["b"] = model["b"] - lr * gb / batch
    model["step"] += 1


def accuracy(model: dict[str, Any], x: np.ndarray, y: np.ndarray) -> float:
    """Share of correct predictions."""
    return float(((x @ model["w"] + model["b"]).argmax(axis=1) == y).mean())


def save_model(model: dict[str, Any], path: str) -> None:
    np.savez(os.path.join(path, "model.npz"), w=model["w"], b=model["b"], step=model["step"])


def load_model(path: str) -> dict[str, Any]:
    with np.load(os.path.join(path, "model.npz")) as f:
        return {"w": f["w"].copy(), "b": f["b"].copy(), "step": int(f["step"])}


def init_model() -> dict[str, Any]:
    return {"w": np.zeros((64, N_CLASSES)), "b": np.zeros(N_CLASSES), "step": 0}


class GradientHub:
    """The workers' all-gather of shard gradients (a Ray actor on the head node).

    ``exchange`` returns every shard's gradient once all ``world`` workers of one group
    sent theirs for the step; the group's random token keeps a dead group's half-sent
    step apart from its successor's.
    """

    def __init__(self) -> None:
        self._slots: dict[tuple[str, int], dict[str, Any]] = {}

    async def exchange(self, token: str, step: int, world: int,
                       grads: dict[int, tuple[np.ndarray, np.ndarray]]) -> list[Any]:
        slot = self._slots.setdefault((token, step), {"grads": {}, "left": world,
                                                      "done": asyncio.Event()})
        slot["grads"].update(grads)
        if len(slot["grads"]) == SHARDS:
            slot["done"].set()
        await slot["done"].wait()
        out = [slot["grads"][s] for s in range(SHARDS)]
        slot["left"] -= 1
        if slot["left"] == 0:
            del self._slots[(token, step)]
        return out


def train_loop(config: dict[str, Any]) -> None:
    """The per-worker training function (Ray Train v2), on whichever shape the ladder chose.

    Config keys: ``steps``, ``checkpoint_every``, ``lr``, ``global_batch``, ``seed``,
    ``step_time_s``, ``hub`` (the gradient hub's name); optional ``step_log`` (rank 0 appends
    one JSON line per step: step, rung, world size, time, the step it resumed from) and
    ``stop_file`` (end at the first checkpoint after that file appears).
    """
    import ray
    import ray.train
    from ray.train.collective import broadcast_from_rank_zero

    import ray_ladder.train as lt

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    try:
        rung = lt.current_rung()
        name, accum = rung.name, int(rung.params.get("grad_accum_steps", 1))
    except RuntimeError:  # the same function runs under plain Ray Train (the benchmark)
        name, accum = None, SHARDS // world
    if world * accum != SHARDS:
        raise ValueError(f"{world} workers x {accum} accumulation steps != {SHARDS} shards")
    mine = range(rank * accum, (rank + 1) * accum)
    hub = ray.get_actor(config["hub"], namespace=HUB_NAMESPACE)
    token = broadcast_from_rank_zero(uuid.uuid4().hex if rank == 0 else None)
    x, y, x_test, y_test = load_data()
    model = init_model()
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            model = load_model(d)
    resumed_from = model["step"]
    steps, every = int(config["steps"]), int(config.get("checkpoint_every", 5))
    step_time_s, log = float(config.get("step_time_s", 0.0)), config.get("step_log")
    stop_file = config.get("stop_file")
    while model["step"] < steps:
        t0 = time.perf_counter()
        shards = shard_indices(config, model["step"], len(x))
        local = {s: shard_gradient(model["w"], model["b"], x[shards[s]], y[shards[s]])
                 for s in mine}
        apply(model, ray.get(hub.exchange.remote(token, model["step"], world, local)), config)
        # digits is tiny: pace each step like a bigger model would take
        time.sleep(max(0.0, step_time_s - (time.perf_counter() - t0)))
        step = model["step"]
        if log and rank == 0:
            with open(log, "a") as f:
                f.write(json.dumps({"step": step, "rung": name, "world": world,
                                    "time": time.time(), "resumed_from": resumed_from,
                                    "pid": os.getpid()}) + "\n")
        if step % every == 0 or step == steps:
            metrics = {"step": step, "rung": name, "world": world,
                       "test_accuracy": accuracy(model, x_test, y_test)}
            with tempfile.TemporaryDirectory() as d:
                if rank == 0:
                    save_model(model, d)
                ckpt = ray.train.Checkpoint.from_directory(d) if rank == 0 else None
                lt.report(metrics, checkpoint=ckpt)  # where the ladder may move the run up
            if stop_file and broadcast_from_rank_zero(rank == 0 and os.path.exists(stop_file)):
                return  # asked to end here (tests): the model so far is in that checkpoint


def train_reference(config: dict[str, Any]) -> dict[str, Any]:
    """The same training, uninterrupted, in this process: one worker computing all shards."""
    x, y, _, _ = load_data()
    model = init_model()
    while model["step"] < int(config["steps"]):
        shards = shard_indices(config, model["step"], len(x))
        apply(model, [shard_gradient(model["w"], model["b"], x[s], y[s]) for s in shards],
              config)
    return model


def start_hub(name: str) -> Any:
    """The gradient hub, pinned to the head node (a preemption never takes it)."""
    import ray

    from ray_ladder.testing import HEAD_TYPE, NODE_TYPE_LABEL

    return ray.remote(GradientHub).options(
        name=name, namespace=HUB_NAMESPACE, num_cpus=0,
        label_selector={NODE_TYPE_LABEL: HEAD_TYPE}).remote()


class StepLog:
    """Reads the JSON lines ``train_loop`` appends (rank 0, one per step), and waits on them."""

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
    """``trainer.fit()`` in a thread, so the main thread can kill and add nodes (Ray's rule)."""

    def __init__(self, trainer: Any) -> None:
        super().__init__(daemon=True, name="trainer-fit")
        self.trainer = trainer
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.trainer.fit()
        except BaseException as err:  # re-raised by join_result in the main thread
            self.error = err

    def join_result(self, timeout_s: float = 300.0) -> Any:
        self.join(timeout_s)
        if self.is_alive():
            raise TimeoutError(f"trainer.fit() still running after {timeout_s}s")
        if self.error is not None:
            raise self.error
        return self.result


def make_trainer(ladder: Any, config: dict[str, Any], storage: str, *,
                 storage_filesystem: Any = None, **kwargs: Any) -> Any:
    """A LadderTrainer of ``train_loop`` on ``ladder``, retrying lost nodes; checkpoints
    under ``storage`` (a local path, or a bucket path with ``storage_filesystem``, e.g.
    ``pyarrow.fs.S3FileSystem(endpoint_override="10.0.0.9:9000", scheme="http")``)."""
    # ray.train.RunConfig is this class when RAY_TRAIN_V2_ENABLED=1 was set before the first
    # `import ray.train`; naming the v2 module works even when something imported it earlier.
    from ray.train.v2.api.config import FailureConfig, RunConfig

    from ray_ladder.train import LadderTrainer

    return LadderTrainer(
        train_loop, ladder=ladder, train_loop_config=config,
        run_config=RunConfig(name=f"digits-{uuid.uuid4().hex[:8]}", storage_path=storage,
                             storage_filesystem=storage_filesystem,
                             failure_config=FailureConfig(max_failures=3)),
        **kwargs)


def main() -> None:
    from ray_ladder import Ladder
    from ray_ladder.testing import LocalCluster

    ladder = Ladder.from_yaml(LADDER_YAML)
    config = {"steps": 120, "checkpoint_every": 5, "lr": 0.5, "global_batch": 64,
              "seed": 7, "step_time_s": 0.1, "hub": "grad-hub"}
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(NODE_TYPES, initial=INITIAL,
                                                             log_to_driver=False) as cluster:
        hub = start_hub(config["hub"])  # noqa: F841  (the handle keeps the actor alive)
        log = StepLog(Path(tmp) / "steps.jsonl")
        fit = FitThread(make_trainer(ladder, {**config, "step_log": str(log.path)}, tmp))
        fit.start()
        log.wait(lambda es: any(e["rung"] == "h100x8" and e["step"] >= 27 for e in es), 180,
                 "27 steps on h100x8")
        killed_at = time.time()
        cluster.remove_node(cluster.nodes("h100-node")[0])  # SIGKILL: a spot preemption
        print(f"killed the 8-GPU node at step {log.read()[-1]['step']}")
        low = log.wait(first_step_on("a100x8", killed_at), 180, "a step on a100x8")
        print(f"  resumed on a100x8 (two 4-GPU nodes) at step {low['step']}, from the "
              f"checkpoint of step {low['resumed_from']}, {low['time'] - killed_at:.1f}s "
              "after the kill")
        log.wait(lambda es: sum(e["rung"] == "a100x8" for e in es) >= 20, 180, "20 a100x8 steps")
        cluster.add_node("h100-node")
        added_at = time.time()
        print("8-GPU node added back")
        back = log.wait(first_step_on("h100x8", added_at), 180, "a step on h100x8 again")
        print(f"  back on h100x8 at step {back['step']} (checkpoint of step "
              f"{back['resumed_from']}), {back['time'] - added_at:.1f}s after it registered")
        result = fit.join_result()
        with result.checkpoint.as_directory() as d:
            model = load_model(d)  # before the temporary storage goes away
        steps = log.read()

    print("\npath across rungs:", " -> ".join(result.ladder.path))
    for span in result.ladder.spans:
        on = [e["step"] for e in steps if e["rung"] == span.rung
              and span.start <= e["time"] <= (span.end or float("inf"))]
        where = f"steps {min(on)}-{max(on)}" if on else "no step"
        print(f"  {span.rung:7s} {span.workers} workers  {where:13s} {span.seconds():5.1f}s  "
              f"${span.cost:.4f}  left: {span.ended_by or '-'}")
    for rung, t in result.ladder.per_rung.items():
        print(f"  total on {rung}: {t['seconds']:.1f}s, ${t['cost']:.4f}")
    reference = train_reference(config)
    x, y, x_test, y_test = load_data()
    same = np.array_equal(model["w"], reference["w"]) and np.array_equal(model["b"],
                                                                        reference["b"])
    print(f"final test accuracy {accuracy(model, x_test, y_test):.3f} after {model['step']} "
          f"steps; uninterrupted run: {accuracy(reference, x_test, y_test):.3f}; "
          f"identical weights: {same}")


if __name__ == "__main__":
    main()
