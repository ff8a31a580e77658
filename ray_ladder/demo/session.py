"""What every demo story shares: its phases, the local cluster with Serve on it, Ray's
notices kept off the terminal, and the story played under a live view."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console, RenderableType
from rich.live import Live

from ray_ladder.core.spec import Ladder
from ray_ladder.demo.story import Step, StoryEvent, StoryResult, run_story

#: Clusters started and not yet shut down: the watchdog tears these down.
LIVE_CLUSTERS: list[Any] = []


class DemoError(RuntimeError):
    """The demo could not tell its story; the message says which phase and why."""


def to_demo_time(wall_t0: float, mono_t0: float) -> Callable[[Mapping[str, Any]], float]:
    """Map a router event's ``time`` onto demo time (seconds since traffic started).

    The router stamps events with its process's clock: wall time (``time.time()``) or the
    machine-wide monotonic clock; both are shared with this process on one machine, so the
    size of the value says which. Anything else falls back to when it was first seen.

    Example:
        >>> to_demo_time(1_700_000_000.0, 500.0)({"time": 1_700_000_012.5})
        12.5
    """

    def convert(event: Mapping[str, Any]) -> float:
        t = event.get("time")
        if isinstance(t, (int, float)):
            if t > 1e9:
                return float(t) - wall_t0
            shifted = float(t) - mono_t0
            if -600 < shifted < 3600:
                return shifted
        return float(event.get("seen_t", 0.0))

    return convert


@contextmanager
def ray_messages_to(path: Path) -> Iterator[list[int]]:
    """Send Ray's driver-side notices (a raylet SIGKILLed, a node marked dead) to ``path``.

    Ray prints each preemption as ~25 lines of raylet log on the driver's stdout; in the
    demo those are the story's expected effect and would bury the live table. The file
    keeps them (``--verbose`` leaves them on the terminal). Ray's listener thread looks
    ``print_to_stdstream`` up at each call, so swapping it is enough (ray 2.60).
    """
    from ray_ladder.cluster import ray_private

    path.parent.mkdir(parents=True, exist_ok=True)
    count = [0]
    with path.open("w", encoding="utf-8") as sink:
        def to_file(data: dict[str, Any], ignore_prefix: bool = False) -> None:
            count[0] += 1
            sink.write(f"--- ({data.get('pid')}) {time.strftime('%H:%M:%S')}\n")
            sink.write("\n".join(str(line) for line in data.get("lines", [])) + "\n")
            sink.flush()

        original = ray_private.redirect_worker_output(to_file)
        try:
            yield count
        finally:
            ray_private.restore_worker_output(original)


def wait_for_answer(ask: Callable[[], tuple[int, str | None]], rung: str,
                    timeout_s: float) -> float:
    """Call ``ask() -> (HTTP status, X-Ladder-Rung)`` every 0.5 s until ``rung`` answers a
    200; return how long it took, or raise :class:`DemoError` after ``timeout_s``."""
    start = time.monotonic()
    last = "no answer yet"
    while time.monotonic() - start < timeout_s:
        try:
            status, got = ask()
            if status == 200 and got == rung:
                return time.monotonic() - start
            last = f"HTTP {status} from rung {got}"
        except Exception as err:  # the proxy may not listen yet: keep polling
            last = f"{type(err).__name__}: {err}"
        time.sleep(0.5)
    raise DemoError(f"the {rung} rung did not answer within {timeout_s:.0f}s (last: {last})")


class Phases:
    """Prints ``  12.3s  message`` lines and keeps each phase's duration for the summary."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.start = time.monotonic()
        self.durations: dict[str, float] = {}
        self._name: str | None = None
        self._began = self.start

    def __call__(self, name: str | None, message: str) -> None:
        now = time.monotonic()
        if self._name is not None:
            self.durations[self._name] = round(now - self._began, 1)
        self._name, self._began = name, now
        self.console.print(f"[dim]{now - self.start:6.1f}s[/dim]  {message}")

    @property
    def elapsed(self) -> float:
        """Seconds since the demo started."""
        return time.monotonic() - self.start


def start_cluster(cluster: Any, console: Console, attempts: int = 2) -> None:
    """Start ``cluster``, once more if a raylet misses Ray's fixed 30 s registration window
    (it happens when other work saturates the machine); :class:`DemoError` after that."""
    for attempt in range(1, attempts + 1):
        try:
            cluster.start()
            return
        except Exception as err:  # LocalCluster.start has already stopped what it started
            if attempt == attempts:
                raise DemoError(f"the local Ray cluster did not start ({attempts} tries; is "
                                f"the machine overloaded?): {err}") from err
            console.print(f"[yellow]the local Ray cluster did not start ({err}); "
                          "trying once more ...[/yellow]")


