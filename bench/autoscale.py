"""Stock-out and climb-back timings of the autoscaler hook on Ray's fake autoscaler (JSON out).

Run: .venv/bin/python bench/autoscale.py   (about 1.5 min; starts and stops its own cluster)

Story: the cloud refuses h100 launches. Phase 0 (plain Ray): a task asks for h100 for a few
seconds; the autoscaler retries the launch every update and nothing answers. Phase 1 (the
ladder): the hook asks for h100, sees the refusal in the autoscaler's records, asks for a100,
and work is served there. Phase 2: h100 is allowed again; the hook's next damped retry gets
it, traffic moves after the hysteresis, a100's request is released and Ray's idle timeout
returns the node. Every term is printed, in seconds, measured on the wall clock.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import ray

from ray_ladder import Ladder
from ray_ladder.autoscale import start_hook, stop_hook
from ray_ladder.autoscale.fake.cluster import FakeAutoscalingCluster, fake_worker_type
from ray_ladder.testing import wait_until

LADDER = Ladder.from_yaml("""
name: bench-as
policy: {promotion_hysteresis: 2, probe_interval_s: 0.5}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9}
  - {name: cpu, num_cpus: 0, resources: {ladder/cpu: 1}, quality: 0.5}
""")
# cpu has its own resource (head only), so cpu-rung backlog is no demand for GPU nodes.
OPTIONS = {"retry_initial_s": 5.0, "retry_max_s": 10.0, "provision_timeout_s": 60.0,
           "drain_s": 2.0, "interval_s": 0.5}
PLAIN_WINDOW_S = 8.0
HOLD_STOCKOUT_S = 12.0


@ray.remote(max_retries=0)
def where(rung: str) -> str:
    return ray.get_runtime_context().get_node_labels().get("ladder.node-type", "")


class Recorder:
    """Polls nodes and sends a task every 0.1 s to the serving rung; keeps timestamps."""

    def __init__(self, hook: Any) -> None:
        self.hook = hook
        self.first_alive: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.sent: list[tuple[float, str, Any]] = []
        self.answers: list[tuple[float, str, str]] = []  # (done time, rung, node type)
        self.errors = 0
        self.events: dict[tuple, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=f, daemon=True)
                         for f in (self._nodes, self._send, self._collect)]

    def start(self) -> Recorder:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)

    def _nodes(self) -> None:
        while not self._stop.wait(0.1):
            now = time.time()
            alive = {n["Labels"].get("ladder.node-type") for n in ray.nodes() if n["Alive"]}
            for kind in alive:
                self.first_alive.setdefault(kind, now)
            for kind in list(self.first_alive):
                if kind not in alive:
                    self.gone.setdefault(kind, now)

    def _send(self) -> None:
        while not self._stop.wait(0.1):
            state = ray.get(self.hook.state.remote(), timeout=30)
            for e in state.get("events", []):  # the hook keeps only its last 50
                self.events[(e["time"], e["kind"], e["rung"])] = e
            rung = state.get("serving")
            if rung:
                self.sent.append((time.time(), rung,
                                  where.options(**LADDER.rung(rung).placement()).remote(rung)))

    def _collect(self) -> None:
        done = 0
        while not self._stop.is_set() or done < len(self.sent):
            pending = [ref for _, _, ref in self.sent[done:]]
            if not pending:
                time.sleep(0.05)
                continue
            try:
                node = ray.get(pending[0], timeout=60)
                self.answers.append((time.time(), self.sent[done][1], node))
            except Exception:
                self.errors += 1
            done += 1

    def first_answer(self, node_type: str, after: float = 0.0) -> float:
        return min(t for t, _, node in self.answers if node == node_type and t >= after)


def _event(events: list[dict[str, Any]], kind: str, rung: str, after: float = 0.0) -> float:
    return min(e["time"] for e in events
               if e["kind"] == kind and e["rung"] == rung and e["time"] >= after)


def _provider(events: list[dict], what: str, node_type: str, after: float = 0.0) -> float:
    return min(e["time"] for e in events
               if e["event"] == what and e["node_type"] == node_type and e["time"] >= after)


def main() -> dict[str, Any]:
    from _machine import MachineProbe

    probe = MachineProbe()
    cluster = FakeAutoscalingCluster(
        {n: fake_worker_type({f"ladder/{n}": 1}, labels={"ladder.node-type": n})
         for n in ("h100", "a100")},
        head_resources={"CPU": 1, "ladder/cpu": 8}, schedule="h100 unavailable",
        idle_timeout_minutes=0.1)
    t_boot = time.time()
    cluster.start()
    try:
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        boot_s = time.time() - t_boot
        # Phase 0: plain Ray. A task that needs h100 waits; the autoscaler retries the launch.
        plain = where.options(resources={"ladder/h100": 1}).remote("h100")
        ready, _ = ray.wait([plain], timeout=PLAIN_WINDOW_S)
        plain_refusals = sum(1 for e in cluster.events() if e["event"] == "refused")
        ray.cancel(plain, force=True)
        wait_until(lambda: not any(e["event"] == "refused" and e["time"] > time.time() - 1.5
                                   for e in cluster.events()), 30, 0.2, "plain demand gone")
        t_plain_end = time.time()
        # Phase 1: the ladder.
        hook = start_hook(LADDER, OPTIONS)
        rec = Recorder(hook).start()
        wait_until(lambda: any(node == "a100" for _, _, node in rec.answers), 120, 0.1,
                   "answers from a100")
        time.sleep(HOLD_STOCKOUT_S)  # the stock-out lasts: the hook retries h100, damped
        t_allow = time.time()
        cluster.set_schedule(None)
        wait_until(lambda: any(n == "h100" and t >= t_allow for t, _, n in rec.answers), 120,
                   0.1, "answers from h100")
        wait_until(lambda: "a100" in rec.gone, 120, 0.1, "a100 node returned")
        time.sleep(0.5)
        rec.stop()
        hook_events = sorted(rec.events.values(), key=lambda e: e["time"])
        events = cluster.events()
        stop_hook(LADDER.name)
    finally:
        ray.shutdown()
        sid = cluster.sid
        cluster.shutdown()
    from ray_ladder.autoscale.fake.cluster import _session_pids

    t_refuse = _provider(events, "refused", "h100", t_plain_end)
    t_detect = _event(hook_events, "stockout", "h100", t_plain_end)
    t_a100_launch = _provider(events, "launching", "a100")
    t_a100_answer = rec.first_answer("a100")
    t_h100_launch = _provider(events, "launching", "h100", t_allow)
    t_probe = max(e["time"] for e in hook_events
                  if e["kind"] == "probe" and e["rung"] == "h100" and e["time"] <= t_h100_launch)
    t_retry = max(t_probe, t_allow)  # a retry already running when capacity returned counts 0
    t_h100_up = rec.first_alive["h100"]
    t_promoted = _event(hook_events, "transition", "h100", t_allow)  # the climb to h100
    t_h100_answer = rec.first_answer("h100", t_allow)
    t_released = _event(hook_events, "released", "a100", t_allow)
    t_a100_gone = rec.gone["a100"]
    refusals_ladder = [e for e in events if e["event"] == "refused" and t_plain_end <= e["time"]]
    stockout_window = t_allow - t_refuse
    r = lambda x: round(x, 2)  # noqa: E731
    return {
        "machine": probe.report(),
        "cluster_boot_s": r(boot_s),
        "stockout_to_fallback_node_s": r(t_a100_answer - t_refuse),
        "stockout_terms": {
            "refusal_to_hook_detects_s": r(t_detect - t_refuse),
            "detect_to_a100_launch_start_s": r(t_a100_launch - t_detect),
            "a100_node_boot_s": r(rec.first_alive["a100"] - t_a100_launch),
            "node_up_to_first_answer_s": r(t_a100_answer - rec.first_alive["a100"]),
        },
        "capacity_return_to_top_s": r(t_h100_answer - t_allow),
        "climb_terms": {
            "wait_for_damped_retry_s": r(t_retry - t_allow),
            "retry_to_h100_launch_start_s": r(t_h100_launch - t_retry),
            "h100_node_boot_s": r(t_h100_up - t_h100_launch),
            "node_up_to_promotion_s (hysteresis)": r(t_promoted - t_h100_up),
            "promotion_to_first_answer_s": r(t_h100_answer - t_promoted),
        },
        "lesser_node_released_s": r(t_a100_gone - t_h100_answer),
        "release_terms": {
            "promotion_to_request_released_s (drain_s)": r(t_released - t_promoted),
            "released_to_node_gone_s (idle timeout)": r(t_a100_gone - t_released),
        },
        "climb_end_to_end_s": r(t_a100_gone - t_allow),
        "climb_goal_s": 60, "gke_computeclass_climb_s": 341,
        "tasks_sent": len(rec.sent), "tasks_failed": rec.errors,
        "tasks_answered": len(rec.answers),
        "plain_ray": {"answers_in_window": len(ready), "window_s": PLAIN_WINDOW_S,
                      "launch_attempts_per_s": r(plain_refusals / PLAIN_WINDOW_S)},
        "ladder_launch_attempts_per_s_during_stockout": r(
            len([e for e in refusals_ladder if e["time"] < t_allow]) / stockout_window),
        "options": OPTIONS, "hysteresis": LADDER.policy.promotion_hysteresis,
        "idle_timeout_minutes": 0.1,
        "processes_left": len(_session_pids(sid)) if sid else 0,
    }


if __name__ == "__main__":
    from _json_out import json_stdout

    out = json_stdout()
    print(json.dumps(main(), indent=2), file=out, flush=True)
