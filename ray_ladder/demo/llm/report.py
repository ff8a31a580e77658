"""What the LLM story reports: the live table of streams, the summary and its JSON.

The generic parts (percentiles, times relative to the story, the timeline table, the
router's view of a rung, writing JSON) are the digits story's, from
:mod:`ray_ladder.demo.report`.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ray_ladder.demo.llm.models import RungModel
from ray_ladder.demo.llm.records import StreamLog, StreamView, as_json
from ray_ladder.demo.report import (
    _ms,
    _pct,
    _round,
    _router_sees,
    percentile,
    relative_to,
    story_lines,
    timeline_table,
)
from ray_ladder.demo.story import StoryEvent


def _ms_of(values: Sequence[float], q: float) -> float | None:
    return _round(percentile([v * 1000 for v in values], q), 1)


def pace(view: StreamView, rung: str, min_tokens: int = 5) -> float | None:
    """Tokens per second of ``view`` while ``rung`` produced it (its longest run there).

    Example:
        >>> from ray_ladder.demo.llm.records import Token
        >>> v = StreamView(0, 0, 0.0, [Token(0, t / 10, "h100", "x") for t in range(11)])
        >>> round(pace(v, "h100"), 3)
        10.0
    """
    runs: list[list[float]] = []
    for i, tok in enumerate(view.tokens):
        if tok.rung != rung:
            continue
        if i and view.tokens[i - 1].rung == rung and runs:
            runs[-1].append(tok.t)
        else:
            runs.append([tok.t])
    best = max(runs, key=len, default=[])
    if len(best) < min_tokens or best[-1] <= best[0]:
        return None
    return (len(best) - 1) / (best[-1] - best[0])


@dataclass(frozen=True)
class RouterSeen:
    """What the clients' poller of ``GET /-/ladder`` saw of the router.

    Attributes:
        transitions: Its transition events, on the demo clock.
        max_degraded_s: The largest ``degraded_s`` it reported.
        marked_down: Rungs it marked down (``t``, ``rung``, ``reason``).
    """

    transitions: Sequence[Mapping[str, Any]] = ()
    max_degraded_s: float | None = None
    marked_down: Sequence[Mapping[str, Any]] = ()


def summarize(log: StreamLog, *, ladder: Sequence[str], story: Sequence[StoryEvent],
              models: Mapping[str, RungModel], climbed_at: float | None = None,
              router: RouterSeen = RouterSeen(), **load: Any) -> dict[str, Any]:
    """The end-of-story figures, JSON-ready (the content of ``summary.json``).

    Args:
        log: Every stream the clients logged.
        ladder: Rung names, best first.
        story: The story steps as they happened.
        models: Each compute rung's model and its held-out next-token accuracy.
        climbed_at: Demo time of the first top-rung token after the top came back.
        router: What was seen of the router.
        **load: The traffic's settings, reported as given (``clients``, ``max_tokens``).

    Example:
        >>> summarize(StreamLog(), ladder=["h100"], story=[], models={})["streams"]
        {'started': 0, 'completed': 0, 'broken': 0, 'shed': 0, 'open': 0}
    """
    views = sorted(log.streams.values(), key=lambda v: v.opened)
    closed = [v for v in views if v.closed is not None]
    switches = [(v, i, a, b) for v in views for i, a, b in v.switches()]
    names = [*ladder, *sorted({t.rung for t in log.tokens} - set(ladder))]
    per_rung = {name: _rung_figures(log, views, name, models.get(name)) for name in names}
    ttfts = [v.ttft_s for v in views if v.ttft_s is not None]
    gaps = [b.t - a.t for _, _, a, b in switches]
    top = ladder[0] if ladder else None
    last_add = max((e.t for e in story if e.action == "add" and e.node_type == top),
                   default=None)
    first_kill = min((e.t for e in story if e.action == "kill"), default=None)
    return {
        "story_name": "llm",
        "ladder": list(ladder),
        "load": dict(load),
        "duration_s": round(max((t.t for t in log.tokens), default=0.0)
                            - min((v.opened for v in views), default=0.0), 3),
        "streams": {"started": len(views), "completed": sum(v.completed for v in closed),
                    "broken": sum(v.broken for v in closed),
                    "shed": sum(v.shed for v in closed), "open": len(views) - len(closed)},
        "open_at_kill": (sum(1 for v in views if v.opened <= first_kill
                             and (v.closed is None or v.closed.t > first_kill))
                         if first_kill is not None else None),
        "moved_rung_mid_stream": len({v.stream for v, *_ in switches}),
        "switches": len(switches),
        "switches_told_in_chunk": sum(b.switched_from == a.rung for _, _, a, b in switches),
        "usage_mismatches": sum(v.usage_matches() is False for v in closed),
        "tokens": {"total": len(log.tokens),
                   "per_rung": {n: per_rung[n]["tokens"] for n in names}},
        "per_rung": per_rung,
        "ttft_ms": {"p50": _ms_of(ttfts, 50), "p95": _ms_of(ttfts, 95),
                    "max": _ms_of(ttfts, 100)},
        "max_gap_across_kill_s": _round(max(gaps, default=None), 3),
        "switch_gap_p50_s": _round(percentile(gaps, 50), 3),
        "max_token_gap_s": _round(max((v.max_gap_s() for v in views), default=None), 3),
        "climb_back_s": (round(climbed_at - last_add, 3)
                         if climbed_at is not None and last_add is not None else None),
        "router_max_degraded_s": router.max_degraded_s,
        "switch_example": _example(switches),
        "story": [e.to_dict() for e in story],
        "transitions": [{**t, "after": relative_to(float(t["t"]), story)}
                        for t in router.transitions],
        "observed_transitions": [],
        "marked_down": [{**d, "after": relative_to(float(d["t"]), story)}
                        for d in router.marked_down],
        "broken_streams": [{"stream": v.stream, "t": round(v.opened, 2),
                            "status": v.closed.status if v.closed else None,
                            "tokens": len(v.tokens),
                            "error": v.closed.error if v.closed else ""}
                           for v in closed if v.broken][:20],
    }


def _rung_figures(log: StreamLog, views: Sequence[StreamView], name: str,
                  m: RungModel | None) -> dict[str, Any]:
    """One rung's figures: its model, its tokens, the streams it started and their pace."""
    starts = [v for v in views if v.tokens and v.tokens[0].rung == name]
    paces = [p for v in views if (p := pace(v, name)) is not None]
    return {
        "model": m.model if m else None,
        "model_quality": round(m.quality, 4) if m else None,
        "tokens_per_s_set": m.tokens_per_s if m else None,
        "tokens": sum(1 for t in log.tokens if t.rung == name),
        "streams_started": len(starts),
        "ttft_p50_ms": _ms_of([v.ttft_s for v in starts if v.ttft_s is not None], 50),
        "stream_tokens_per_s_p50": (round(statistics.median(paces), 2) if paces
                                    else None),
    }


