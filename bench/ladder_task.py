"""@ladder_task against plain @ray.remote on one LocalCluster (head + h100 + a100 nodes).

Prints one JSON object:
  throughput_ratio              2,000 no-op tasks on the top rung, ladder / plain: median of 5
                                interleaved rounds' own ratios (goal >= 0.8)
  infeasible_skip_s             top rung absent: call -> first attempt running on the next rung
                                (goal <= 0.1); *_stale_view_s: submitted right after the kill
  pending_fallback_overshoot_s  top rung busy: time beyond pending_timeout_s (goal <= 0.2)
  native_busy_fallback_s        the same call on the native path (Ray falls at once)
  preempted_tasks_lost          top node SIGKILLed mid-run: ladder results missing (goal 0);
                                plain_preempted_tasks_stuck: plain tasks not done 3 s later
  *_preempt_answer_after_kill_s a running 3 s task's node killed: kill -> answer, per path
  throughput_ratio_native_vs_plain_fallback_strategy
                                the native path (a label-only ladder) / plain Ray with the same
                                label_selector + fallback_strategy, the primary absent: median
                                of 10 interleaved pairs of 600-call rounds (goal >= 0.9);
                                *_primary_busy: the same with h100 present and busy, where
                                Ray's scheduling is bimodal (see fallback(); every round is
                                printed with its mode and the raylets' CPU)
  large_result_ratio            40 calls each returning 8 MiB, ladder / plain, median of 4
                                interleaved rounds' own ratios, who goes first
                                alternating (goal <= 1.2)
  large_arg_ratio               40 calls each taking an 8 MiB argument by value (goal <= 1.2)
  orchestrator_*_mib            the orchestrator's memory (RSS, and RSS less shared pages)
                                sampled through the large phases
  machine                       cores, load average before and after, CPU busy and steal
"""

from __future__ import annotations

import gc
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import ray

from ray_ladder import Ladder, ladder_task, last_rung
from ray_ladder.testing import LocalCluster, NodeType, wait_until

LADDER = Ladder.from_dict({
    "name": "bench",
    "policy": {"probe_interval_s": 0.2, "pending_timeout_s": 10, "promotion_hysteresis": 1},
    "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}},
        {"name": "a100", "resources": {"ladder/a100": 1}},
        {"name": "cpu", "num_cpus": 1, "label_selector": {"ladder.node-type": "head"},
         "quality": 0.5},
    ],
})
NATIVE = Ladder.from_dict({
    "name": "bench-native",
    "policy": {"probe_interval_s": 0.2, "promotion_hysteresis": 1},
    "rungs": [
        {"name": "h100", "num_cpus": 1, "label_selector": {"ladder.rung": "h100"}},
        {"name": "a100", "num_cpus": 1, "label_selector": {"ladder.rung": "a100"}},
    ],
})
#: The same native ladder with its top rung on a label no node has (the primary absent):
#: Ray's fallback then goes to a100 at once, in one mode (see fallback_compare).
NATIVE_GONE = Ladder.from_dict({**NATIVE.model_dump(mode="json"), "name": "bench-native-gone",
                                "rungs": [{"name": "h100", "num_cpus": 1,
                                           "label_selector": {"ladder.rung": "gone"}},
                                          {"name": "a100", "num_cpus": 1,
                                           "label_selector": {"ladder.rung": "a100"}}]})
MiB = 2**20
#: Head (2 CPUs) runs the cpu rung; one 1-CPU node per accelerator rung. Each object store
#: holds the large phases' 40 x 8 MiB once without spilling (Ray spills above 80 % full),
#: not twice: plain Ray's path fits, a path that copies every value does not.
STORE = 512 * MiB
NODES = {name: {"num_cpus": 1, "resources": {f"ladder/{name}": 1},
                "labels": {"ladder.rung": name}, "object_store_memory": STORE}
         for name in ("h100", "a100")}
HEAD = NodeType(num_cpus=2, object_store_memory=STORE)
N_THROUGHPUT = 2000
ROUNDS = 5  # interleaved rounds of the throughput figure
NATIVE_ROUNDS = {"absent": 10, "busy": 4}  # of N_NATIVE tasks (bouncing: 2-3 s)
#: Raylet CPU seconds in a round of N_NATIVE fallback tasks: above BOUNCE_CPU_S it ran in
#: Ray's lease-bouncing mode (measured here: 0.7-3.8 s), below SPREAD_CPU_S it spread its
#: leases over both nodes (0.08-0.2 s); between, it changed mode within the round.
BOUNCE_CPU_S = 0.6
SPREAD_CPU_S = 0.25
#: Untimed calls just before each timed fallback round: its leases are taken first.
N_NATIVE_WARM = 100
N_NATIVE = 600
LARGE_ROUNDS = 4
PENDING_TIMEOUT_S = 1.0
RERUN_S = 3.0
N_LARGE = 40
LARGE_FLOATS = MiB  # float64: 8 MiB


