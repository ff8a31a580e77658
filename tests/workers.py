"""How many pytest-xdist workers ``make test`` starts: printed on stdout (0 is one process).

Two when the machine has two cores or more and they are mostly idle now (another Ray
workload beside the suite makes two clusters at once miss Ray's own start deadlines; see
docs/testing.md), else one process. Measured, never assumed: the CPU's idle share over a
few seconds (psutil, a Ray dependency). ``TEST_WORKERS=N make test`` overrides it.
"""

from __future__ import annotations

import os

import psutil

IDLE_SAMPLE_S = 3.0
MAX_BUSY_PERCENT = 35.0  # of all cores together, over the sample


def workers(cores: int | None, busy_percent: float) -> int:
    """The worker count for ``cores`` cores of which ``busy_percent`` are busy (0: one
    process)."""
    return 2 if (cores or 1) >= 2 and busy_percent <= MAX_BUSY_PERCENT else 0


if __name__ == "__main__":
    print(workers(os.cpu_count(), psutil.cpu_percent(interval=IDLE_SAMPLE_S)))