def _example(switches: Sequence[tuple[StreamView, int, Any, Any]]) -> dict[str, Any] | None:
    """The text around one mid-stream switch: what came before and after it."""
    if not switches:
        return None
    # The switch with the most text on both sides shows the continuation best.
    view, i, a, b = max(switches, key=lambda s: min(s[1], len(s[0].tokens) - s[1]))
    before = "".join(t.text for t in view.tokens[:i])
    after = "".join(t.text for t in view.tokens[i:])
    return {"stream": view.stream, "from": a.rung, "to": b.rung, "at_token": i,
            "gap_s": round(b.t - a.t, 4), "reason": b.reason, "before": before[-72:],
            "after": after[:72]}


def write_streams_jsonl(log: StreamLog, path: Path) -> Path:
    """Every stream, one JSON line each, by send time (text and switches included)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for view in sorted(log.streams.values(), key=lambda v: v.opened):
            f.write(json.dumps(as_json(view)) + "\n")
    return path


def live_view(log: StreamLog, *, now: float, ladder: Sequence[str],
              models: Mapping[str, RungModel], story: Sequence[StoryEvent],
              state: Mapping[str, Any] | None = None, next_step: str = "",
              window_s: float = 5.0) -> RenderableType:
    """The live table: per rung its tokens/s, open streams, TTFT; then the stream counts."""
    rates = log.rates(now, window_s)
    open_ = log.open()
    table = Table(title=f"LLM ladder demo  t={now:5.1f}s", title_justify="left",
                  caption=f"tok/s: last {window_s:.0f} s", caption_justify="left")
    for col, justify in (("rung", "left"), ("model", "left"), ("tok/s", "right"),
                         ("streams on it", "right"), ("tokens", "right"),
                         ("TTFT p50 ms", "right"), ("router sees", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    seen = {r.get("name"): r for r in (state or {}).get("rungs", []) if isinstance(r, dict)}
    totals: dict[str, int] = {}
    for tok in log.tokens:
        totals[tok.rung] = totals.get(tok.rung, 0) + 1
    views = list(log.streams.values())
    for name in [*ladder, *sorted(set(totals) - set(ladder))]:
        on_it = sum(1 for v in open_ if v.rung == name)
        ttft = [v.ttft_s for v in views if v.tokens and v.tokens[0].rung == name
                and v.ttft_s is not None]
        rate = rates.get(name, 0.0)
        m = models.get(name)
        table.add_row(Text(name, style="bold green" if on_it else ""), m.model if m else "",
                      f"{rate:.0f}", str(on_it), str(totals.get(name, 0)),
                      _ms(percentile([t * 1000 for t in ttft], 50)),
                      _router_sees(seen.get(name)),
                      style=None if rate or totals.get(name) else "dim")
    closed = log.closed()
    broken = sum(v.broken for v in closed)
    moved = sum(1 for v in views if v.switches())
    ttfts = [v.ttft_s * 1000 for v in views if v.ttft_s is not None]
    current = (state or {}).get("current") or "?"
    status = Text.assemble(
        ("router rung: ", "bold"), (str(current), "bold cyan"),
        f"   streams open: {len(open_)}   started: {len(views)}   completed: "
        f"{sum(v.completed for v in closed)}   moved rung mid-stream: {moved}   TTFT p50: "
        f"{_ms(percentile(ttfts, 50))} ms   ",
        (f"broken: {broken}", "bold red" if broken else "green"))
    return Group(table, status, *story_lines(story, next_step))


def progress_line(log: StreamLog, now: float) -> str:
    """One line for a log without a live redraw (CI, a pipe)."""
    rates = {k: round(v) for k, v in log.rates(now).items()}
    closed = log.closed()
    return (f"  t={now:5.1f}s streams open={len(log.open())} completed="
            f"{sum(v.completed for v in closed)} broken={sum(v.broken for v in closed)} "
            f"tok/s (last 5 s): {rates}")


def models_table(models: Mapping[str, RungModel]) -> Table:
    """The models, measured before the cluster starts."""
    table = Table(title="models trained on the standard library's docstrings (held-out "
                        "next-token accuracy)", title_justify="left")
    for col in ("rung", "model", "what", "accuracy", "tok/s", "fit s"):
        table.add_column(col)
    for name, m in models.items():
        table.add_row(name, m.model, m.description, _pct(m.quality), f"{m.tokens_per_s:g}",
                      f"{m.train_s:.2f}")
    return table


def summary_view(summary: Mapping[str, Any]) -> RenderableType:
    """The end-of-story summary as rich renderables."""
    table = Table(title="tokens per rung", title_justify="left")
    for col in ("rung", "model", "accuracy (held-out)", "tokens", "streams started",
                "TTFT p50 ms", "tok/s per stream"):
        table.add_column(col, justify="left" if col in ("rung", "model") else "right")
    for name, row in summary["per_rung"].items():
        pace_ = row["stream_tokens_per_s_p50"]
        table.add_row(name, row["model"] or "-", _pct(row["model_quality"]), str(row["tokens"]),
                      str(row["streams_started"]), _ms(row["ttft_p50_ms"]),
                      "-" if pace_ is None else f"{pace_:.1f}")
    s = summary["streams"]
    lines: list[RenderableType] = [table, Text.assemble(
        ("streams started ", "bold"), str(s["started"]), ("  completed ", "bold"),
        str(s["completed"]), ("  shed ", "bold"), str(s["shed"]), ("  broken ", "bold"),
        (str(s["broken"]), "bold red" if s["broken"] else "bold green"),
        ("  moved rung mid-generation ", "bold"), str(summary["moved_rung_mid_stream"]),
        f" (of {summary['open_at_kill']} open at the kill)"
        if summary.get("open_at_kill") is not None else "")]
    gap = summary["max_gap_across_kill_s"]
    climb = summary["climb_back_s"]
    ttft = summary["ttft_ms"]
    lines.append(Text(
        f"max gap between two tokens across the kill {'-' if gap is None else f'{gap:.2f} s'}"
        f"   TTFT p50 {_ms(ttft['p50'])} ms  p95 {_ms(ttft['p95'])} ms   climb back "
        + ("-" if climb is None else f"{climb:.1f} s after {summary['ladder'][0]} returned")
        + f"   usage mismatches {summary['usage_mismatches']}"))
    ex = summary.get("switch_example")
    if ex:
        lines.append(Text.assemble(
            f"stream {ex['stream']} moved {ex['from']} -> {ex['to']} at token "
            f"{ex['at_token']} ({ex['gap_s'] * 1000:.0f} ms gap): ", ("…" + ex["before"], "cyan"),
            (" ‖ ", "bold"), (ex["after"] + "…", "magenta")))
    lines.append(timeline_table(summary))
    for b in summary["broken_streams"][:5]:
        lines.append(Text(f"  broken: stream {b['stream']} t={b['t']}s after {b['tokens']} "
                          f"tokens: {b['error'] or b['status']}", style="red"))
    return Group(*lines)