def noop_fn(x, *, rung):
    return x


def started_fn(*, rung):
    return time.time(), rung.name


def sleepy_fn(i, seconds, marker=None, *, rung):
    if marker:
        Path(marker).touch()
    time.sleep(seconds)
    return i, rung.name


def big_result_fn(i, *, rung):
    return np.full(LARGE_FLOATS, i, dtype=np.float64)


def big_arg_fn(array, *, rung):
    return float(array[0])


noop = ladder_task(LADDER)(noop_fn)
big_result = ladder_task(LADDER)(big_result_fn)
big_arg = ladder_task(LADDER)(big_arg_fn)
noop_native = ladder_task(NATIVE, path="native")(noop_fn)
noop_native_gone = ladder_task(NATIVE_GONE, path="native")(noop_fn)
started = ladder_task(LADDER)(started_fn)
started_native = ladder_task(NATIVE, path="native")(started_fn)
sleepy = ladder_task(LADDER)(sleepy_fn)
sleepy_native = ladder_task(NATIVE, path="native")(sleepy_fn)


@ray.remote(resources={"ladder/h100": 1})
def plain_noop(x):
    return x


@ray.remote(resources={"ladder/h100": 1})
def plain_big_result(i):
    return np.full(LARGE_FLOATS, i, dtype=np.float64)


@ray.remote(resources={"ladder/h100": 1})
def plain_big_arg(array):
    return float(array[0])


@ray.remote(num_cpus=1, label_selector={"ladder.rung": "h100"},
            fallback_strategy=[{"label_selector": {"ladder.rung": "a100"}}])
def plain_fallback_noop(x):
    """Plain Ray with the same label fallback the native path uses (its own cost)."""
    return x


@ray.remote(num_cpus=1, label_selector={"ladder.rung": "gone"},
            fallback_strategy=[{"label_selector": {"ladder.rung": "a100"}}])
def plain_fallback_gone_noop(x):
    """The same with the primary absent (no node has its label)."""
    return x


@ray.remote(resources={"ladder/h100": 1})
def plain_sleepy(i, seconds):
    time.sleep(seconds)
    return i


@ray.remote(num_cpus=1, resources={"ladder/h100": 1}, max_retries=0)
def hold_h100(ready: str, release: str) -> None:
    """Hold the h100 node (its CPU and ladder/h100 slot) until ``release`` exists.

    A task, not an actor: it reuses a pooled worker instead of starting a process.
    """
    Path(ready).touch()
    deadline = time.monotonic() + 120
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def paired(ladder: list[float], plain: list[float]) -> float:
    """The median of interleaved rounds' own ratios (ladder / plain): only a round's two
    sides saw the same machine (its speed drifts here from one second to the next)."""
    return round(statistics.median(a / b for a, b in zip(ladder, plain, strict=True)), 3)


def rate(submit, n: int = N_THROUGHPUT) -> float:
    start = time.perf_counter()
    ray.get([submit(i) for i in range(n)])
    return n / (time.perf_counter() - start)


def raylet_cpu_s() -> float:
    """CPU seconds used so far by this cluster's raylets (one per node)."""
    import psutil

    session = _session_name()
    total = 0.0
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if proc.info["name"] == "raylet" and any(
                    session in arg for arg in proc.info["cmdline"] or ()):
                times = proc.cpu_times()
                total += times.user + times.system
        except psutil.Error:
            continue
    return total


def _session_name() -> str:
    return Path(ray._private.worker._global_node.get_session_dir_path()).name


def fallback_round(submit) -> tuple[float, str, float]:
    """One round of N_NATIVE calls: (tasks/s, Ray's scheduling mode, raylet CPU s)."""
    ray.get([submit(i) for i in range(N_NATIVE_WARM)])
    before = raylet_cpu_s()
    tasks_per_s = rate(submit, N_NATIVE)
    cpu = raylet_cpu_s() - before
    mode = "bounce" if cpu > BOUNCE_CPU_S else "spread" if cpu < SPREAD_CPU_S else "mixed"
    return tasks_per_s, mode, cpu


