"""`ray-ladder timeline`: rung over time per ladder, from the cluster's events, as a PNG."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from ray_ladder._lazy import require_modules, requires_extra
from ray_ladder.cli.events_cmd import parse_duration
from ray_ladder.cli.status_cmd import ADDRESS, open_cluster

#: How each non-transition event is marked: (matplotlib marker, colour, label).
MARKS = {
    "alert": ("X", "tab:red", "alert (max_degraded_seconds)"),
    "stockout": ("v", "tab:orange", "launch refused (stock-out)"),
    "requested": ("^", "tab:green", "hook requested a node"),
    "released": ("o", "tab:gray", "hook released a rung"),
    "node-joined": ("P", "tab:blue", "node joined"),
    "node-lost": ("x", "tab:purple", "node lost"),
}


def rung_order(ladder: str, events: Sequence[Mapping[str, Any]],
               ladders: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The ladder's rungs best first (from its published entry, else as first seen).

    Example:
        >>> rung_order("l", [{"from": None, "to": "b"}, {"from": "b", "to": "a"}], {})
        ['b', 'a']
    """
    known = list((ladders.get(ladder) or {}).get("rungs") or [])
    for e in events:
        for name in (e.get("from"), e.get("to"), e.get("rung")):
            if name and name not in known:
                known.append(name)
    return known


def lines(events: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], list[tuple[float, Any]]]:
    """Per (part, source): the (wall time, rung) steps of its transitions (None: no rung).

    Example:
        >>> lines([{"kind": "transition", "part": "serve", "source": "app", "wall": 1.0,
        ...         "from": None, "to": "h100"}])
        {('serve', 'app'): [(1.0, 'h100')]}
    """
    out: dict[tuple[str, str], list[tuple[float, Any]]] = {}
    for e in events:
        if e.get("kind") != "transition":
            continue
        key = (str(e.get("part")), str(e.get("source") or ""))
        steps = out.setdefault(key, [])
        if not steps and e.get("from") is not None:
            steps.append((float(e["wall"]), e.get("from")))  # where it was before
        steps.append((float(e["wall"]), e.get("to")))
    return out


def draw(events: Sequence[Mapping[str, Any]], ladders: Mapping[str, Mapping[str, Any]],
         path: str | Path, *, end: float | None = None, title: str = "") -> Path:
    """Write a PNG: one panel per ladder, a step line per user (app, task, trial, hook),
    the events marked. Returns the path.

    Example:
        >>> draw(events, {}, "timeline.png")  # doctest: +SKIP
    """
    with requires_extra("plots", "ray-ladder timeline"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

    by_ladder: dict[str, list[Mapping[str, Any]]] = {}
    for e in events:
        by_ladder.setdefault(str(e.get("ladder")), []).append(e)
    names = sorted(by_ladder)
    if not names:
        raise ValueError("no events to draw")
    walls = [float(e["wall"]) for e in events]
    t0, t1 = min(walls), max(max(walls), end or 0.0)
    span = max(t1 - t0, 1.0)
    fig = Figure(figsize=(12, 0.6 + 2.4 * len(names)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(names), 1, squeeze=False, sharex=True)[:, 0]
    for ax, ladder in zip(axes, names, strict=True):
        evs = by_ladder[ladder]
        order = rung_order(ladder, evs, ladders)
        y_of = {name: i for i, name in enumerate(order)}
        none_y = len(order)
        # A "(none)" row only where a user was left without a rung.
        labels = order + (["(none)"] if any(e.get("kind") == "transition"
                                            and e.get("to") is None for e in evs) else [])
        for (part, source), steps in sorted(lines(evs).items()):
            xs = [t - t0 for t, _ in steps] + [t1 - t0]
            ys = [none_y if r is None else y_of[r] for _, r in steps]
            ys.append(ys[-1])
            ax.step(xs, ys, where="post", linewidth=2, label=f"{part} {source}".strip())
        seen: set[str] = set()
        for e in evs:
            mark = MARKS.get(str(e.get("kind")))
            if mark is None:
                continue
            rung = e.get("rung") or e.get("to")
            y = y_of.get(rung, none_y) if rung else none_y
            label = None if mark[2] in seen else mark[2]
            seen.add(mark[2])
            ax.scatter([float(e["wall"]) - t0], [y], marker=mark[0], color=mark[1], s=70,
                       zorder=3, label=label)
        ax.set_yticks(range(len(labels)), labels)
        ax.set_ylim(len(labels) - 0.5, -0.5)  # best rung on top
        ax.set_title(f"ladder {ladder}", loc="left")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    start = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t0))
    axes[-1].set_xlabel(f"seconds since {start}")
    axes[-1].set_xlim(-0.02 * span, span * 1.02)
    if title:
        fig.suptitle(title)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out


@click.command()
@ADDRESS
@click.option("--ladder", "ladder_name", default=None, help="Only this ladder.")
@click.option("--since", default=None, metavar="DURATION",
              help="Only the last DURATION (30s, 10m, 2h, 1d).")
@click.option("-o", "--output", default="timeline.png", show_default=True,
              type=click.Path(dir_okay=False), help="PNG to write.")
def timeline(address: str, ladder_name: str | None, since: str | None, output: str) -> None:
    """Draw rung over time per ladder from the cluster's events, events marked."""
    window = parse_duration(since) if since else None  # a bad value fails before connecting
    require_modules("plots", "ray-ladder timeline", ["matplotlib"])  # so does a missing extra
    reader = open_cluster(address)
    start = time.time() - window if window is not None else None
    events = [e for e in reader.events(ladder=ladder_name, since=start)
              if e.get("kind") in ("transition", *MARKS)]
    if not events:
        click.echo("no ladder events recorded" + (f" for {ladder_name!r}" if ladder_name
                                                   else ""), err=True)
        raise SystemExit(1)
    path = draw(events, reader.ladders(), output, end=time.time(),
                title=f"ray-ladder timeline of {reader.address}")
    click.echo(f"wrote {path} ({len(events)} events)")
