"""`ray-ladder simulate-teams FLEET.yaml --trace demand.csv`: replay per-team demand
against the fleet's arbiter, first-come-first-served and a Kueue-like policy."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table

from ray_ladder.core.exceptions import ConfigError
from ray_ladder.core.fleet import load_fleet
from ray_ladder.simulate.specs import parse_duration
from ray_ladder.simulate.teams import (
    POLICIES,
    DemandTrace,
    TeamsReport,
    generate_bursts,
    load_demand,
    simulate_teams,
)

EXIT_INVALID = 2
_COLUMNS = (("share err\nmax/mean", None), ("wait\np50", "wait_p50_s"),
            ("wait\np99", "wait_p99_s"), ("lost\nunit-s", "work_lost_unit_s"),
            ("cloud\nnode-h", "cloud_node_h"),
            ("cloud while\non-prem free", "cloud_node_h_while_onprem_free"),
            ("budget\noverrun", "budget_overrun"))


def teams_table(report: TeamsReport) -> Table:
    """One row per policy and team: the figures of docs/teams.md's "Simulator"."""
    table = Table(title=f"fleet {report.fleet}: {report.ticks} ticks of {report.tick_s:g} s, "
                        f"capacity {report.capacity}", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("policy")
    table.add_column("team")
    for header, _ in _COLUMNS:
        table.add_column(header, justify="right", no_wrap=True)
    for policy in report.policies:
        for name, f in policy.teams.items():
            cells = [f"{f.share_error_max_units:g}/{f.share_error_mean_units:.2f}"]
            for _, key in _COLUMNS[1:]:
                value = getattr(f, str(key))
                cells.append("-" if value is None else f"{value:.3g}")
            table.add_row(policy.policy, name, *cells)
        table.add_section()
    return table


def _capacity(args: tuple[str, ...]) -> dict[str, int]:
    out: dict[str, int] = {}
    for arg in args:
        rung, sep, units = arg.partition("=")
        if not sep or not units.strip().isdigit():
            raise click.BadParameter(f"{arg!r}: use RUNG=UNITS, e.g. h100=16",
                                     param_hint="--capacity")
        out[rung.strip()] = int(units)
    return out


def _trace(trace: str | None, bursts: str | None, seed: int, fleet_spec: object,
           duration: str | None) -> DemandTrace:
    end = parse_duration(duration) if duration else None
    if (trace is None) == (bursts is None):
        raise click.UsageError("give one of --trace FILE or --bursts DURATION")
    if trace is not None:
        return load_demand(trace, end)
    return generate_bursts(fleet_spec, parse_duration(str(bursts)), seed)  # type: ignore[arg-type]


@click.command("simulate-teams")
@click.argument("fleet_file", metavar="FLEET.yaml", type=click.Path(dir_okay=False))
@click.option("--trace", default=None, type=click.Path(dir_okay=False),
              help="Demand CSV: rows time_s,team,rung,units (docs/teams.md, Simulator).")
@click.option("--bursts", default=None, metavar="DUR",
              help="Instead of --trace: generated bursts over DUR (base half the quota, "
                   "bursts of one quota, about hourly; see --seed).")
@click.option("--seed", default=0, show_default=True, help="Seed of --bursts.")
@click.option("--capacity", "capacity_args", multiple=True, metavar="RUNG=UNITS",
              help="On-prem units of a shared rung (default: the sum of the quotas).")
@click.option("--tick", default=None, metavar="DUR",
              help="Seconds between rounds (default: the fleet's control_period_s).")
@click.option("--duration", default=None, metavar="DUR",
              help="Replay length (default: the trace's last row).")
@click.option("--checkpoint", default="5m", show_default=True, metavar="DUR|none",
              help="Checkpoint interval of evicted work (the Kueue-like policy).")
@click.option("--policy", "policies", multiple=True, type=click.Choice(POLICIES),
              help="Policies to replay (repeatable; default: all three).")
@click.option("--json", "json_out", default=None, type=click.Path(dir_okay=False),
              help="Write the whole report as JSON to this file ('-': stdout only).")
def simulate_teams_cmd(fleet_file: str, trace: str | None, bursts: str | None, seed: int,
                       capacity_args: tuple[str, ...], tick: str | None,
                       duration: str | None, checkpoint: str, policies: tuple[str, ...],
                       json_out: str | None) -> None:
    """Replay per-team demand on FLEET.yaml's shared rungs: the arbiter, FCFS, Kueue-like."""
    try:
        spec = load_fleet(fleet_file)
    except ConfigError as err:
        click.echo(str(err), err=True)
        sys.exit(EXIT_INVALID)
    try:
        demand = _trace(trace, bursts, seed, spec, duration)
        report = simulate_teams(
            spec, demand, capacity=_capacity(capacity_args),
            tick_s=parse_duration(tick) if tick else None,
            checkpoint_s=None if checkpoint == "none" else parse_duration(checkpoint),
            policies=policies or POLICIES)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    doc = json.dumps(report.to_dict(), indent=2)
    if json_out == "-":
        click.echo(doc)
        return
    Console(width=120).print(teams_table(report))
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(doc + "\n")
