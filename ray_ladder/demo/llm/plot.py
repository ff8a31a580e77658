"""demo-out/timeline.png of the LLM story: every stream as a line coloured by the rung that
produced each token; tokens per second per rung below; the kill and the return marked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ray_ladder.demo.llm.records import StreamLog, StreamView
from ray_ladder.demo.plot import _COLORS, mark_story, save_figure
from ray_ladder.demo.story import StoryEvent


def plot_streams(log: StreamLog, story: Sequence[StoryEvent], ladder: Sequence[str],
                 path: Path, *, models: Mapping[str, str] | None = None,
                 transitions: Sequence[Mapping[str, Any]] = (),
                 title: str = "ray-ladder LLM demo: every stream across the preemption") -> Path:
    """Draw the timeline PNG.

    Top: one row per stream (by send time), coloured by the rung that produced its tokens;
    thin grey while it waits (from the request to its first token, and from the last
    token of a lost rung to the first of the next), a black tick where it moved rung, a
    red cross where it broke. Bottom: tokens per second from each rung (1 s bins). Red
    dashed lines at the preemptions, green at the return, dotted at the router's moves.

    Args:
        log: The clients' streams.
        story: The story steps as they happened.
        ladder: Rung names, best first.
        path: Where to write the PNG.
        models: Rung -> model name, for the legend.
        transitions: The router's transition events on the demo clock.
        title: The figure's title.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display: the demo runs in terminals and CI
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    views = sorted(log.streams.values(), key=lambda v: v.opened)
    rungs = [*ladder, *sorted({t.rung for t in log.tokens} - set(ladder))]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 1]})
    segs, waits, moves, breaks = _stream_lines(views, rungs)
    top.add_collection(LineCollection(waits, colors="#bbbbbb", linewidths=1.0,
                                      label="waiting: for the first token, across a fall"))
    for rung, lines in segs.items():
        if lines:
            label = f"{rung} ({models[rung]})" if models and rung in models else rung
            top.add_collection(LineCollection(lines, colors=_COLORS.get(rung, "#17becf"),
                                              linewidths=2.2, label=f"{label}: "
                                              f"{sum(1 for t in log.tokens if t.rung == rung)} "
                                              "tokens"))
    if moves:
        top.scatter(*zip(*moves, strict=True), marker="|", s=40, color="black", zorder=3,
                    label=f"moved rung mid-stream ({len(moves)})")
    if breaks:
        top.scatter(*zip(*breaks, strict=True), marker="x", s=30, color="#d62728", zorder=3,
                    label=f"broken stream ({len(breaks)})")
    top.set_ylim(len(views) + 0.5, -1.5)  # first stream on top
    top.set_ylabel("stream (by send time)")
    top.set_title(title)
    if views:
        top.legend(loc="lower left", fontsize=8, framealpha=0.9)

    end = max([t.t for t in log.tokens] + [v.opened for v in views] + [0.0])
    bins = int(end) + 1
    for rung in rungs:
        counts = [0] * bins
        for t in log.tokens:
            if t.rung == rung and t.t >= 0:
                counts[int(t.t)] += 1
        if any(counts):
            bottom.step(range(bins), counts, where="post", color=_COLORS.get(rung, "#17becf"),
                        label=rung)
    bottom.set_ylabel("tokens/s")
    bottom.set_xlabel("seconds since traffic started")
    bottom.set_xlim(min([0.0] + [v.opened for v in views]) - 1, end + 1)
    if log.tokens:
        bottom.legend(loc="upper right", fontsize=8, ncol=len(rungs), frameon=False)
    for move in transitions:  # the router's own moves (startup ones, before t=0, left out)
        if move.get("kind", "transition") == "transition" and float(move["t"]) >= 0:
            top.axvline(float(move["t"]), color="gray", linestyle=":", linewidth=0.8)
    mark_story((top, bottom), story, label_y=-1.5)
    return save_figure(fig, path)


def _stream_lines(views: Sequence[StreamView], rungs: Sequence[str]) -> tuple[
        dict[str, list[Any]], list[Any], list[tuple[float, int]], list[tuple[float, int]]]:
    """Row ``i`` is ``views[i]``: its token segments by rung, its waits, where it moved
    rung and where it broke."""
    segs: dict[str, list[Any]] = {r: [] for r in rungs}
    waits: list[Any] = []
    moves: list[tuple[float, int]] = []
    breaks: list[tuple[float, int]] = []
    for row, view in enumerate(views):
        # Grey while the stream waits (for its first token, across a fall), then one
        # segment per run of tokens from the same rung.
        before = view.opened
        run_start = 0
        for i, tok in enumerate(view.tokens):
            if i == run_start:
                waits.append([(before, row), (tok.t, row)])
                if i:
                    moves.append((tok.t, row))
            if i + 1 == len(view.tokens) or view.tokens[i + 1].rung != tok.rung:
                segs[tok.rung].append([(view.tokens[run_start].t, row), (tok.t, row)])
                before, run_start = tok.t, i + 1
        if view.broken:
            breaks.append(((view.closed.t if view.closed else before), row))
    return segs, waits, moves, breaks
