"""The demo's phases: train, start the cluster and Serve, tell the story, report."""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from ray_ladder.core.spec import Ladder, load_ladder
from ray_ladder.demo.load import RequestRecord, probe
from ray_ladder.demo.load_process import LoadProcess
from ray_ladder.demo.models import (
    DigitsSplit,
    TrainedModel,
    load_split,
    rung_classes,
    rung_init_kwargs,
    train_models,
)
from ray_ladder.demo.report import (
    live_view,
    server_transitions,
    summarize,
    summary_view,
    write_requests_csv,
    write_summary,
)
from ray_ladder.demo.story import DEFAULT_STORY, Step, StoryEvent, run_story, story_seconds

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


def wait_for_rung(url: str, pixels: list[float], rung: str, timeout_s: float) -> float:
    """Poll ``POST /`` until ``rung`` answers; return how long it took."""
    start = time.monotonic()
    last = "no answer yet"
    while time.monotonic() - start < timeout_s:
        try:
            status, got = probe(url, pixels, timeout_s=5.0)
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


def _accuracy_table(models: Mapping[str, TrainedModel]) -> Table:
    table = Table(title="models trained on scikit-learn's digits (held-out accuracy)",
                  title_justify="left")
    for col in ("rung", "model", "accuracy", "fit s"):
        table.add_column(col)
    for name, m in models.items():
        table.add_row(name, m.description, f"{m.accuracy * 100:.1f}%", f"{m.train_s:.2f}")
    return table


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


