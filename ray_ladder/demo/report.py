"""What the demo reports: the live progress table, the final summary and summary.json."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ray_ladder.demo.load import RequestRecord
from ray_ladder.demo.story import StoryEvent


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100, nearest rank) or ``None`` for no values.

    Example:
        >>> percentile([1.0, 2.0, 3.0, 4.0], 50)
        2.0
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def rung_of(record: RequestRecord) -> str:
    """The rung a request is counted under: its header, ``shed`` for a bare 503, or ``error``."""
    if record.rung:
        return record.rung
    return "shed" if record.shed else "error"


@dataclass(frozen=True)
class Segment:
    """A stretch of traffic answered by one rung.

    Attributes:
        rung: The rung.
        start: Send time of its first request.
        end: Send time of the first request of the next segment (or of the last request).
    """

    rung: str
    start: float
    end: float


def segments(records: Sequence[RequestRecord], min_run: int = 3) -> list[Segment]:
    """Split the traffic into rung segments, by send time; failed requests are skipped.

    A new segment starts only when ``min_run`` consecutive requests agree on a rung, so the
    few requests in flight across a switch do not read as flapping.

    Example:
        >>> recs = [RequestRecord(t, 0.01, 200, r, False, 1, 1)
        ...         for t, r in [(0, "h100"), (1, "a100"), (2, "a100"), (3, "a100")]]
        >>> [(s.rung, s.start) for s in segments(recs)]
        [('h100', 0), ('a100', 1)]
    """
    ordered = sorted((r for r in records if not r.failed), key=lambda r: r.t)
    out: list[Segment] = []
    current: str | None = None
    start = 0.0
    run_rung: str | None = None
    run_start = 0.0
    run_len = 0
    for rec in ordered:
        rung = rung_of(rec)
        if rung == run_rung:
            run_len += 1
        else:
            run_rung, run_start, run_len = rung, rec.t, 1
        if current is None:
            current, start = rung, rec.t
        elif rung != current and run_len >= min_run:
            out.append(Segment(current, start, run_start))
            current, start = rung, run_start
    if current is not None:
        out.append(Segment(current, start, ordered[-1].t))
    return out


def relative_to(t: float, events: Sequence[StoryEvent]) -> str:
    """``"+1.2 s after h100 preempted"`` for the latest story event at or before ``t``."""
    before = [e for e in events if e.t <= t]
    if not before:
        return "before the story"
    last = max(before, key=lambda e: e.t)
    return f"+{t - last.t:.1f} s after {last.label}"


def server_transitions(watch_events: Sequence[Mapping[str, Any]],
                       to_demo_time: Callable[[Mapping[str, Any]], float]) -> list[dict[str, Any]]:
    """The router's own transition events (from ``GET /-/ladder``), on the demo's clock."""
    out = []
    for e in watch_events:
        out.append({"t": round(to_demo_time(e), 3), "from": e.get("from"), "to": e.get("to"),
                    "direction": e.get("direction"), "reason": e.get("reason", ""),
                    "kind": e.get("kind", "transition")})
    return sorted(out, key=lambda e: e["t"])


def summarize(
    records: Sequence[RequestRecord],
    *,
    ladder: Sequence[str],
    story: Sequence[StoryEvent],
    model_accuracy: Mapping[str, float],
    transitions: Sequence[Mapping[str, Any]] = (),
    climbed_at: float | None = None,
    router_max_degraded_s: float | None = None,
    rate_hz: float | None = None,
    marked_down: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The end-of-demo figures, JSON-ready (the content of ``summary.json``).

    Args:
        records: Every request the load generator recorded.
        ladder: Rung names, best first (the first is "not degraded").
        story: The story steps as they happened.
        model_accuracy: Each rung model's held-out accuracy (measured offline at start).
        transitions: The router's transition events on the demo clock (may be empty).
        climbed_at: Demo time of the first top-rung answer after the top came back.
        router_max_degraded_s: The largest ``degraded_s`` the router reported (its
            longest degraded episode, as polled).
        rate_hz: The offered load.
        marked_down: Rungs the router marked down after a failed request (``t``, ``rung``,
            ``reason``), as polled.

    Example:
        >>> summarize([], ladder=["h100", "cpu"], story=[], model_accuracy={})["requests"]
        {'sent': 0, 'answered': 0, 'shed': 0, 'failed': 0}
    """
    ordered = sorted(records, key=lambda r: r.t)
    answered = [r for r in ordered if r.answered]
    per_rung: dict[str, dict[str, Any]] = {}
    for name in [*ladder, *sorted({rung_of(r) for r in ordered} - set(ladder))]:
        mine = [r for r in ordered if rung_of(r) == name]
        ans = [r for r in mine if r.answered]
        lat = [r.latency_s * 1000 for r in mine]
        per_rung[name] = {
            "requests": len(mine),
            "answered": len(ans),
            "served_accuracy": _ratio(sum(r.correct for r in ans), len(ans)),
            "model_accuracy": model_accuracy.get(name),
            "p50_ms": _round(percentile(lat, 50)),
            "p99_ms": _round(percentile(lat, 99)),
        }
    top = ladder[0] if ladder else None
    segs = segments(ordered)
    degraded = sum(s.end - s.start for s in segs if s.rung != top)
    last_add = max((e.t for e in story if e.action == "add" and e.node_type == top),
                   default=None)
    latencies = [r.latency_s * 1000 for r in ordered if not r.failed]
    failures = [f"t={r.t:.2f}s {r.error or r.status}" for r in ordered if r.failed]
    return {
        "ladder": list(ladder),
        "rate_hz": rate_hz,
        "duration_s": round(ordered[-1].t - ordered[0].t, 3) if ordered else 0.0,
        "requests": {"sent": len(ordered), "answered": len(answered),
                     "shed": sum(r.shed for r in ordered), "failed": len(failures)},
        "served_accuracy": _ratio(sum(r.correct for r in answered), len(answered)),
        "stale_answers": sum(r.stale for r in answered),
        "per_rung": per_rung,
        "latency_ms": {"p50": _round(percentile(latencies, 50)),
                       "p95": _round(percentile(latencies, 95)),
                       "p99": _round(percentile(latencies, 99)),
                       "max": _round(max(latencies, default=None))},
        "degraded_s": round(degraded, 3),
        "router_max_degraded_s": router_max_degraded_s,
        "climb_back_s": (round(climbed_at - last_add, 3)
                         if climbed_at is not None and last_add is not None else None),
        "story": [e.to_dict() for e in story],
        "observed_transitions": [
            {"t": round(b.start, 3), "from": a.rung, "to": b.rung,
             "after": relative_to(b.start, story)} for a, b in zip(segs, segs[1:], strict=False)],
        "transitions": [{**t, "after": relative_to(float(t["t"]), story)} for t in transitions],
        "marked_down": [{**d, "after": relative_to(float(d["t"]), story)} for d in marked_down],
        "failures": failures[:20],
    }


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def write_summary(summary: Mapping[str, Any], path: Path) -> Path:
    """Write ``summary`` as indented JSON (creating the folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return path


def write_requests_csv(records: Sequence[RequestRecord], path: Path) -> Path:
    """Every request, one row each, by send time (for your own analysis)."""
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    fields = ["t", "latency_s", "status", "rung", "stale", "digit", "label", "error"]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(fields)
        for r in sorted(records, key=lambda r: r.t):
            writer.writerow([f"{r.t:.4f}", f"{r.latency_s:.4f}", r.status or "", r.rung or "",
                             int(r.stale), "" if r.digit is None else r.digit, r.label,
                             r.error])
    return path


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def live_view(records: Sequence[RequestRecord], *, now: float, ladder: Sequence[str],
              story: Sequence[StoryEvent], state: Mapping[str, Any] | None = None,
              next_step: str = "", window_s: float = 5.0) -> RenderableType:
    """The live progress table: rung mix and p50 latency over the last ``window_s``."""
    recent = [r for r in records if r.t >= now - window_s]
    table = Table(title=f"ladder demo  t={now:5.1f}s", title_justify="left",
                  caption=f"last {window_s:.0f} s of traffic", caption_justify="left")
    for col, justify in (("rung", "left"), ("share", "left"), ("req/s", "right"),
                         ("p50 ms", "right"), ("total", "right"), ("router sees", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    names = [*ladder, *sorted({rung_of(r) for r in records} - set(ladder))]
    seen = {r.get("name"): r for r in (state or {}).get("rungs", []) if isinstance(r, dict)}
    for name in names:
        mine = [r for r in recent if rung_of(r) == name]
        share = len(mine) / len(recent) if recent else 0.0
        bar = "█" * round(share * 10)
        total = sum(1 for r in records if rung_of(r) == name)
        style = "bold green" if share >= 0.5 else ("red" if name == "error" else "")
        table.add_row(Text(name, style=style), f"{bar:<10} {share * 100:3.0f}%",
                      f"{len(mine) / window_s:.1f}",
                      _ms(percentile([r.latency_s * 1000 for r in mine], 50)), str(total),
                      _router_sees(seen.get(name)), style=None if mine or total else "dim")
    failed = sum(r.failed for r in records)
    shed = sum(r.shed for r in records)
    current = (state or {}).get("current") or (state or {}).get("rung") or "?"
    degraded = (state or {}).get("degraded_s")
    status = Text.assemble(
        ("router rung: ", "bold"), (str(current), "bold cyan"),
        f"   degraded: {degraded:.1f} s" if isinstance(degraded, (int, float)) else "",
        f"   sent: {len(records)}   shed (503): {shed}   ",
        (f"failed: {failed}", "bold red" if failed else "green"))
    return Group(table, status, *story_lines(story, next_step))


def story_lines(story: Sequence[StoryEvent], next_step: str = "") -> list[Text]:
    """The live view's last lines: each story step so far, then the next one."""
    lines = [Text(f"  t={e.t:5.1f}s  {e.label}" + (f"  ({e.error})" if e.error else ""),
                  style="yellow") for e in story]
    if next_step:
        lines.append(Text(f"  next: {next_step}", style="dim"))
    return lines