def fallback_compare(rounds: dict[str, list[tuple[float, str, float]]],
                     modes: tuple[str, ...]) -> tuple[float | None, str | None, dict]:
    """The median of interleaved pairs' own ratios (native / plain) where both rounds ran
    in the same mode of Ray's scheduling, the first of ``modes`` with such a pair."""
    native, plain = rounds["native"], rounds["plain"]
    pairs: dict[str, list[float]] = {m: [] for m in modes}
    for (n_rate, n_mode, _), (p_rate, p_mode, _) in zip(native, plain, strict=True):
        if n_mode == p_mode and n_mode in pairs:
            pairs[n_mode].append(n_rate / p_rate)
    mode = next((m for m in modes if pairs[m]), None)
    ratio = round(statistics.median(pairs[mode]), 3) if mode else None
    return ratio, mode, {
        "pair_ratios": {m: [round(r, 3) for r in v] for m, v in pairs.items()},
        "modes": {name: [m for _, m, _ in runs] for name, runs in rounds.items()},
        "raylet_cpu_s": {name: [round(c, 2) for _, _, c in runs]
                         for name, runs in rounds.items()},
        "tasks_per_s": {name: [round(r) for r, _, _ in runs] for name, runs in rounds.items()},
    }


def fallback() -> dict[str, object]:
    """The native path against plain Ray's ``label_selector`` + ``fallback_strategy``.

    With the primary (h100) present and busy, Ray here either leases a worker on a100 at
    once ("spread", ~1,300-1,800 no-op tasks/s) or the head's and h100's raylets bounce
    the extra lease request between them (grant-or-reject spillback), burning ~1.3 CPU-s
    each per 1,000 tasks while the one h100 worker runs alone ("bounce", ~200-450/s), for
    plain tasks and native calls alike and at random from round to round (more often
    after a pause). With the primary absent, Ray's fallback sends every lease to a100 in
    one mode: the goal's ratio is measured there; the busy-primary ratio is printed too.
    """
    cases = {"absent": {"native": noop_native_gone.remote,
                        "plain": plain_fallback_gone_noop.remote},
             "busy": {"native": noop_native.remote, "plain": plain_fallback_noop.remote}}
    rounds = {c: {"native": [], "plain": []} for c in cases}
    for rep in range(max(NATIVE_ROUNDS.values())):  # interleaved: noise hits both alike
        for case, paths in cases.items():
            for name, submit in paths.items():
                if rep < NATIVE_ROUNDS[case]:
                    rounds[case][name].append(fallback_round(submit))
    absent, _, absent_rounds = fallback_compare(rounds["absent"], ("spread",))
    busy, busy_mode, busy_rounds = fallback_compare(rounds["busy"], ("spread", "bounce"))
    return {
        "throughput_ratio_native_vs_plain_fallback_strategy": absent,
        "fallback_primary_absent": absent_rounds,
        "throughput_ratio_native_vs_plain_fallback_strategy_primary_busy": busy,
        "fallback_primary_busy_compared_in_mode": busy_mode,
        "fallback_primary_busy": busy_rounds,
    }


def throughput() -> dict[str, object]:
    paths = {"plain": plain_noop.remote, "ladder": noop.remote}
    rates: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(ROUNDS):  # interleaved: machine noise hits every path alike
        for name, submit in paths.items():
            rates[name].append(rate(submit))
    med = {k: statistics.median(v) for k, v in rates.items()}
    return {
        "plain_tasks_per_s": round(med["plain"]),
        "ladder_tasks_per_s": round(med["ladder"]),
        "throughput_ratio": paired(rates["ladder"], rates["plain"]),
        "throughput_rounds_tasks_per_s": {k: [round(x) for x in v] for k, v in rates.items()},
    }


