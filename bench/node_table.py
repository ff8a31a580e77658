"""One node-table read for every ladder: what the GCS serves with eight ladder readers in
eight processes, without the fleet arbiter and with it, on one real LocalCluster.

Each reader is an actor whose ``CapacityView`` refreshes every 0.25 s through the default
node source (``SharedNodeTable``, cluster/node_table.py). The GCS's own counters
(``GetAllNodeInfo`` and ``GetAllAvailableResources`` request counts in the debug state it
logs every ``event_stats_print_interval_ms``, 1 s here) give the reads it served over each
phase; the readers say how
each of their reads was answered. Then nodes are SIGKILLed and the bench times until
every reader's view has lost them, through the table and reading the GCS directly, for
the same kills (the table must not make a fall slower than a reader's own read would,
by more than one interval).

Prints one JSON object:

``gcs_node_info_per_s``           ``{"without": r, "with": r}``: GetAllNodeInfo requests
                                  per second (the arbiter's own reads included)
``gcs_available_per_s``           the same for GetAllAvailableResources
``node_reads_ratio``              with / without (goal <= 0.25: the readers' reads go)
``reader_answers``                per phase, the readers' reads answered by the shared
                                  table and by the GCS, summed
``kill_seen_s``                   with the arbiter, per SIGKILL of an a100 node (three):
                                  seconds until the last of the eight readers through the
                                  table and of four readers that read the GCS themselves
                                  (started for this) counted one a100 placement fewer
``kill_seen_extra_s``             shared minus direct for the same kill, median and max
                                  (goal <= one interval, 0.25 s, plus the arbiter's read)
"""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path
from typing import Any

READERS = 8
INTERVAL_S = 0.25
PHASE_S = 12.0
KILLS = 3
KILL_DIRECT = 4
LADDER = """
name: bench-node-table
policy: {probe_interval_s: 0.25}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}}
"""
FLEET = """
fleet: bench-node-table
control_period_s: 1.0
node_table_period_s: 0.25
rungs: {h100: {resources: {ladder/h100: 1}}}
teams:
  - {name: a, quota: {h100: 1}}
"""
COUNTERS = {"node_info": "GetAllNodeInfo request count", "available":
            "GetAllAvailableResources request count"}


