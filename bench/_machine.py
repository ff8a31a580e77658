"""The machine a bench ran on, as the bench measures it (never a sentence typed in).

Every bench (but ``simulate.py``, which keeps its own figures) puts the same ``machine``
object in its JSON:

``cores``               ``os.cpu_count()``
``cores_usable``        CPUs this process may run on (``os.sched_getaffinity``)
``load_avg_before``     ``os.getloadavg()`` (1, 5, 15 min) when the bench started
``load_avg_after``      the same when it finished
``cpu_busy_pct``        share of all CPUs' time not idle during the run (``/proc/stat``)
``cpu_steal_pct``       share taken by the hypervisor for other guests (``/proc/stat``);
                        both ``null`` where ``/proc/stat`` cannot be read or the run was
                        too short to tell
``measured_s``          seconds between the two readings
``python_mops_before``  one core's speed when the bench started: millions of pure-Python
                        additions a second (best of three short runs): a slower or
                        busier core than another run's makes its latency and rate
                        figures differ without any change of code
``python_mops_after``   the same when it finished

:class:`PeakMemory` samples one process's memory through a phase (the task ladder's
orchestrator in ``ladder_task.py``).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

#: Clock ticks (all CPUs) a run must span for busy and steal shares (0.5 s of one CPU).
MIN_TICKS = 50


def _proc_stat() -> list[int] | None:
    """The aggregate ``cpu`` line of ``/proc/stat`` (user nice system idle iowait irq
    softirq steal ...), in clock ticks since boot; ``None`` where it cannot be read."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    try:
        return [int(x) for x in fields[1:]]
    except ValueError:
        return None


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not available on this platform
        return None


def _usable_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def python_mops(rounds: int = 3, n: int = 200_000) -> float:
    """Millions of pure-Python additions one core does a second (best of ``rounds``)."""
    best = float("inf")
    for _ in range(rounds):
        started, total = time.perf_counter(), 0
        for i in range(n):
            total += i
        best = min(best, time.perf_counter() - started)
    return round(n / best / 1e6, 2)


class MachineProbe:
    """Read the machine when a bench starts; :meth:`report` reads it again at the end.

    Example:
        >>> probe = MachineProbe()
        >>> sorted(probe.report())[:3]
        ['cores', 'cores_usable', 'cpu_busy_pct']
    """

    def __init__(self) -> None:
        self._start = time.monotonic()
        self._load = _load()
        self._stat = _proc_stat()
        self._mops = python_mops()

    def report(self) -> dict[str, Any]:
        """The ``machine`` field: cores, load before and after, busy and steal shares."""
        end = _proc_stat()
        busy = steal = None
        if self._stat is not None and end is not None:
            delta = [b - a for a, b in zip(self._stat, end, strict=False)]
            total = sum(delta[:8])  # guest time is counted inside user already
            if total >= MIN_TICKS:  # a shorter run says nothing about the machine's load
                idle = delta[3] + (delta[4] if len(delta) > 4 else 0)
                busy = round(100 * (total - idle) / total, 1)
                steal = round(100 * delta[7] / total, 2) if len(delta) > 7 else None
        return {
            "cores": os.cpu_count(),
            "cores_usable": _usable_cores(),
            "load_avg_before": self._load,
            "load_avg_after": _load(),
            "cpu_busy_pct": busy,
            "cpu_steal_pct": steal,
            "measured_s": round(time.monotonic() - self._start, 1),
            "python_mops_before": self._mops,
            "python_mops_after": python_mops(),
        }


class PeakMemory:
    """Peak memory of one process, sampled every 20 ms in a thread while in the block.

    Attributes:
        rss: Peak resident set size, bytes (shared pages, e.g. mapped object store
            buffers, included).
        private: Peak of RSS less shared pages, bytes (the process's own heap and copies).

    Example:
        >>> with PeakMemory(os.getpid()) as mem:
        ...     pass
        >>> mem.rss > 0
        True
    """

    def __init__(self, pid: int) -> None:
        import psutil

        self._proc = psutil.Process(pid)
        self._errors: tuple[type[BaseException], ...] = (psutil.Error,)
        self.rss = self.private = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        mem = self._proc.memory_info()
        self.rss = max(self.rss, mem.rss)
        self.private = max(self.private, mem.rss - getattr(mem, "shared", 0))

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self._sample()
            except self._errors:  # the process ended
                return

    def __enter__(self) -> PeakMemory:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
