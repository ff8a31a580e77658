"""PNG of a simulation: rung over time per policy, the traces underneath, the trade-off."""
# With compared policies (``compare=``) the rows are those policies and the trade-off
# panels put quality-weighted availability against churn and against cost.

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray_ladder._lazy import requires_extra
from ray_ladder.simulate.report import PolicyReport, SimulationReport

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def _time_unit(duration_s: float) -> tuple[float, str]:
    if duration_s >= 2 * 86400:
        return 86400.0, "days"
    if duration_s >= 2 * 3600:
        return 3600.0, "hours"
    if duration_s >= 120:
        return 60.0, "minutes"
    return 1.0, "seconds"


def plot_report(report: SimulationReport, path: str | Path, *, max_policies: int = 8) -> Path:
    """Write a PNG: served rung over time (one row per policy), the traces, the trade-off.

    matplotlib is imported here, not at module load, and drawn with the Agg canvas
    (no display, no global backend switch). When the report compares policies
    (``compare=``), the rows are the compared policies and the trade-off shows each of
    them: quality-weighted availability against moves per day, and against the cost per
    served hour; otherwise the rows are the hysteresis sweep.

    Args:
        report: What :func:`~ray_ladder.simulate.simulate` returned.
        path: Where to write the PNG (parent folders are created).
        max_policies: Timeline rows drawn (the trade-off plots show every policy).

    Example:
        >>> plot_report(report, "sim-out/gpu.png")  # doctest: +SKIP
    """
    with requires_extra("plots", "plot_report (simulate --plot)"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

    policies = (report.comparison or report.policies)[:max_policies]
    traced = list(report.timeline.names)
    heights = [1.4] * len(policies) + [0.55] * len(traced) + [3.2]
    fig = Figure(figsize=(11, 1.0 + sum(heights)), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(len(heights), 1, height_ratios=heights)
    unit, unit_name = _time_unit(report.duration_s)
    end = report.duration_s / unit
    tick_scale = report.tick_s / unit
    first: Axes | None = None
    names = [r["name"] for r in report.rungs]
    # Show the rungs some policy reached (and "(none)" only when something went unserved).
    reached = [i for p in policies for _, i in p.replay.served]
    lowest = max(reached, default=0)
    labels = names[: lowest + 1] + (["(none)"] if -1 in reached else [])
    for row, policy in enumerate(policies):
        ax = fig.add_subplot(grid[row], sharex=first)
        first = first or ax
        rep = policy.replay
        xs = [t * tick_scale for t, _ in rep.served] + [end]
        ys = [i if i >= 0 else lowest + 1 for _, i in rep.served]
        ys.append(ys[-1])
        ax.step(xs, ys, where="post", lw=0.8, color="tab:blue")
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_ylabel(_short(policy), fontsize=8, rotation=0, ha="right", va="center")
        ax.tick_params(labelbottom=False)
        if row == 0:
            ax.set_title(_title(report, policy), fontsize=9)
    ends = report.timeline.starts[1:] + [report.ticks]
    for col, name in enumerate(traced):
        ax = fig.add_subplot(grid[len(policies) + col], sharex=first)
        first = first or ax
        xs, ys = [], []
        for start, stop, values in zip(report.timeline.starts, ends,
                                       report.timeline.rows, strict=True):
            xs += [start * tick_scale, stop * tick_scale]
            ys += [int(values[col])] * 2
        ax.fill_between(xs, 0, ys, color="tab:green", alpha=0.6, lw=0)
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
        last = col == len(traced) - 1
        ax.tick_params(labelbottom=last)
        if last:
            ax.set_xlabel(f"time ({unit_name}); green: trace says obtainable")
    if first is not None:
        first.set_xlim(0, end)
    if report.comparison:
        bottom = grid[-1].subgridspec(1, 2)
        _compare_tradeoff(fig.add_subplot(bottom[0]), fig.add_subplot(bottom[1]), report)
    else:
        _tradeoff(fig.add_subplot(grid[-1]), report)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out


def _title(report: SimulationReport, policy: PolicyReport) -> str:
    """The top row's title: the ladder and the tick (and the delays of a sweep)."""
    if report.comparison:
        return f"{report.ladder}: served rung per policy (tick {report.tick_s:g} s)"
    return (f"{report.ladder}: served rung (tick {report.tick_s:g} s, promotion delay "
            f"{policy.promotion_delay_s:g} s, demotion delay {policy.demotion_delay_s:g} s)")


def _tradeoff(ax: Axes, report: SimulationReport) -> None:
    """Climbs per day against degraded seconds per day, one point per policy."""
    days = report.duration_s / 86400.0
    xs = [p.climbs_per_day for p in report.policies]
    ys = [p.degraded_s_total / days for p in report.policies]
    ax.plot(xs, ys, "o-", color="tab:blue", label="policies")
    for p, x, y in zip(report.policies, xs, ys, strict=True):
        ax.annotate(f"h={p.hysteresis}", (x, y), textcoords="offset points", xytext=(5, 5),
                    fontsize=8)
    o = report.oracle
    ax.plot([o.climbs_per_day], [o.degraded_s_total / days], "k*", ms=10,
            label="oracle (h=1, no switching cost)")
    ax.set_xlabel("climbs per day")
    ax.set_ylabel("degraded seconds per day")
    ax.set_title("trade-off: fewer climbs cost degraded time", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _short(policy: PolicyReport) -> str:
    """A row label: ``h=2`` for the sweep, the policy's name (and options) otherwise."""
    if policy.label.startswith("ladder h="):
        return policy.label.removeprefix("ladder ")
    return policy.policy.replace(" (", "\n(").replace(", ", ",\n").replace(
        "when_unsatisfiable=", "")


def _compare_tradeoff(churn: Axes, money: Axes, report: SimulationReport) -> None:
    """Quality-weighted availability against moves per day, and against cost per hour."""
    markers = "osD^vP<>Xh"
    for n, p in enumerate([*report.comparison, report.oracle]):
        oracle = p is report.oracle
        style: dict[str, Any] = {
            "marker": "*" if oracle else markers[n % len(markers)], "ls": "none",
            "ms": 11 if oracle else 7, "color": "k" if oracle else f"C{n}",
            "label": "oracle (h=1, free switching)" if oracle else p.policy}
        qwa = p.quality_weighted_availability
        churn.plot([p.climbs_per_day + p.falls_per_day], [qwa], **style)
        if p.cost_per_served_hour is not None:
            money.plot([p.cost_per_served_hour], [qwa], **style)
    churn.set_xlabel("climbs + falls per day")
    churn.set_ylabel("quality-weighted availability")
    churn.set_title("availability against churn", fontsize=9)
    money.set_xlabel("cost per served hour (serving + starting + standby)")
    money.set_title("availability against cost", fontsize=9)
    for ax in (churn, money):
        ax.grid(alpha=0.3)
    money.legend(fontsize=7, loc="lower right")
