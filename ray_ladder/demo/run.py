"""The demo's phases: train, start the cluster and Serve, tell the story, report."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
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
from ray_ladder.demo.session import (
    LIVE_CLUSTERS,
    DemoError,
    Phases,
    next_step,
    play_story,
    ray_messages_to,
    serving,
    to_demo_time,
    wait_for_answer,
)
from ray_ladder.demo.story import DEFAULT_STORY, Step, StoryEvent, StoryResult, story_seconds

# Re-exported: the digits story's names from before session.py held them.
__all__ = ["LIVE_CLUSTERS", "DemoError", "ray_messages_to", "run_demo", "tell_story",
           "to_demo_time", "train", "wait_for_rung", "write_outputs"]


def wait_for_rung(url: str, pixels: list[float], rung: str, timeout_s: float) -> float:
    """Poll ``POST /`` until ``rung`` answers; return how long it took."""
    return wait_for_answer(lambda: probe(url, pixels, timeout_s=5.0), rung, timeout_s)


def _accuracy_table(models: Mapping[str, TrainedModel]) -> Table:
    table = Table(title="models trained on scikit-learn's digits (held-out accuracy)",
                  title_justify="left")
    for col in ("rung", "model", "accuracy", "fit s"):
        table.add_column(col)
    for name, m in models.items():
        table.add_row(name, m.description, f"{m.accuracy * 100:.1f}%", f"{m.train_s:.2f}")
    return table


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

    from ray import serve

    from ray_ladder.serve import build_app

    with serving(ladder, out=args.out, verbose=args.verbose, console=console,
                 phase=phase) as live:
        url = live.url
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
        try:
            result = tell_story(console, gen, live.cluster, ladder, steps, args)
            stopped = gen.stop()
        finally:
            gen.stop(timeout_s=2.0)
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
        if live.notices[0]:
            console.print(f"[dim]{live.notices[0]} notices from Ray (raylets killed, nodes "
                          f"marked dead) are in {args.out / 'ray-messages.log'}[/dim]")
        if not stopped:
            console.print("[yellow]warning: the load generator did not stop in time[/yellow]")
        if result.climbed_at is None:
            raise DemoError(f"traffic never came back to {top} within {args.climb_timeout:.0f}s "
                            f"of its return: see the summary above and {args.out}/")
        return 0


def tell_story(console: Console, gen: LoadProcess, cluster: Any, ladder: Ladder,
               steps: Sequence[Step], args: argparse.Namespace) -> StoryResult:
    """Start the traffic and play the story under the live table."""
    top = ladder.rungs[0].name

    def view(events: Sequence[StoryEvent]) -> Any:
        return live_view(gen.records(), now=gen.now(), ladder=ladder.names, story=events,
                         state=gen.watch.state, next_step=next_step(steps, events, top))

    def first_top_since(since: float) -> float | None:
        times = [r.t for r in gen.records() if r.answered and r.rung == top and r.t >= since]
        return min(times) if times else None

    def progress() -> str:
        recs = gen.records()
        mix: dict[str, int] = {}
        for r in recs:
            if r.t >= gen.now() - 5.0:
                mix[r.rung or "-"] = mix.get(r.rung or "-", 0) + 1
        return (f"  t={gen.now():5.1f}s sent={len(recs)} failed={sum(r.failed for r in recs)} "
                f"last 5 s: {mix}")

    return play_story(console, gen, cluster, steps, top=top, view=view, progress=progress,
                      top_since=first_top_since, climb_timeout_s=args.climb_timeout,
                      tail_s=args.tail)


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
