"""Selector throughput: decisions per second for a 6-rung ladder, random observations.

Prints JSON: {"observe_per_s": ..., "rungs": 6, "observations": N, "goal": 100000}.
"""

from __future__ import annotations

import json
import random
import time

from ray_ladder import Ladder, Selector

LADDER = Ladder.from_dict(
    {
        "name": "bench",
        "policy": {"promotion_hysteresis": 3, "max_degraded_seconds": 60},
        "rungs": [
            {"name": "h100", "resources": {"ladder/h100": 1}, "quality": 1.0},
            {"name": "a100", "resources": {"ladder/a100": 1}, "quality": 0.9},
            {"name": "l4", "resources": {"ladder/l4": 1}, "quality": 0.7},
            {"name": "cpu", "num_cpus": 1, "quality": 0.4},
            {"name": "cache", "kind": "cache", "quality": 0.2},
            {"name": "shed", "kind": "shed", "quality": 0.0},
        ],
    }
)


def main(n: int = 300_000, seed: int = 0) -> dict[str, object]:
    from _machine import MachineProbe

    probe = MachineProbe()
    rng = random.Random(seed)
    compute = ["h100", "a100", "l4", "cpu"]
    # Pre-build observations so the loop times the selector, not the RNG.
    pool = [{name: rng.random() < 0.7 for name in compute} for _ in range(1024)]
    selector = Selector(LADDER)
    observe = selector.observe
    start = time.perf_counter()
    for i in range(n):
        observe(pool[i & 1023], float(i))
    elapsed = time.perf_counter() - start
    return {"observe_per_s": round(n / elapsed), "rungs": len(LADDER.rungs),
            "observations": n, "goal": 100_000, "met": n / elapsed >= 100_000,
            "machine": probe.report()}


if __name__ == "__main__":
    print(json.dumps(main()), flush=True)