def train(ladder: Ladder) -> tuple[DigitsSplit, dict[str, TrainedModel]]:
    """The held-out split and one trained model per compute rung of ``ladder``.

    Runs before any Ray process is spawned, on one BLAS thread: Ray forks its processes
    with a ``preexec_fn``, and OpenBLAS's fork handler deadlocks (GIL held) when a BLAS
    call is running in another thread at that moment.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        split = load_split()
        trained = train_models(split)
    compute = [r.name for r in ladder.rungs if r.is_compute]
    models = {k: v for k, v in trained.items() if k in compute}
    if sorted(models) != sorted(compute):
        raise DemoError(f"the demo has models for {sorted(trained)}, but the ladder's "
                        f"compute rungs are {compute}")
    return split, models


def run_demo(args: argparse.Namespace, console: Console) -> int:
    """Train, start the cluster and Serve, tell the story, report. Returns the exit code."""
    phase = Phases(console)
    ladder: Ladder = load_ladder(args.ladder)
    top = ladder.rungs[0].name

    phase("train", "training one model per compute rung on scikit-learn's digits ...")
    split, models = train(ladder)
    console.print(_accuracy_table(models))
    samples = split.samples()

    import ray

    from ray_ladder.testing import LocalCluster, free_port

    if not args.verbose:
        # Ray's INFO lines (address overwritten, Serve started) are not the story; set
        # after `import ray`, which configures these loggers.
        for name in ("ray", "ray.serve"):
            logging.getLogger(name).setLevel(logging.WARNING)

    cluster = LocalCluster.from_ladder(ladder, connect=False)
    phase("cluster", "starting the local cluster (head + " + " + ".join(
        f"{t} node" for t in cluster.node_types) + ") ...")
    LIVE_CLUSTERS.append(cluster)
    gen: LoadProcess | None = None
    stack = ExitStack()
    notices = [0]
    try:
        start_cluster(cluster, console, attempts=2)
        ray.init(address=cluster.address, logging_level=logging.WARNING,
                 log_to_driver=args.verbose)
        if not args.verbose:
            notices = stack.enter_context(ray_messages_to(args.out / "ray-messages.log"))

        from ray import serve

        from ray_ladder.serve import build_app

        if not args.verbose:  # `ray.serve` sets its logger up on import: quiet it after
            logging.getLogger("ray.serve").setLevel(logging.WARNING)

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        phase("serve", f"starting Ray Serve on {url}; waiting for {top} to answer ...")
        serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly",
                    logging_config={"log_level": "WARNING", "enable_access_log": False})
        app = build_app(
            ladder, rung_classes(models), init_kwargs=rung_init_kwargs(models),
            # A prediction takes about a millisecond: let a replica queue a burst rather
            # than leave it waiting in the router past its assign timeout (Serve's default
            # is 5 in flight), which reads as "no replica took the request" on a busy box.
            deployment_options={n: {"max_ongoing_requests": 32} for n in models},
            # An answer slower than the client's own 5 s timeout is worth nothing.
            request_timeout_s=4.0)
        serve._run(app, _blocking=False, name="ladder-demo")
        wait_for_rung(url, samples[0][0], top, timeout_s=args.serve_timeout)

        steps: tuple[Step, ...] = DEFAULT_STORY
        phase("story", f"{top} answers; traffic at {args.rate:g} req/s; story: " + ", ".join(
            f"+{s.at_s:g}s {s.label}" for s in steps))
        bound = story_seconds(steps, args.climb_timeout, args.tail) + 10.0
        gen = LoadProcess(url, samples, rate_hz=args.rate, duration_s=bound)
        result = tell_story(console, gen, cluster, ladder, steps, args)
        stopped = gen.stop()
        phase("report", "traffic stopped; summary:")
        records = gen.records()
        transitions = server_transitions(
            gen.watch.events, to_demo_time(time.time() - gen.now(), gen.t0))
        summary = summarize(records, ladder=ladder.names, story=result.events,
                            model_accuracy={k: m.accuracy for k, m in models.items()},
                            transitions=transitions, climbed_at=result.climbed_at,
                            router_max_degraded_s=gen.watch.max_degraded_s,
                            rate_hz=args.rate,
                            marked_down=gen.watch.downs)
        summary["climbed_back"] = result.climbed_at is not None
        summary["phases_s"] = dict(phase.durations)
        summary["wall_s_before_shutdown"] = round(phase.elapsed, 1)
        write_outputs(console, args.out, summary, records, result.events, ladder.names,
                      transitions)
        if notices[0]:
            console.print(f"[dim]{notices[0]} notices from Ray (raylets killed, nodes marked "
                          f"dead) are in {args.out / 'ray-messages.log'}[/dim]")
        if not stopped:
            console.print("[yellow]warning: the load generator did not stop in time[/yellow]")
        if result.climbed_at is None:
            raise DemoError(f"traffic never came back to {top} within {args.climb_timeout:.0f}s "
                            f"of its return: see the summary above and {args.out}/")
        return 0
    finally:
        if gen is not None:
            gen.stop(timeout_s=2.0)
        phase(None, "shutting the cluster down ...")
        if ray.is_initialized():
            ray.shutdown()
        stack.close()
        cluster.shutdown()
        LIVE_CLUSTERS.remove(cluster)
        phase(None, "cluster stopped")


def tell_story(console: Console, gen: LoadProcess, cluster: Any, ladder: Ladder,
               steps: Sequence[Step], args: argparse.Namespace) -> Any:
    """Start the traffic and play the story under the live table."""
    events: list[StoryEvent] = []
    top = ladder.rungs[0].name

    def view() -> Any:
        done = {e.label for e in events}
        pending = [s for s in steps if s.label not in done]
        nxt = f"+{pending[0].at_s:g}s {pending[0].label}" if pending else f"climb back to {top}"
        return live_view(gen.records(), now=gen.now(), ladder=ladder.names, story=events,
                         state=gen.watch.state, next_step=nxt)

    def abort() -> str | None:
        if gen.crash is not None:
            return f"load generator crashed: {gen.crash!r}"
        return None if gen.running else "load generator stopped early"

    def first_top_since(since: float) -> float | None:
        times = [r.t for r in gen.records() if r.answered and r.rung == top and r.t >= since]
        return min(times) if times else None

    last_line = [0.0]

    def sleep(s: float) -> None:
        if not console.is_terminal and gen.now() - last_line[0] >= 5.0:
            # No live redraw in a pipe or CI log: one line every 5 s instead.
            last_line[0] = gen.now()
            recs = gen.records()
            mix: dict[str, int] = {}
            for r in recs:
                if r.t >= gen.now() - 5.0:
                    mix[r.rung or "-"] = mix.get(r.rung or "-", 0) + 1
            console.print(f"  t={gen.now():5.1f}s sent={len(recs)} "
                          f"failed={sum(r.failed for r in recs)} last 5 s: {mix}")
        time.sleep(s)

    gen.start()
    try:
        with Live(get_renderable=view, console=console, refresh_per_second=2):
            return run_story(cluster, steps, now=gen.now, top_answer_since=first_top_since,
                             top_rung=top, climb_timeout_s=args.climb_timeout,
                             tail_s=args.tail, on_event=events.append, should_abort=abort,
                             sleep=sleep)
    finally:
        if not console.is_terminal:
            console.line()  # the last frame ends without a newline outside a terminal


def write_outputs(console: Console, out: Path, summary: dict[str, Any],
                  records: Sequence[RequestRecord], events: Sequence[StoryEvent],
                  ladder: Sequence[str], transitions: Sequence[Mapping[str, Any]]) -> None:
    """Print the summary; write ``summary.json`` and ``timeline.png`` under ``out``."""
    from ray_ladder.demo.plot import plot_timeline

    console.print(summary_view(summary))
    json_path = write_summary(summary, out / "summary.json")
    png = plot_timeline(records, events, ladder, out / "timeline.png", transitions=transitions)
    csv_path = write_requests_csv(records, out / "requests.csv")
    console.print(f"wrote {json_path}, {png} and {csv_path}")