class GcsCounters:
    """The GCS's request counters from its periodic debug dump in ``gcs_server.out``."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def _dumps(self) -> list[dict[str, int]]:
        text = self.log.read_text(errors="replace")
        found = {k: [int(m) for m in re.findall(re.escape(v) + r": (\d+)", text)]
                 for k, v in COUNTERS.items()}
        return [dict(zip(found, vals, strict=True)) for vals in zip(*found.values(),
                                                                     strict=False)]

    def next_dump(self, timeout_s: float = 30.0) -> tuple[float, dict[str, int]]:
        """Wait for the next dump; its arrival time and counters."""
        seen = len(self._dumps())
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dumps = self._dumps()
            if len(dumps) > seen:
                return time.monotonic(), dumps[-1]
            time.sleep(0.05)
        raise TimeoutError("the GCS wrote no debug dump")


def _reader_class() -> Any:
    import ray

    @ray.remote(num_cpus=0, resources={"node:__internal_head__": 0.001})  # not on a victim
    class Reader:
        """A ladder's capacity view refreshing in the background (a router's, say)."""

        def __init__(self, shared: bool = True) -> None:
            from ray_ladder import Ladder
            from ray_ladder.cluster.capacity import CapacityView
            from ray_ladder.cluster.node_table import SharedNodeTable, ray_node_states

            # not shared: reads the GCS every time, as every reader did before the table
            self.table = SharedNodeTable(INTERVAL_S)
            self.view = CapacityView(Ladder.from_yaml(LADDER), refresh_interval_s=INTERVAL_S,
                                     follow_hook=False,
                                     node_source=self.table if shared else ray_node_states
                                     ).start()

        def a100(self) -> int:
            snap = self.view.last
            return -1 if snap is None else snap.rungs["a100"].total

        def reads(self) -> dict[str, int]:
            out = dict(self.table.reads)
            self.table.reads = {"shared": 0, "gcs": 0}
            return out

    return Reader


def _phase(counters: GcsCounters, readers: list[Any]) -> dict[str, Any]:
    import ray

    ray.get([r.reads.remote() for r in readers])  # start counting here
    t0, c0 = counters.next_dump()
    time.sleep(PHASE_S)
    t1, c1 = counters.next_dump()
    answers: dict[str, int] = {"shared": 0, "gcs": 0}
    for r in ray.get([r.reads.remote() for r in readers]):
        for k, v in r.items():
            answers[k] += v
    return {"rates": {k: (c1[k] - c0[k]) / (t1 - t0) for k in COUNTERS}, "answers": answers,
            "window_s": round(t1 - t0, 2)}


def _kill_seen(cluster: Any, groups: dict[str, list[Any]]) -> dict[str, float]:
    """SIGKILL one a100 node; per group of readers, seconds until its last reader lost it."""
    import ray

    readers = [r for group in groups.values() for r in group]
    before = ray.get(readers[0].a100.remote())
    seen: dict[int, float] = {}
    began = time.monotonic()
    cluster.remove_node(cluster.nodes("a100")[-1])
    while len(seen) < len(readers):
        counts = ray.get([r.a100.remote() for r in readers])
        now = time.monotonic() - began
        seen.update({i: now for i, n in enumerate(counts) if n == before - 1 and i not in seen})
        if now > 60:
            raise TimeoutError("the readers never lost the killed node")
        time.sleep(0.01)
    out, i = {}, 0
    for name, group in groups.items():
        out[name] = round(max(seen[j] for j in range(i, i + len(group))), 3)
        i += len(group)
    return out


def main() -> dict[str, Any]:
    import ray
    from _machine import MachineProbe

    from ray_ladder.core.fleet import Fleet
    from ray_ladder.fleet import start_arbiter
    from ray_ladder.testing import LocalCluster, wait_until

    probe = MachineProbe()
    started = time.monotonic()
    out: dict[str, Any] = {"readers": READERS, "interval_s": INTERVAL_S}
    phases: dict[str, Any] = {}
    kills: list[dict[str, float]] = []
    with LocalCluster({"h100": {"resources": {"ladder/h100": 1}},
                       "a100": {"resources": {"ladder/a100": 1}}},
                      initial={"h100": 1, "a100": 2},
                      system_config={"event_stats_print_interval_ms": 1000}) as cluster:
        counters = GcsCounters(Path(cluster.head.logs_dir) / "gcs_server.out")
        reader = _reader_class()
        readers = [reader.remote() for _ in range(READERS)]
        ray.get([r.a100.remote() for r in readers])
        phases["without"] = _phase(counters, readers)
        arbiter = start_arbiter(Fleet.from_yaml(FLEET))
        ray.get(arbiter.status.remote())
        phases["with"] = _phase(counters, readers)
        direct = [reader.remote(False) for _ in range(KILL_DIRECT)]
        ray.get([r.a100.remote() for r in direct])
        for _ in range(KILLS):  # the same kill seen by both kinds of reader
            kills.append(_kill_seen(cluster, {"shared": readers, "direct": direct}))
            cluster.add_node("a100")
            wait_until(lambda: all(n == 2 for n in ray.get([r.a100.remote()
                                                             for r in readers + direct])),
                       60, 0.05, "the readers to see the new node")
    rates = {p: v["rates"] for p, v in phases.items()}
    out["gcs_node_info_per_s"] = {p: round(r["node_info"], 2) for p, r in rates.items()}
    out["gcs_available_per_s"] = {p: round(r["available"], 2) for p, r in rates.items()}
    out["node_reads_ratio"] = round(rates["with"]["node_info"] / rates["without"]["node_info"],
                                    3)
    out["reader_answers"] = {p: v["answers"] for p, v in phases.items()}
    out["windows_s"] = {p: v["window_s"] for p, v in phases.items()}
    out["kill_seen_s"] = kills
    extra = [k["shared"] - k["direct"] for k in kills]
    out["kill_seen_extra_s"] = {"median": round(statistics.median(extra), 3),
                                "max": round(max(extra), 3)}
    out["goals"] = {"node_reads_ratio": 0.25, "kill_seen_extra_s": INTERVAL_S}
    out["bench_wall_s"] = round(time.monotonic() - started, 1)
    out["machine"] = probe.report()
    return out


if __name__ == "__main__":
    from _json_out import json_stdout

    stdout = json_stdout()
    print(json.dumps(main()), file=stdout, flush=True)