def large() -> dict[str, object]:
    """40 calls returning 8 MiB each, and 40 calls taking 8 MiB arguments by value."""
    arrays = [np.full(LARGE_FLOATS, i, dtype=np.float64) for i in range(N_LARGE)]

    def timed(submit, inputs, check, ladder: bool) -> float:
        gc.collect()
        time.sleep(0.3)  # the last run's objects are freed (asynchronously) first
        start = time.perf_counter()
        refs = [submit(x) for x in inputs]
        out = ray.get(refs)
        took = time.perf_counter() - start
        assert all(check(i, v) for i, v in enumerate(out))
        if ladder:  # the same rung as plain Ray's: h100
            assert {last_rung(r) for r in refs} == {"h100"}
        return took

    def results(i, a):
        return a.shape == (LARGE_FLOATS,) and a[0] == i

    def args(i, v):
        return v == float(i)

    runs = {"plain_result": (plain_big_result.remote, range(N_LARGE), results, False),
            "ladder_result": (big_result.remote, range(N_LARGE), results, True),
            "plain_arg": (plain_big_arg.remote, arrays, args, False),
            "ladder_arg": (big_arg.remote, arrays, args, True)}
    ray.get([plain_big_result.remote(0), big_result.remote(0),
             plain_big_arg.remote(arrays[0]), big_arg.remote(arrays[0])])  # warm
    from _machine import PeakMemory

    from ray_ladder.task.orchestrator.registry import get_orchestrator

    status = ray.get(get_orchestrator().status.remote())
    times: dict[str, list[float]] = {name: [] for name in runs}
    with PeakMemory(status["pid"]) as mem:
        base_rss, base_private = mem.rss, mem.private
        for i in range(LARGE_ROUNDS):  # who goes first in a pair alternates by round
            order = list(runs) if i % 2 == 0 else ["ladder_result", "plain_result",
                                                   "ladder_arg", "plain_arg"]
            for name in order:
                times[name].append(timed(*runs[name]))
    return {
        "large_calls": N_LARGE, "large_mib_each": LARGE_FLOATS * 8 // MiB,
        "large_result_ratio": paired(times["ladder_result"], times["plain_result"]),
        "large_arg_ratio": paired(times["ladder_arg"], times["plain_arg"]),
        "large_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "orchestrator_rss_mib_before_large": round(base_rss / MiB, 1),
        "orchestrator_peak_rss_mib": round(mem.rss / MiB, 1),
        "orchestrator_private_mib_before_large": round(base_private / MiB, 1),
        "orchestrator_peak_private_mib": round(mem.private / MiB, 1),
    }


def start_delay(task) -> tuple[float, str]:
    t0 = time.time()
    began, rung = ray.get(task.remote(), timeout=60)
    return began - t0, rung


def kill_h100(cluster: LocalCluster) -> float:
    node = cluster.nodes("h100")[0]
    cluster.remove_node(node)
    return time.monotonic()


def restore_h100(cluster: LocalCluster) -> float:
    cluster.add_node("h100")
    added = time.monotonic()
    wait_until(lambda: ray.get(started.remote())[1] == "h100"
               and ray.get(started_native.remote())[1] == "h100",
               timeout_s=60, interval_s=0.05, message="both paths back on h100")
    return time.monotonic() - added


def infeasible(cluster: LocalCluster) -> dict[str, float]:
    alive = sum(n["Alive"] for n in ray.nodes())
    kill_h100(cluster)
    stale, rung = start_delay(started)  # submitted before anyone saw the node die
    assert rung == "a100", rung
    wait_until(lambda: sum(n["Alive"] for n in ray.nodes()) == alive - 1, timeout_s=30,
               message="the GCS marks h100 dead")
    time.sleep(3 * LADDER.policy.probe_interval_s)  # let both capacity views refresh
    skips = [start_delay(started) for _ in range(5)]
    native = [start_delay(started_native) for _ in range(5)]
    assert {r for _, r in skips + native} == {"a100"}
    plain = plain_noop.remote(0)
    plain_ran = bool(ray.wait([plain], timeout=2)[0])
    ray.cancel(plain)
    climb = restore_h100(cluster)
    return {
        "infeasible_skip_s": round(statistics.median(d for d, _ in skips), 4),
        "native_infeasible_skip_s": round(statistics.median(d for d, _ in native), 4),
        "infeasible_skip_stale_view_s": round(stale, 3),
        "plain_infeasible_ran_within_2s": plain_ran,
        "climb_back_after_add_node_s": round(climb, 2),
    }


def blocked(task):
    """Start ``task`` while a plain task holds the h100 node (feasible, never free)."""
    with tempfile.TemporaryDirectory() as tmp:
        ready, release = Path(tmp) / "ready", Path(tmp) / "release"
        blocker = hold_h100.remote(str(ready), str(release))
        wait_until(ready.exists, timeout_s=60, message="blocker holds h100")
        try:
            return start_delay(task)
        finally:
            release.touch()
            ray.get(blocker)
            _back_on_h100(task)


def _back_on_h100(task) -> None:
    """Wait until ``task`` lands on h100 again."""
    # The busy mark clears once h100 shows a free slot again.
    wait_until(lambda: ray.get(task.remote())[1] == "h100", timeout_s=60,
               message="back on h100 after the blocker left")


