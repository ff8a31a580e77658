"""The LLM story's phases: measure the models, start the cluster and Serve, stream chat
answers through the preemption of the top node and its return, drain, report."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from ray_ladder.core.spec import Ladder, load_ladder
from ray_ladder.demo.llm.load import PROMPTS, ChatLoad, ask_once
from ray_ladder.demo.llm.models import RungModel, measure_models, rung_classes
from ray_ladder.demo.llm.records import StreamLog
from ray_ladder.demo.llm.report import (
    RouterSeen,
    live_view,
    models_table,
    progress_line,
    summarize,
    summary_view,
    write_streams_jsonl,
)
from ray_ladder.demo.load_process import LoadProcess
from ray_ladder.demo.report import server_transitions, write_summary
from ray_ladder.demo.session import (
    DemoError,
    Phases,
    next_step,
    play_story,
    serving,
    to_demo_time,
    wait_for_answer,
)
from ray_ladder.demo.story import Step, StoryEvent, StoryResult, story_seconds


def llm_story(ladder: Ladder, kill_at_s: float, back_at_s: float) -> tuple[Step, ...]:
    """SIGKILL the top rung's node at ``kill_at_s``, add a new one at ``back_at_s``.

    Example:
        >>> [s.label for s in llm_story(load_ladder(ladder_path("llm")), 12, 24)]
        ... # doctest: +SKIP
        ['h100 preempted', 'h100 back']
    """
    if not 0 < kill_at_s < back_at_s:
        raise DemoError(f"the kill (+{kill_at_s:g}s) must come after the start and before "
                        f"the return (+{back_at_s:g}s)")
    top = ladder.names[0]
    return (Step(kill_at_s, "kill", top, f"{top} preempted"),
            Step(back_at_s, "add", top, f"{top} back"))


def run_llm_demo(args: argparse.Namespace, console: Console) -> int:
    """Measure, start, stream through the story, report. Returns the exit code."""
    phase = Phases(console)
    ladder: Ladder = load_ladder(args.ladder)
    top = ladder.names[0]
    steps = llm_story(ladder, args.kill_at, args.back_at)

    phase("models", "training one n-gram model per compute rung on the standard library's "
                    "docstrings ...")
    models = measure_models(ladder)
    console.print(models_table(models))

    from ray import serve

    from ray_ladder.serve import build_app

    with serving(ladder, out=args.out, verbose=args.verbose, console=console,
                 phase=phase) as live:
        app = build_app(
            ladder, rung_classes(models),
            # One replica per rung serves every stream: let it take them all (Serve's
            # default is 5 in flight), the ones that fall onto it from above included.
            deployment_options={n: {"max_ongoing_requests": max(32, 3 * args.clients)}
                                for n in models})
        serve._run(app, _blocking=False, name="ladder-llm-demo")
        wait_for_answer(lambda: ask_once(live.url, ladder.name), top, args.serve_timeout)

        phase("story", f"{top} streams; {args.clients} chat clients, {args.max_tokens} tokens "
                       "per answer; story: " + ", ".join(f"+{s.at_s:g}s {s.label}"
                                                        for s in steps))
        gen = LoadProcess(live.url, PROMPTS, generator=ChatLoad, clients=args.clients,
                          max_tokens=args.max_tokens, model=ladder.name,
                          duration_s=story_seconds(steps, args.climb_timeout, args.tail) + 10)
        log = StreamLog()
        try:
            result = tell_story(console, gen, log, live.cluster, ladder, models, steps, args)
            phase("drain", "story told; no new streams, the open ones finish ...")
            stopped = gen.stop(timeout_s=args.drain_timeout)
        finally:
            gen.stop(timeout_s=2.0)
        phase("report", "traffic stopped; summary:")
        log.update(gen.records())
        transitions = server_transitions(
            gen.watch.events, to_demo_time(time.time() - gen.now(), gen.t0))
        router = RouterSeen(transitions, gen.watch.max_degraded_s, gen.watch.downs)
        summary = summarize(log, ladder=ladder.names, story=result.events, models=models,
                            climbed_at=result.climbed_at, router=router,
                            clients=args.clients, max_tokens=args.max_tokens,
                            kill_at_s=args.kill_at, back_at_s=args.back_at)
        summary["climbed_back"] = result.climbed_at is not None
        summary["drained"] = stopped
        summary["phases_s"] = dict(phase.durations)
        summary["wall_s_before_shutdown"] = round(phase.elapsed, 1)
        write_outputs(console, args.out, summary, log, result.events, ladder.names, models,
                      transitions)
        if live.notices[0]:
            console.print(f"[dim]{live.notices[0]} notices from Ray (raylets killed, nodes "
                          f"marked dead) are in {args.out / 'ray-messages.log'}[/dim]")
        return verdict(summary, top, args)


def verdict(summary: Mapping[str, Any], top: str, args: argparse.Namespace) -> int:
    """0 when every stream survived, some moved rung mid-generation and new streams
    climbed back to ``top``; else :class:`DemoError` naming what did not happen."""
    streams = summary["streams"]
    if streams["broken"] or streams["open"]:
        raise DemoError(f"{streams['broken']} stream(s) broke and {streams['open']} did not "
                        f"finish within --drain-timeout: see the summary above and {args.out}/")
    if not summary["moved_rung_mid_stream"]:
        raise DemoError(f"no stream was mid-generation on {top} when it was preempted: "
                        "nothing fell (more --clients or --max-tokens?)")
    if summary["climb_back_s"] is None:
        raise DemoError(f"no token came from {top} within {args.climb_timeout:.0f}s of its "
                        f"return: see the summary above and {args.out}/")
    return 0


def tell_story(console: Console, gen: LoadProcess, log: StreamLog, cluster: Any,
               ladder: Ladder, models: Mapping[str, RungModel], steps: Sequence[Step],
               args: argparse.Namespace) -> StoryResult:
    """Start the chat clients and play the story under the live table."""
    top = ladder.names[0]

    def view(events: Sequence[StoryEvent]) -> Any:
        with log.lock:  # rich draws from its own thread
            log.update(gen.records())
            return live_view(log, now=gen.now(), ladder=ladder.names, models=models,
                             story=events, state=gen.watch.state,
                             next_step=next_step(steps, events, top))

    def first_top_since(since: float) -> float | None:
        with log.lock:
            return log.update(gen.records()).first_token_since(top, since)

    def progress() -> str:
        with log.lock:
            return progress_line(log.update(gen.records()), gen.now())

    return play_story(console, gen, cluster, steps, top=top, view=view, progress=progress,
                      top_since=first_top_since, climb_timeout_s=args.climb_timeout,
                      tail_s=args.tail)


def write_outputs(console: Console, out: Path, summary: dict[str, Any], log: StreamLog,
                  events: Sequence[StoryEvent], ladder: Sequence[str],
                  models: Mapping[str, RungModel],
                  transitions: Sequence[Mapping[str, Any]]) -> None:
    """Print the summary; write ``summary.json``, ``timeline.png``, ``streams.jsonl``."""
    from ray_ladder.demo.llm.plot import plot_streams

    console.print(summary_view(summary))
    json_path = write_summary(summary, out / "summary.json")
    png = plot_streams(log, events, ladder, out / "timeline.png",
                       models={k: m.model for k, m in models.items()}, transitions=transitions)
    jsonl = write_streams_jsonl(log, out / "streams.jsonl")
    console.print(f"wrote {json_path}, {png} and {jsonl}")
