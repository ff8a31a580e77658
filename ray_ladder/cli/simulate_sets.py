"""`ray-ladder simulate --trace-set`: one ladder over several trace sets, each headline
figure per set, its range across the sets, and where a margin holds in every set."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ray_ladder.core.spec import Ladder
from ray_ladder.simulate.losses import FIGURES
from ray_ladder.simulate.trace_sets import (
    SetFigure,
    SetMargin,
    TraceSetReport,
    expand_sets,
    simulate_sets,
)
from ray_ladder.simulate.zones import RungTraces

_VERDICTS = {"ladder": "the ladder ahead in every set", "tie": "tied in every set",
             "depends": "depends on the set"}


def set_values(args: tuple[str, ...]) -> dict[str, str]:
    """Set name -> the value ``{set}`` becomes, from ``--trace-set NAME[=VALUE]``.

    Example:
        >>> set_values(("us-west-2a", "jan=2024-01"))
        {'us-west-2a': 'us-west-2a', 'jan': '2024-01'}
    """
    out: dict[str, str] = {}
    for arg in args:
        name, sep, value = (part.strip() for part in arg.partition("="))
        if not name or (sep and not value):
            raise ValueError(f"--trace-set {arg!r}: expected NAME or NAME=VALUE, e.g. "
                             "us-west-2a or jan=2024-01")
        if name in out:
            raise ValueError(f"--trace-set {arg!r}: set {name!r} is given twice")
        out[name] = value if sep else name
    return out


def fmt_figure(figure: str, x: float | None, *, signed: bool = False) -> str:
    """A headline figure at the precision margins are compared at (shares in %, flaps
    whole).

    Example:
        >>> fmt_figure("not_served", 0.01234), fmt_figure("below_best_fraction", 0.01234)
        ('1.23%', '1.2%')
        >>> fmt_figure("regret", -0.002, signed=True), fmt_figure("flaps", 3.0, signed=True)
        ('-0.0020', '+3')
    """
    if x is None:
        return "-"
    sign, digits = "+" if signed else "", FIGURES[figure][3]
    if figure in ("below_best_fraction", "not_served"):  # compared to 0.1% and 0.01%
        return f"{100 * x:{sign}.{digits - 2}f}%"
    if figure == "flaps":
        return f"{round(x):{sign}d}"
    return f"{x:{sign}.{digits}f}"


def sets_table(out: TraceSetReport) -> Table:
    """One row per set: its ticks and each rung's obtainable share."""
    first = next(iter(out.sets.values()))
    names = [r["name"] for r in first.rungs]
    table = Table(title="trace sets (obtainable share of each rung)", box=box.SIMPLE_HEAD)
    table.add_column("set", no_wrap=True)
    table.add_column("ticks", justify="right")
    for name in names:
        table.add_column(name, justify="right")
    for set_name, report in out.sets.items():
        share = {r["name"]: r["obtainable_fraction"] for r in report.rungs}
        table.add_row(set_name, f"{report.ticks:,} x {report.tick_s:g} s",
                      *(f"{100 * share[n]:.1f}%" for n in names))
    return table


def figure_table(out: TraceSetReport, figure: str) -> Table:
    """One row per policy (and the oracle): the figure in each set, then its range."""
    table = Table(title=f"{FIGURES[figure][0]} per trace set", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    table.add_column("policy", min_width=16, max_width=32, overflow="fold")
    for name in out.names:
        table.add_column(name, justify="right", overflow="fold")
    table.add_column("range", justify="right", no_wrap=True)
    for f in out.figures:
        if f.figure == figure:
            table.add_row(f.row, *(fmt_figure(figure, f.values[n]) for n in out.names),
                          _range(f))
    return table


def _range(f: SetFigure) -> str:
    if f.low is None or f.high is None:
        return "-"
    low, high = fmt_figure(f.figure, f.low), fmt_figure(f.figure, f.high)
    return low if low == high else f"{low}–{high}"


def margin_lines(out: TraceSetReport) -> list[str]:
    """Per ladder row and peer: the figures the ladder leads on in every set, those the
    peer leads on in every set, the ties, and those that depend on the set (with the
    ladder's lead per set): a margin that changes sign is within the difference between
    the sets."""
    if not out.margins:
        return []
    pairs = list(dict.fromkeys((m.ladder, m.peer) for m in out.margins))
    several = len({lad for lad, _ in pairs}) > 1
    lines = ["Margins across the sets (the ladder's lead, positive: the ladder does better):"]
    for lad, peer in pairs:
        ms = [m for m in out.margins if (m.ladder, m.peer) == (lad, peer)]
        who = f"{peer} vs {lad}" if several else peer
        parts = []
        for verdict in ("ladder", "peer", "tie", "depends"):
            chosen = [m for m in ms if m.verdict == verdict]
            if chosen:
                head = f"{peer} ahead in every set" if verdict == "peer" else _VERDICTS[verdict]
                parts.append(f"{head}: " + ", ".join(_lead(m, verdict) for m in chosen))
        lines.append(f"  {who}: " + "; ".join(parts))
    return lines


def _lead(m: SetMargin, verdict: str) -> str:
    label = FIGURES[m.figure][0]
    if verdict == "tie":
        return label
    leads = " / ".join(fmt_figure(m.figure, v, signed=True) for v in m.lead.values())
    return f"{label} ({leads})"


def emit_sets(out: TraceSetReport, json_out: str | None) -> None:
    """Print the sets, a table per headline figure, the margins and each set's notes;
    write the JSON report if asked (``-``: stdout, the tables then go to stderr)."""
    console = Console(stderr=json_out == "-")
    console.print(sets_table(out))
    for figure in FIGURES:
        console.print(figure_table(out, figure))
    for line in margin_lines(out):
        console.print(escape(line))
    for name, report in out.sets.items():
        for note in report.notes:
            head = "NOTE: above the oracle" if note.kind == "above_oracle" else "NOTE"
            console.print(f"[bold red]{head}[/] ({escape(name)}): {escape(note.text)}")
    write_json(out.to_json(), json_out, console)


def run_sets(ladder: Ladder, specs: Mapping[str, RungTraces], sets: Mapping[str, str],
             plot_out: str | None, options: Mapping[str, Any]) -> TraceSetReport:
    """The CLI's ``--trace-set`` run: ``{set}`` filled in per set, one replay each."""
    if not sets:
        raise ValueError("a --trace names {set}: give --trace-set NAME[=VALUE] for each set "
                         "(a zone, a month, a seed)")
    if plot_out:
        raise ValueError("--plot draws one trace set: drop --plot, or run one set")
    return simulate_sets(ladder, expand_sets(specs, sets), **options)


def write_json(text: str, json_out: str | None, console: Console) -> None:
    """The JSON report to stdout (``-``), to a file (its folder made; exit 2 naming the
    path when it cannot be written) or nowhere (``None``)."""
    if json_out == "-":
        click.echo(text)
    elif json_out:
        path = Path(json_out)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n", encoding="utf-8")
        except OSError as err:
            click.echo(f"error: cannot write the JSON report to {path}: {err.strerror}. "
                       "Fix: give a writable path, or - for stdout", err=True)
            sys.exit(2)
        console.print(f"JSON report: {path}")