@dataclass
class Serving:
    """The running cluster and Serve's HTTP address.

    Attributes:
        cluster: The :class:`~ray_ladder.testing.LocalCluster`.
        url: ``http://127.0.0.1:<port>`` of Serve's proxy (head node only).
        notices: ``[n]``: Ray notices sent to ``ray-messages.log`` so far.
    """

    cluster: Any
    url: str
    notices: list[int]


@contextmanager
def serving(ladder: Ladder, *, out: Path, verbose: bool, console: Console,
            phase: Phases, cluster: Any = None) -> Iterator[Serving]:
    """Start ``ladder``'s local cluster (or ``cluster``, a LocalCluster not started and
    not connecting), connect, start Serve on a free loopback port; on exit (any path,
    Ctrl-C included) shut Ray down and stop the cluster's processes.

    Phases ``cluster`` and ``serve`` begin here; deploying the app is the caller's.
    """
    import ray

    from ray_ladder.testing import LocalCluster, free_port

    if not verbose:
        # Ray's INFO lines (address overwritten, Serve started) are not the story; set
        # after `import ray`, which configures these loggers.
        for name in ("ray", "ray.serve"):
            logging.getLogger(name).setLevel(logging.WARNING)
    if cluster is None:
        cluster = LocalCluster.from_ladder(ladder, connect=False)
    phase("cluster", "starting the local cluster (head + " + " + ".join(
        f"{t} node" for t in cluster.node_types) + ") ...")
    LIVE_CLUSTERS.append(cluster)
    stack = ExitStack()
    try:
        start_cluster(cluster, console, attempts=2)
        ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=verbose)
        notices = [0] if verbose else stack.enter_context(
            ray_messages_to(out / "ray-messages.log"))

        from ray import serve

        if not verbose:  # `ray.serve` sets its logger up on import: quiet it after
            logging.getLogger("ray.serve").setLevel(logging.WARNING)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        phase("serve", f"starting Ray Serve on {url}; waiting for {ladder.names[0]} to "
                       "answer ...")
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    proxy_location="HeadOnly",
                    logging_config={"log_level": "WARNING", "enable_access_log": False})
        yield Serving(cluster, url, notices)
    finally:
        phase(None, "shutting the cluster down ...")
        if ray.is_initialized():
            ray.shutdown()
        stack.close()
        cluster.shutdown()
        LIVE_CLUSTERS.remove(cluster)
        phase(None, "cluster stopped")


class Traffic(Protocol):
    """What :func:`play_story` needs of a load generator (local or in its own process)."""

    crash: Any

    def now(self) -> float: ...
    @property
    def running(self) -> bool: ...
    def start(self) -> Any: ...


def next_step(steps: Sequence[Step], done: Sequence[StoryEvent], top: str) -> str:
    """``"+25s h100 back"`` for the first step not yet played, else the climb awaited."""
    labels = {e.label for e in done}
    pending = [s for s in steps if s.label not in labels]
    return f"+{pending[0].at_s:g}s {pending[0].label}" if pending else f"climb back to {top}"


def play_story(console: Console, gen: Traffic, cluster: Any, steps: Sequence[Step], *,
               top: str, view: Callable[[Sequence[StoryEvent]], RenderableType],
               progress: Callable[[], str], top_since: Callable[[float], float | None],
               climb_timeout_s: float, tail_s: float) -> StoryResult:
    """Start the traffic and play ``steps`` under a live view (redrawn twice a second).

    Args:
        console: Where to draw. Without a terminal (CI, a pipe) ``progress()`` is printed
            every 5 s instead of the live redraw.
        gen: The traffic; its crash or early stop aborts the story.
        cluster: The cluster the steps act on.
        steps: The script.
        top: The rung the story expects to climb back to.
        view: ``story so far -> renderable``.
        progress: One progress line.
        top_since: ``t -> demo time of the first top-rung answer at or after t``.
        climb_timeout_s: See :func:`~ray_ladder.demo.story.run_story`.
        tail_s: See :func:`~ray_ladder.demo.story.run_story`.
    """
    events: list[StoryEvent] = []

    def abort() -> str | None:
        if gen.crash is not None:
            return f"load generator crashed: {gen.crash!r}"
        return None if gen.running else "load generator stopped early"

    last_line = [0.0]

    def sleep(s: float) -> None:
        if not console.is_terminal and gen.now() - last_line[0] >= 5.0:
            last_line[0] = gen.now()
            console.print(progress())
        time.sleep(s)

    gen.start()
    try:
        with Live(get_renderable=lambda: view(events), console=console, refresh_per_second=2):
            return run_story(cluster, steps, now=gen.now, top_answer_since=top_since,
                             top_rung=top, climb_timeout_s=climb_timeout_s, tail_s=tail_s,
                             on_event=events.append, should_abort=abort, sleep=sleep)
    finally:
        if not console.is_terminal:
            console.line()  # the last frame ends without a newline outside a terminal
