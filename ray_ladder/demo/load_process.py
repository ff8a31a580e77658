"""The load generator in its own process, so the driver's pauses never delay a request."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ray_ladder.demo.load import BackgroundLoad, LadderWatch, LoadGenerator

_FLUSH_S = 0.2


def _child(url: str, samples: list[Any], options: dict[str, Any], out: Any, stop: Any,
           generator: Callable[..., BackgroundLoad[Any]] = LoadGenerator) -> None:
    """Run ``generator(url, samples, **options)`` here; stream its records and ladder state
    to ``out``."""
    parent = os.getppid()
    gen = generator(url, samples, **options)
    out.put(("ready", gen.t0))
    gen.start()
    sent = 0
    try:
        while True:
            done = not gen.running
            if stop.is_set() or os.getppid() != parent:  # asked, or orphaned: wind down
                gen.stop()
                done = True
            records = gen.records()
            if len(records) > sent:
                out.put(("records", records[sent:]))
                sent = len(records)
            w = gen.watch
            out.put(("watch", (w.state, w.events, w.downs, w.polls, w.errors,
                               w.max_degraded_s)))
            if done:
                break
            time.sleep(_FLUSH_S)
        if gen.crash is not None:
            out.put(("crash", repr(gen.crash)))
    finally:
        out.put(("done", None))


class LoadProcess:
    """A load generator (:class:`LoadGenerator` by default) run in a spawned child process,
    read like the local one.

    The driver also starts and kills Ray nodes, which holds its GIL for a second or more
    at a time; a load generator in that process would send late and read answers late,
    and count timeouts the server never caused. The child keeps its own schedule and
    streams what it records every 0.2 s.

    Args:
        url: Base URL of the Serve app.
        samples: What the generator sends (``(pixels, label)`` pairs for the digits).
        generator: The :class:`~ray_ladder.demo.load.BackgroundLoad` class to run (an
            importable, picklable name: the child is a fresh interpreter).
        **options: Its keyword options (``rate_hz``, ``duration_s``...).

    Example:
        >>> gen = LoadProcess("http://127.0.0.1:8123", samples, rate_hz=20).start()
        ... # doctest: +SKIP
        >>> gen.stop(); len(gen.records())  # doctest: +SKIP
    """

    def __init__(self, url: str, samples: Sequence[Any], *,
                 generator: Callable[..., BackgroundLoad[Any]] = LoadGenerator,
                 **options: Any) -> None:
        self.url = url
        self.samples = list(samples)
        self.generator = generator
        self.options = options
        self.watch = LadderWatch()
        self.crash: str | None = None
        self.t0 = time.monotonic()
        self._records: list[Any] = []
        self._done = threading.Event()
        self._proc: Any = None
        self._stop: Any = None
        self._queue: Any = None
        self._drain: threading.Thread | None = None

    def now(self) -> float:
        """Seconds since the child's ``t0`` (the machine-wide monotonic clock)."""
        return time.monotonic() - self.t0

    def records(self) -> list[Any]:
        """A snapshot of the records received so far."""
        return list(self._records)

    @property
    def running(self) -> bool:
        """True until the child has sent its last records."""
        return self._proc is not None and not self._done.is_set()

    def start(self, timeout_s: float = 60.0) -> LoadProcess:
        """Spawn the child and wait (bounded) until it is about to send its first request."""
        ctx = mp.get_context("spawn")  # a fresh interpreter: nothing inherited mid-call
        self._queue = ctx.Queue()
        self._stop = ctx.Event()
        self._proc = ctx.Process(target=_child, name="ladder-demo-load", daemon=True,
                                 args=(self.url, self.samples, self.options, self._queue,
                                       self._stop, self.generator))
        self._proc.start()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                kind, value = self._queue.get(timeout=0.5)
            except queue.Empty:
                if not self._proc.is_alive():
                    raise RuntimeError("the load generator process died while starting "
                                       f"(exit code {self._proc.exitcode})") from None
                if time.monotonic() > deadline:
                    self._proc.terminate()
                    raise TimeoutError(f"the load generator process did not start within "
                                       f"{timeout_s:.0f}s") from None
                continue
            if kind == "ready":
                self.t0 = float(value)
                break
        self._drain = threading.Thread(target=self._drain_loop, name="ladder-demo-drain",
                                       daemon=True)
        self._drain.start()
        return self

    def _drain_loop(self) -> None:
        while not self._done.is_set():
            try:
                kind, value = self._queue.get(timeout=0.5)
            except queue.Empty:
                if self._proc is not None and not self._proc.is_alive():
                    self.crash = self.crash or f"exited with code {self._proc.exitcode}"
                    self._done.set()
                continue
            if kind == "records":
                self._records.extend(value)
            elif kind == "watch":
                w = self.watch
                w.state, w.events, w.downs, w.polls, w.errors, w.max_degraded_s = value
            elif kind == "crash":
                self.crash = value
            elif kind == "done":
                self._done.set()

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Ask the child to stop, collect its last records (bounded); True if it ended."""
        if self._proc is None:
            return True
        self._stop.set()
        self._done.wait(timeout_s)
        self._proc.join(timeout=2.0)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(timeout=2.0)
            return False
        return self._done.is_set()
