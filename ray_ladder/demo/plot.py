"""demo-out/timeline.png: the rung and the latency of every request over time, events marked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ray_ladder.demo.load import RequestRecord
from ray_ladder.demo.report import rung_of, segments
from ray_ladder.demo.story import StoryEvent

_COLORS = {"h100": "#2ca02c", "a100": "#1f77b4", "cpu": "#ff7f0e", "cache": "#9467bd",
           "shed": "#7f7f7f", "error": "#d62728"}


def plot_timeline(records: Sequence[RequestRecord], story: Sequence[StoryEvent],
                  ladder: Sequence[str], path: Path,
                  transitions: Sequence[Mapping[str, Any]] = (),
                  title: str = "ray-ladder demo") -> Path:
    """Draw the timeline PNG: top, the answering rung (step) and each request (dots);
    bottom, request latency (log scale) coloured by rung; story events as vertical lines.

    Example:
        >>> plot_timeline(records, events, ["h100", "a100", "cpu"], Path("t.png"))  # doctest: +SKIP
    """
    import matplotlib

    matplotlib.use("Agg")  # no display: the demo runs in terminals and CI
    import matplotlib.pyplot as plt

    names = [*ladder, *sorted({rung_of(r) for r in records} - set(ladder))]
    level = {name: i for i, name in enumerate(names)}
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True,
                                      gridspec_kw={"height_ratios": [1, 1.2]})

    segs = segments(records)
    if segs:
        xs = [s.start for s in segs] + [segs[-1].end]
        ys = [level[s.rung] for s in segs] + [level[segs[-1].rung]]
        top.step(xs, ys, where="post", color="black", linewidth=1.2, alpha=0.7,
                 label="serving rung")
    for name in names:
        mine = [r for r in records if rung_of(r) == name]
        if mine:
            top.scatter([r.t for r in mine], [level[name]] * len(mine), s=14, alpha=0.5,
                        color=_COLORS.get(name, "#17becf"), label=None)
            bottom.scatter([r.t for r in mine], [max(r.latency_s * 1000, 0.1) for r in mine],
                           s=6, alpha=0.6, color=_COLORS.get(name, "#17becf"),
                           label=f"{name} ({len(mine)})")
    for t in transitions:  # the router's own moves (startup ones, before t=0, left out)
        if t.get("kind", "transition") == "transition" and float(t["t"]) >= 0:
            top.axvline(float(t["t"]), color="gray", linestyle=":", linewidth=0.8)
    top.set_yticks(range(len(names)), names)
    top.set_ylim(len(names) - 0.5, -0.5)  # best rung on top
    top.set_ylabel("rung")
    top.set_title(title)
    bottom.set_yscale("log")
    bottom.set_ylabel("latency (ms)")
    bottom.set_xlabel("seconds since traffic started")
    if records:
        bottom.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=8,
                      markerscale=2, ncol=len(names), frameon=False)
    if records:
        bottom.set_xlim(min(0.0, min(r.t for r in records)) - 1,
                        max(r.t + r.latency_s for r in records) + 1)
    mark_story((top, bottom), story, label_y=-0.5)
    return save_figure(fig, path)


def mark_story(axes: Sequence[Any], story: Sequence[StoryEvent], label_y: float) -> None:
    """Grid every axis; a red dashed line at each preemption, green at each return, across
    all ``axes``; the steps' labels at ``label_y`` on the first."""
    for ax in axes:
        ax.grid(True, alpha=0.3)
        for e in story:
            ax.axvline(e.t, color=_story_color(e), linestyle="--", linewidth=1.2)
    for e in story:
        axes[0].annotate(e.label, xy=(e.t, label_y), xytext=(3, -2), textcoords="offset points",
                         fontsize=8, va="top", color=_story_color(e))


def _story_color(event: StoryEvent) -> str:
    return "#d62728" if event.action == "kill" else "#2ca02c"


def save_figure(fig: Any, path: Path) -> Path:
    """Lay ``fig`` out, write it as a PNG at ``path`` (creating the folder), close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
