"""How much of the machine other work took while a test measured a latency goal.

A latency goal (the ``alone`` tests) holds on this machine when nothing else runs; beside
another workload on two cores it measures that workload. :class:`OtherWork` counts, over a
window, the CPU time the machine spent outside this test process and its descendants
(the test's Ray cluster: raylets, workers, Serve's replicas are all started from here):
the CPUs' busy time (``/proc/stat`` through psutil) less this process tree's own.

Example:
    >>> with OtherWork() as other:  # doctest: +SKIP
    ...     run_the_burst()
    >>> other.share  # doctest: +SKIP
    0.03
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import psutil

#: Above this share of all the CPUs, taken by other work over the window, a latency goal
#: is not judged (the test still checks what must hold under any load).
MAX_SHARE = 0.25


def _busy_s() -> float:
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def _tree_s() -> float:
    """CPU seconds of this process and its live descendants, with those of their children
    that ended and were waited for (a raylet's workers, a finished subprocess)."""
    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


class OtherWork:
    """CPU time taken outside this process tree over a ``with`` block (see the module)."""

    def __enter__(self) -> OtherWork:
        self._start, self._busy, self._own = time.monotonic(), _busy_s(), _tree_s()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.wall_s = time.monotonic() - self._start
        self.own_s = _tree_s() - self._own
        self.other_s = max(0.0, _busy_s() - self._busy - self.own_s)

    @property
    def share(self) -> float:
        """Other work's CPU time over the window / (window x CPUs)."""
        return self.other_s / max(1e-9, self.wall_s * (os.cpu_count() or 1))

    def too_busy(self) -> bool:
        """Whether other work took more than :data:`MAX_SHARE` of the machine."""
        return self.share > MAX_SHARE

    def __str__(self) -> str:
        return (f"other work took {self.share:.0%} of the {os.cpu_count()} CPUs over "
                f"{self.wall_s:.1f} s (latency goals are judged below {MAX_SHARE:.0%})")