def pending() -> dict[str, float]:
    task = started.options(pending_timeout_s=PENDING_TIMEOUT_S)
    blocked(task)  # warms the a100 workers of this path first
    waited, rung = blocked(task)
    assert rung == "a100", rung
    blocked(started_native)  # and those of the native path
    native_wait, native_rung = blocked(started_native)
    assert native_rung == "a100", native_rung
    return {
        "pending_timeout_s": PENDING_TIMEOUT_S,
        "pending_fallback_overshoot_s": round(waited - PENDING_TIMEOUT_S, 3),
        "native_busy_fallback_s": round(native_wait, 3),
    }


def preemption(cluster: LocalCluster) -> dict[str, float]:
    n = 100
    refs = [sleepy.remote(i, 0.02) for i in range(n)]
    plain = [plain_sleepy.remote(i, 0.02) for i in range(n // 2)]
    time.sleep(1.0)  # mid-run: some done, one running, the rest queued
    killed = kill_h100(cluster)
    results = ray.get(refs, timeout=90)
    lost = sum(1 for i, (value, _) in enumerate(results) if value != i)
    ladder_done = time.monotonic() - killed
    stuck = len(ray.wait(plain, num_returns=len(plain), timeout=3)[1])
    for ref in plain:
        ray.cancel(ref)
    restore_h100(cluster)
    return {"preempted_tasks": n, "preempted_tasks_lost": lost,
            "preempted_batch_done_after_kill_s": round(ladder_done, 2),
            "plain_preempted_tasks": len(plain), "plain_preempted_tasks_stuck": stuck}


def recovery(cluster: LocalCluster, tmp: Path) -> dict[str, object]:
    """Per path: a running task's node is SIGKILLed; time from the kill to its answer."""
    out: dict[str, object] = {"preempt_task_s": RERUN_S}
    paths = (("orchestrated", sleepy), ("native", sleepy_native))
    for n, (name, task) in enumerate(paths):
        marker = tmp / name
        ref = task.remote(n, RERUN_S, str(marker))
        wait_until(marker.exists, timeout_s=60, message=f"{name} task running")
        killed = kill_h100(cluster)
        value, rung = ray.get(ref, timeout=90)
        # A re-run elsewhere answers about preempt_task_s after the kill. LocalCluster
        # SIGKILLs the raylet; a worker can outlive it and still deliver its answer.
        out[f"{name}_preempt_answer_after_kill_s"] = round(time.monotonic() - killed, 2)
        out[f"{name}_preempt_answer_rung"] = rung
        if n < len(paths) - 1:
            restore_h100(cluster)
    return out


def main() -> dict[str, object]:
    from _machine import MachineProbe

    probe = MachineProbe()
    begin = time.monotonic()
    with LocalCluster(NODES, head=HEAD, log_to_driver=False) as cluster:
        # Warm the workers of every path on every node (startup is not what we measure).
        ray.get([plain_noop.remote(0), noop.remote(0), noop_native.remote(0),
                 plain_fallback_noop.remote(0), noop_native_gone.remote(0),
                 plain_fallback_gone_noop.remote(0)])
        ray.get([started.remote(), started_native.remote(), sleepy.remote(0, 0),
                 sleepy_native.remote(0, 0)])
        out: dict[str, object] = {}
        phases: dict[str, float] = {"start": round(time.monotonic() - begin, 1)}
        with tempfile.TemporaryDirectory() as tmp:
            for name, phase in (("throughput", throughput), ("fallback", fallback),
                                ("large", large),
                                ("pending", pending),
                                ("infeasible", lambda: infeasible(cluster)),
                                ("preemption", lambda: preemption(cluster)),
                                ("recovery", lambda: recovery(cluster, Path(tmp)))):
                t0 = time.monotonic()
                out.update(phase())
                phases[name] = round(time.monotonic() - t0, 1)
        out["phase_s"] = phases
    out["goals"] = {"throughput_ratio": ">= 0.8", "infeasible_skip_s": "<= 0.1",
                    "pending_fallback_overshoot_s": "<= 0.2", "preempted_tasks_lost": 0,
                    "throughput_ratio_native_vs_plain_fallback_strategy": ">= 0.9",
                    "large_result_ratio": "<= 1.2", "large_arg_ratio": "<= 1.2"}
    out["bench_s"] = round(time.monotonic() - begin, 1)
    out["machine"] = probe.report()
    return out


if __name__ == "__main__":
    from _json_out import json_stdout

    out = json_stdout()
    print(json.dumps(main()), file=out, flush=True)
