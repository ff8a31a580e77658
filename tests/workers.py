"""How many pytest-xdist workers ``make test`` starts: printed on stdout (0 is one process).

Two when the machine has two cores or more, runs no other Ray cluster and its CPUs are
mostly idle now; else one process (two clusters of the suite beside another Ray workload
miss Ray's own start deadlines, docs/testing.md). Measured, never assumed: the Ray
processes on the machine and the CPUs' busy share over a few seconds (psutil, a Ray
dependency). ``make test TEST_WORKERS=N`` overrides it.
"""

from __future__ import annotations

import contextlib
import os

import psutil

IDLE_SAMPLE_S = 3.0
MAX_BUSY_PERCENT = 35.0  # of all cores together, over the sample
#: A process of one of these names is another Ray cluster running on this machine.
RAY_DAEMONS = frozenset({"gcs_server", "raylet"})


def workers(cores: int | None, busy_percent: float, other_ray: bool = False) -> int:
    """The worker count for ``cores`` cores of which ``busy_percent`` are busy, with
    (``other_ray``) or without another Ray cluster on the machine (0: one process)."""
    if other_ray or (cores or 1) < 2 or busy_percent > MAX_BUSY_PERCENT:
        return 0
    return 2


def ray_daemons() -> list[int]:
    """The pids of the Ray cluster daemons running on this machine now."""
    found = []
    for proc in psutil.process_iter(["name"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["name"] in RAY_DAEMONS:
                found.append(proc.pid)
    return found


if __name__ == "__main__":
    busy = psutil.cpu_percent(interval=IDLE_SAMPLE_S)
    print(workers(os.cpu_count(), busy, bool(ray_daemons())))