def _router_sees(rung: Mapping[str, Any] | None) -> Text:
    """``obtainable, 1 replica`` / ``down: <reason>`` from the router's state of a rung."""
    if rung is None:
        return Text("")
    if rung.get("down_reason"):
        return Text(f"down: {rung['down_reason']}"[:36], style="red")
    replicas = rung.get("running_replicas")
    extra = f" ({replicas} replica{'' if replicas == 1 else 's'})" \
        if isinstance(replicas, int) else ""
    if rung.get("obtainable"):
        return Text(f"up{extra}", style="green")
    return Text(f"unobtainable{extra}", style="red")


def summary_view(summary: Mapping[str, Any]) -> RenderableType:
    """The end-of-demo summary as rich renderables."""
    req = summary["requests"]
    table = Table(title="requests per rung", title_justify="left")
    for col in ("rung", "requests", "served acc.", "model acc. (held-out)", "p50 ms", "p99 ms"):
        table.add_column(col, justify="left" if col == "rung" else "right")
    for name, row in summary["per_rung"].items():
        table.add_row(name, str(row["requests"]), _pct(row["served_accuracy"]),
                      _pct(row["model_accuracy"]), _ms(row["p50_ms"]), _ms(row["p99_ms"]))
    lines: list[RenderableType] = [table]
    lines.append(Text.assemble(
        ("sent ", "bold"), str(req["sent"]), ("  answered ", "bold"), str(req["answered"]),
        ("  shed (503) ", "bold"), str(req["shed"]), ("  failed ", "bold"),
        (str(req["failed"]), "bold red" if req["failed"] else "bold green")))
    lat = summary["latency_ms"]
    lines.append(Text(f"served accuracy {_pct(summary['served_accuracy'])}   latency p50 "
                      f"{_ms(lat['p50'])} ms  p99 {_ms(lat['p99'])} ms   degraded "
                      f"{summary['degraded_s']:.1f} s"
                      + (f" (router: {summary['router_max_degraded_s']:.1f} s)"
                         if summary.get("router_max_degraded_s") is not None else "")
                      + "   climb back "
                      + ("-" if summary["climb_back_s"] is None
                         else f"{summary['climb_back_s']:.1f} s after {summary['ladder'][0]} "
                              "returned")))
    lines.append(timeline_table(summary))
    for f in summary["failures"][:5]:
        lines.append(Text(f"  failed: {f}", style="red"))
    return Group(*lines)


