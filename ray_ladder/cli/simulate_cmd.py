"""`ray-ladder simulate`: replay capacity traces through the ladder's selector."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from ray_ladder.cli.simulate_sections import loss_lines, request_lines
from ray_ladder.cli.simulate_sets import emit_sets, run_sets, set_values, write_json
from ray_ladder.core.spec import load_ladder
from ray_ladder.simulate.api import simulate as run_simulation
from ray_ladder.simulate.baselines import ALL, POLICIES
from ray_ladder.simulate.report import PolicyReport, SimulationReport
from ray_ladder.simulate.specs import SPEC_FORMS, parse_duration, parse_trace_arg
from ray_ladder.simulate.trace_sets import TraceSetReport, names_a_set
from ray_ladder.simulate.zones import ZONE_SEP

_TRACE_HELP = (
    "RUNG=SPEC, repeatable. SPEC: " + " | ".join(SPEC_FORMS)
    + ". Durations take s, m, h, d or w. Rungs without a trace are always obtainable. "
    "RUNG/ZONE=SPEC, once per zone: a rung offered in several zones, obtainable while any "
    "zone is (Karpenter launches and caches per zone)."
)
_COMPARE_HELP = (
    "Policies to replay side by side, repeatable: all | NAME[,NAME...] | "
    "NAME:key=value[,key=value...]. Names: " + ", ".join(POLICIES)
    + ". 'all' = " + " ".join(ALL) + "."
)


def fmt_s(seconds: float) -> str:
    """Seconds as a short human duration: 45s, 12m, 12m30s, 3h05m, 2d04h."""
    s = round(seconds)
    if s < 120:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s % 60 else f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _spread(p: PolicyReport, key: str, point: str, fmt: str, *, scale: float = 1.0,
            complement: bool = False) -> str:
    """``point`` and the figure's bootstrap interval: ``8.55 [8.10–9.00]``.

    ``complement``: the figure is ``1 - key`` (not served, from ``served_fraction``).
    """
    interval = p.spread.get(key)
    if interval is None:
        return point
    lo, hi = (1 - interval[1], 1 - interval[0]) if complement else interval
    low, high = format(lo * scale, fmt), format(hi * scale, fmt)
    return point if low == high else f"{point} [{low}–{high}]"  # no spread: no bracket


def _blocks(report: SimulationReport) -> str:
    """What the intervals resample: ``days``, or ``2h24m blocks`` of a short replay."""
    block_s = float(report.spread_method.get("block_s", 0.0))
    return "days" if block_s == 86400 else f"{fmt_s(block_s)} blocks"


def _cost_cell(p: PolicyReport) -> str:
    if p.cost_per_served_hour is None:
        return "-"
    return _spread(p, "cost_per_served_hour", f"{p.cost_per_served_hour:.2f}", ".2f")


def _interval_rows(columns: list[tuple[str, PolicyReport]], key: str,
                   fmt: str) -> list[tuple[str, list[str]]]:
    """Two rows under a figure: the low and high ends of its 90 % interval."""
    ends = [p.spread.get(key) for _, p in columns]
    return [(f"  90% {side}", ["-" if e is None else format(e[i], fmt) for e in ends])
            for i, side in enumerate(("low", "high"))]


def rung_table(report: SimulationReport) -> Table:
    """Rungs with their trace, obtainable fraction, warmth, quality and cost."""
    table = Table(title=f"ladder {report.ladder}: {report.ticks} ticks of "
                        f"{report.tick_s:g} s ({fmt_s(report.duration_s)})")
    gangs = any(r.get("need", 1) > 1 for r in report.rungs)
    cols = ["rung", "kind", "trace"] + (["needs"] if gangs else []) + [
        "obtainable", "warm", "quality", "cost/h"]
    for col in cols:
        table.add_column(col, no_wrap=col != "trace", overflow="fold")
    for r in report.rungs:
        source = " | ".join(_short_source(part) for part in str(r["trace"]).split(" | "))
        need = [str(r.get("need", 1))] if gangs else []
        table.add_row(r["name"], r["kind"], source, *need, _pct(r["obtainable_fraction"]),
                      "yes" if r["warm"] else "no", f"{r['quality']:g}",
                      f"{r['cost_per_hour']:g}")
    return table


def _short_source(part: str) -> str:
    """A trace source without its folder (on the command line already); a zone's source
    (``us-west-2a=/t/x.json``) keeps its zone."""
    if "/" not in part and "\\" not in part:
        return part
    zone, sep, path = part.partition("=")
    if sep and "/" not in zone and "\\" not in zone:
        return f"{zone}={Path(path).name}"
    return Path(part).name


def _comparison_rows(report: SimulationReport) -> tuple[list[str], list[list[str]]]:
    """The comparison's headers and rows as text (one row per policy, then the oracle).

    "not served" is the same for every policy: no rung, or the shed rung ("try later");
    "$ per served h" divides the whole bill by the rest; "regret" is the quality x
    availability lost against the best rung obtainable at each tick, "below best" the
    share of time on a worse rung than that one. Brackets: the 90 % bootstrap interval
    over days (:mod:`ray_ladder.simulate.spread`).
    """
    top = report.rungs[0]["name"] if report.rungs else "top"
    headers = ["policy", "q x\navail", "regret", "below\nbest", f"on\n{top}",
               "not\nserved", "climbs\n/day", "falls\n/day", "flaps", "$ per\nserved h"]
    rows = []
    for p in [*report.comparison, report.oracle]:
        name = "oracle (h=1, free switching)" if p is report.oracle else p.policy
        if p is not report.oracle and p.hysteresis_s is not None:
            name += f" h={_hyst(p)}"  # the hysteresis used, in seconds
        not_served = 1 - p.served_fraction
        rows.append([name, f"{p.quality_weighted_availability:.4f}",
                     _spread(p, "regret", f"{p.regret:.4f}", ".4f"),
                     _pct(p.below_best_fraction), _pct(p.top_fraction),
                     _spread(p, "served_fraction", f"{100 * not_served:.2f}%", ".2f",
                             scale=100, complement=True),
                     f"{p.climbs_per_day:.2f}",
                     f"{p.falls_per_day:.2f}", str(p.flaps), _cost_cell(p)])
    return headers, rows


def _compare_table(report: SimulationReport, headers: list[str], rows: list[list[str]],
                   cols: list[int], first: bool) -> Table:
    title = (f"policies side by side (flaps: a climb, then a fall within "
             f"{fmt_s(report.flap_window_s)}; [90% interval, {_blocks(report)} "
             "resampled])") if first else None
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column(headers[0], min_width=16, max_width=16, overflow="fold")
    for i in cols:
        table.add_column(headers[i], justify="right", no_wrap=True)
    for row in rows:
        table.add_row(row[0], *(row[i] for i in cols))
    return table


def comparison_tables(report: SimulationReport, console: Console) -> list[Table]:
    """One row per compared policy (and the oracle), the same columns for every one.

    The columns fit 80 (a pipe's width) together: two-line headers, no vertical rules.
    Narrower, the figures wrap onto a second table under the first, each with the
    policy column, so no column is ever cut off.
    """
    headers, rows = _comparison_rows(report)
    wide = console.options.update(width=10_000)  # measure unclamped, compare to the width
    groups: list[list[int]] = [[]]
    for i in range(1, len(headers)):
        trial = _compare_table(report, headers, rows, [*groups[-1], i], False)
        if groups[-1] and Measurement.get(console, wide, trial).maximum > console.width:
            groups.append([])
        groups[-1].append(i)
    return [_compare_table(report, headers, rows, cols, n == 0)
            for n, cols in enumerate(groups)]


def _hyst(p: PolicyReport) -> str:
    """The hysteresis used, in seconds, and the seconds asked when they differ: ``10m``,
    ``10m (asked 3s)``."""
    used = fmt_s(p.hysteresis_s or 0.0)
    asked = p.hysteresis_asked_s
    if asked is None or abs(asked - (p.hysteresis_s or 0.0)) < 1e-9:
        return used
    return f"{used} (asked {asked:g}s)" if asked < 120 else f"{used} (asked {fmt_s(asked)})"


def policy_table(report: SimulationReport) -> Table:
    """One column per policy (and the oracle), one row per figure."""
    columns: list[tuple[str, PolicyReport]] = [
        (f"h={p.hysteresis}\n{_hyst(p)}", p) for p in report.policies
    ]
    columns.append(("oracle", report.oracle))
    table = Table(title="policies (oracle: hysteresis 1, no switching cost; 90% low/high: "
                        f"{_blocks(report)} resampled)")
    table.add_column("", no_wrap=True)
    for title, _ in columns:
        table.add_column(title, justify="right")
    rows: list[tuple[str, list[str]]] = []
    for name in report.policies[0].rung_fraction:
        rows.append((f"on {name}", [_pct(p.rung_fraction[name]) for _, p in columns]))
    rows += [
        ("nothing served", [_pct(p.unserved_fraction) for _, p in columns]),
        ("falls", [str(p.falls) for _, p in columns]),
        ("climbs", [str(p.climbs) for _, p in columns]),
        ("  abandoned", [str(p.climbs_abandoned) for _, p in columns]),
        ("climbs/day", [f"{p.climbs_per_day:.2f}" for _, p in columns]),
        ("below best avail.", [fmt_s(p.below_best_s_total) for _, p in columns]),
        ("regret", [f"{p.regret:.4f}" for _, p in columns]),
        *_interval_rows(columns, "regret", ".4f"),
        ("degraded (< top)", [fmt_s(p.degraded_s_total) for _, p in columns]),
        ("  episodes", [str(p.degraded_episodes) for _, p in columns]),
        ("  longest", [fmt_s(p.degraded_longest_s) for _, p in columns]),
        ("  p95 episode", [fmt_s(p.degraded_p95_episode_s) for _, p in columns]),
        ("alerts", [str(p.alerts) for _, p in columns]),
        ("quality x avail", [f"{p.quality_weighted_availability:.4f}" for _, p in columns]),
        ("cost", [f"{p.cost:,.0f}" for _, p in columns]),
        ("  vs always top", [_pct(p.cost_vs_top) for _, p in columns]),
        ("  vs oracle", [_pct(p.cost_vs_oracle) for _, p in columns]),
        ("standby (extra)", [f"{p.cost_standby:,.0f}" for _, p in columns]),
        ("served hours", [f"{p.served_hours:,.1f}" for _, p in columns]),
        ("served", [_pct(p.served_fraction) for _, p in columns]),
        *_interval_rows(columns, "served_fraction", ".1%"),
        ("$ per served h", ["-" if p.cost_per_served_hour is None
                            else f"{p.cost_per_served_hour:.2f}" for _, p in columns]),
        *_interval_rows(columns, "cost_per_served_hour", ".2f"),
    ]
    for label, cells in rows:
        table.add_row(label, *cells)
    return table


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--hysteresis {text!r}: expected integers like 1,2,3,5,10") from None


def _trace_specs(trace_args: tuple[str, ...]) -> dict[str, str | dict[str, str]]:
    """Rung -> trace spec from the ``--trace RUNG=SPEC`` options (one trace a rung), or
    zone -> spec from ``--trace RUNG/ZONE=SPEC`` (one a zone)."""
    specs: dict[str, str | dict[str, str]] = {}
    for arg in trace_args:
        key, spec = parse_trace_arg(arg)
        rung, sep, zone = (part.strip() for part in key.partition(ZONE_SEP))
        given = specs.get(rung)
        if isinstance(given, str) or (given is not None and not sep):
            raise ValueError(f"--trace {arg!r}: rung {rung!r} has a trace already (a rung "
                             f"in several zones takes RUNG{ZONE_SEP}ZONE=SPEC for each)")
        if not sep:
            specs[rung] = spec
            continue
        zones = given if given is not None else {}
        if zone in zones:
            raise ValueError(f"--trace {arg!r}: zone {zone!r} of {rung!r} has a trace already")
        zones[zone] = spec
        specs[rung] = zones
    return specs


def _needs(need_args: tuple[str, ...]) -> dict[str, int]:
    """Rung -> instances it needs at once, from the ``--need RUNG=K`` options."""
    need: dict[str, int] = {}
    for arg in need_args:
        rung, sep, k = arg.partition("=")
        if not sep or not k.strip().isdigit():
            raise ValueError(f"--need {arg!r}: expected RUNG=K, e.g. gang=4")
        need[rung.strip()] = int(k)
    return need


@click.command()
@click.argument("ladder_file", metavar="LADDER.yaml", type=click.Path(dir_okay=False))
@click.option("--trace", "trace_args", multiple=True, metavar="RUNG=SPEC", help=_TRACE_HELP)
@click.option("--hysteresis", default=None, metavar="H[,H...]",
              help="Promotion hysteresis values to compare, in ticks (default: the ladder's "
                   "promotion_hysteresis x probe_interval_s seconds, in ticks rounded up).")
@click.option("--tick", default=None, metavar="DUR",
              help="Seconds between observations (default: the finest trace gap, else 60).")
@click.option("--duration", default=None, metavar="DUR",
              help="Seconds to replay (default: the shortest file trace; needed when every "
                   "trace is generated).")
@click.option("--promotion-delay", default="0", metavar="DUR", show_default=True,
              help="Seconds from a climb decision until the new rung serves (GKE: 341).")
@click.option("--demotion-delay", default="0", metavar="DUR", show_default=True,
              help="Cold-start seconds after a fall onto a rung that is not warm.")
@click.option("--warm", default=None, metavar="RUNG[,RUNG...]|none",
              help="Compute rungs with warm standby (default: rungs with standby_replicas).")
@click.option("--compare", "compare", multiple=True, metavar="POLICY", help=_COMPARE_HELP)
@click.option("--need", "need_args", multiple=True, metavar="RUNG=K",
              help="Instances RUNG needs at once: obtainable only while its trace counts "
                   ">= K (default: the rung's params.nodes, else 1; a trace's @K wins).")
@click.option("--flap-window", default=None, metavar="DUR",
              help="Window for counting flaps (default: one hysteresis window).")
@click.option("--json", "json_out", default=None, type=click.Path(dir_okay=False),
              help="Write the JSON report here (- for stdout; the tables go to stderr).")
@click.option("--plot", "plot_out", default=None, type=click.Path(dir_okay=False),
              help="Write a PNG here (rung over time, traces, trade-off).")
@click.option("--trace-set", "trace_sets", multiple=True, metavar="NAME[=VALUE]",
              help="Replay once per set (zones, months, seeds), {set} in each --trace "
                   "becoming VALUE (default NAME); prints each headline figure per set "
                   "and its range across the sets. Repeatable.")
def simulate(
    ladder_file: str,
    trace_args: tuple[str, ...],
    hysteresis: str | None,
    tick: str | None,
    duration: str | None,
    promotion_delay: str,
    demotion_delay: str,
    warm: str | None,
    compare: tuple[str, ...],
    need_args: tuple[str, ...],
    flap_window: str | None,
    json_out: str | None,
    plot_out: str | None,
    trace_sets: tuple[str, ...],
) -> None:
    """Replay capacity traces through the ladder's selector (and, with --compare, the
    policies of Ray, GKE, Karpenter and LiteLLM) and report per policy.

    \b
    Examples:
      ray-ladder simulate ladder.yaml --trace h100=h100.json --hysteresis 1,2,3,5,10
      ray-ladder simulate ladder.yaml --trace h100=markov:up=6h,down=1h,seed=1 \\
          --trace a100=outage:2h-3h --duration 7d --tick 1m --promotion-delay 341
      ray-ladder simulate ladder.yaml --trace h100=h100.json --compare all \\
          --compare karpenter:consolidation=on
    """
    try:
        ladder = load_ladder(ladder_file)
        specs = _trace_specs(trace_args)
        warm_list = None
        if warm is not None:
            warm_list = [] if warm.strip() == "none" else [
                w.strip() for w in warm.split(",") if w.strip()]
        need = _needs(need_args)
        options: dict[str, Any] = dict(
            hysteresis=None if hysteresis is None else _ints(hysteresis),
            tick_s=None if tick is None else parse_duration(tick),
            duration_s=None if duration is None else parse_duration(duration),
            promotion_delay_s=parse_duration(promotion_delay),
            demotion_delay_s=parse_duration(demotion_delay),
            warm=warm_list,
            compare=list(compare) if compare else None,
            need=need,
            flap_window_s=None if flap_window is None else parse_duration(flap_window),
        )
        report = (run_sets(ladder, specs, set_values(trace_sets), plot_out, options)
                  if trace_sets or names_a_set(specs)
                  else run_simulation(ladder, specs, **options))
    except ValueError as err:  # ConfigError is a ValueError too
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    if isinstance(report, TraceSetReport):
        emit_sets(report, json_out)
        return
    _emit(report, json_out, plot_out)


def _emit(report: SimulationReport, json_out: str | None, plot_out: str | None) -> None:
    """Print the tables and the notes; write the JSON report and the PNG if asked."""
    # `--json -`: the report is stdout (for jq and pipes), so the tables go to stderr.
    console = Console(stderr=json_out == "-")
    console.print(rung_table(report))
    if report.policies:
        console.print(policy_table(report))
    for table in comparison_tables(report, console) if report.comparison else []:
        console.print(table)
    for note in report.notes:  # a row above the oracle is never printed in silence
        head = "NOTE: above the oracle" if note.kind == "above_oracle" else "NOTE"
        console.print(f"[bold red]{head}[/]: {escape(note.text)}")
    for line in [*request_lines(report), *loss_lines(report)]:
        console.print(escape(line))
    write_json(report.to_json(), json_out, console)
    if plot_out:
        from ray_ladder.simulate.plot import plot_report

        console.print(f"plot: {plot_report(report, plot_out)}")
