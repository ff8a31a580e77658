"""demo-out/teams-timeline.png: who held which h100 unit when (the arbiter's grants,
sampled), and where each team's requests and tasks ran."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ray_ladder.demo.plot import save_figure
from ray_ladder.demo.teams.scenario import H100_UNITS, TEAMS, Result, Sample

_OWNER = {"a": "#2ca02c", "b": "#ff7f0e", "b (noticed)": "#ffbb78", "free": "#dddddd"}
_RUNG = {"h100": "#2ca02c", "a100": "#1f77b4", "l4": "#9467bd", "shed": "#7f7f7f",
         "lost": "#d62728"}


def unit_owner(sample: Sample, unit: int) -> str:
    """Who holds h100 unit ``unit`` in ``sample``: a's units first, then b's (its
    noticed ones last), then free. Units are counted, not named: the slot is a picture.

    Example:
        >>> s = Sample(0.0, {"a": {"held": 1}, "b": {"held": 1, "noticed": 1}})
        >>> [unit_owner(s, u) for u in range(3)]
        ['a', 'b (noticed)', 'free']
    """
    held_a = sample.teams.get("a", {}).get("held", 0)
    b = sample.teams.get("b", {})
    held_b, noticed_b = b.get("held", 0), b.get("noticed", 0)
    if unit < held_a:
        return "a"
    if unit < held_a + held_b:
        return "b (noticed)" if unit >= held_a + held_b - noticed_b else "b"
    return "free"


def owner_spans(samples: Sequence[Sample], unit: int) -> list[tuple[float, float, str]]:
    """``(start, end, owner)`` runs of one unit slot over the samples.

    Example:
        >>> s = [Sample(0.0, {"b": {"held": 1}}), Sample(1.0, {"b": {"held": 1}}),
        ...      Sample(2.0, {"a": {"held": 1}}), Sample(3.0, {"a": {"held": 1}})]
        >>> owner_spans(s, 0)
        [(0.0, 2.0, 'b'), (2.0, 3.0, 'a')]
    """
    spans: list[tuple[float, float, str]] = []
    for now, nxt in zip(samples, samples[1:], strict=False):
        who = unit_owner(now, unit)
        if spans and spans[-1][2] == who:
            spans[-1] = (spans[-1][0], nxt.t, who)
        else:
            spans.append((now.t, nxt.t, who))
    return spans


def plot_teams(res: Result, path: Path, title: str = "ray-ladder demo: teams") -> Path:
    """Top: each h100 unit's holder over time. Bottom: every request and task call of
    each team at the time it was sent, coloured by the rung that served it. The story's
    moments as vertical lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 6), sharex=True,
                                      gridspec_kw={"height_ratios": [1, 1.3]})
    for unit in range(H100_UNITS):
        for start, end, who in owner_spans(res.samples, unit):
            top.broken_barh([(start, end - start)], (unit - 0.4, 0.8), color=_OWNER[who])
    top.set_yticks(range(H100_UNITS), [f"h100 unit {u + 1}" for u in range(H100_UNITS)])
    top.legend(handles=[Patch(color=c, label=k) for k, c in _OWNER.items()], fontsize=8,
               loc="upper left", ncol=4)
    top.set_title(title)
    rows = [(team, kind) for team in TEAMS for kind in ("requests", "tasks")]
    for y, (team, kind) in enumerate(rows):
        recs = [(r.t, r.rung if r.status == 200 else "lost") for r in res.requests
                if r.team == team] if kind == "requests" else \
            [(c.t, c.rung or "lost") for c in res.tasks if c.team == team]
        for rung in sorted({k for _, k in recs}, key=str):
            xs = [t for t, k in recs if k == rung]
            bottom.scatter(xs, [y] * len(xs), s=12, color=_RUNG.get(str(rung), "#17becf"),
                           label=f"{team} {kind}: {rung} ({len(xs)})")
    bottom.set_yticks(range(len(rows)), [f"{t} {k}" for t, k in rows])
    bottom.set_ylim(len(rows) - 0.5, -0.5)
    bottom.set_xlabel("seconds since b's load started")
    bottom.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), fontsize=7, ncol=4,
                  frameon=False)
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        for m in res.marks:
            ax.axvline(m.t, color="#555555", linestyle="--", linewidth=0.8)
    for i, m in enumerate(res.marks):
        top.annotate(m.label, xy=(m.t, H100_UNITS - 0.55 + 0.22 * (i % 4)), fontsize=7,
                     xytext=(2, 0), textcoords="offset points", va="bottom", rotation=0)
    top.set_ylim(-0.5, H100_UNITS + 0.5)
    return save_figure(fig, path)