def timeline_table(summary: Mapping[str, Any]) -> Table:
    """Story steps, the router's transitions and alerts, and rungs marked down, by time."""
    which = "transitions" if summary["transitions"] else "observed_transitions"
    source = "the router's events" if which == "transitions" else "as seen in the answers"
    table = Table(title=f"timeline (transitions: {source})", title_justify="left")
    table.add_column("t (s)", justify="right")
    table.add_column("what")
    table.add_column("when")
    table.add_column("why")
    rows: list[tuple[float, int, list[str], str]] = []
    for e in summary["story"]:
        style = "bold red" if e["action"] == "kill" else "bold green"
        took = f"took {e['took_s']:.2f} s" + (f"; {e['error']}" if e.get("error") else "")
        rows.append((e["t"], 0, [e["label"], "story step", took], style))
    for t in summary[which]:
        alert = t.get("kind") == "alert"
        move = "alert" if alert else f"{t['from'] or '-'} -> {t['to'] or '-'}"
        rows.append((float(t["t"]), 1, [move, t["after"], t.get("reason", "")],
                     "yellow" if alert else ""))
    for d in summary.get("marked_down", []):
        rows.append((float(d["t"]), 2, [f"{d['rung']} marked down", d["after"], d["reason"]],
                     "dim"))
    for t, _, cells, style in sorted(rows, key=lambda r: (r[0], r[1])):
        table.add_row(f"{t:.2f}", *cells, style=style)
    return table
