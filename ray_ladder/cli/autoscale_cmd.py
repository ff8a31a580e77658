"""`ray-ladder autoscale start|status|stop`: run and inspect the autoscaler hook."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ray_ladder.autoscale.sources import STATE_PREFIX
from ray_ladder.cli.status_cmd import open_cluster
from ray_ladder.cluster.event_store import Kv, read_entries
from ray_ladder.core.exceptions import ConfigError
from ray_ladder.core.spec import load_ladder

_ADDRESS = click.option("--address", default="auto", show_default=True,
                        help="Ray cluster address (GCS host:port).")


@contextmanager
def _connected(address: str) -> Iterator[None]:
    """Join the cluster as a driver, after checking within seconds that one answers
    (``ray.init`` alone waits for a GCS that is not there, forever): exit 3 otherwise."""
    import ray

    if ray.is_initialized():  # already a driver (tests, notebooks): reuse the connection
        yield
        return
    open_cluster(address)  # prints why and exits EXIT_NO_CLUSTER (3) when none answers
    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def _ago(t: float | None, now: float) -> str:
    if t is None:
        return "-"
    d = now - t
    return f"{d:.0f} s ago" if d >= 0 else f"in {-d:.0f} s"


def status_text(rung: dict[str, Any], now: float) -> str:
    """A rung's status cell: ``queued since 2 min ago`` for queued capacity (issue 19).

    Example:
        >>> status_text({"status": "queued", "queued_since": 880.0}, now=1000.0)
        'queued since 120 s ago'
    """
    if rung["status"] == "queued" and rung.get("queued_since") is not None:
        return f"queued since {_ago(rung['queued_since'], now)}"
    window = rung.get("window")
    if window and rung["status"] in ("idle", "up"):
        opens, closes = window
        note = f"window opens {_ago(opens, now)}" if now < opens else \
            f"window closes {_ago(closes, now)}" if now < closes else "window closed"
        return f"{rung['status']} ({note})"
    return str(rung["status"])


def status_table(name: str, state: dict[str, Any], now: float) -> Table:
    """A rich table of one hook's state (one row per rung)."""
    age = now - float(state.get("time", now))
    stale = age > 3 * float(state.get("interval_s", 1.0)) + 2
    note = "stopped" if state.get("stopped") else \
        f"stale: last update {age:.0f} s ago" if stale else f"updated {age:.1f} s ago"
    title = (f"ladder {name}: serving {state.get('serving')}, target {state.get('target')}"
             f" ({note}, restarts {state.get('restarts', 0)})")
    table = Table(title=title)
    for col in ("rung", "status", "role", "nodes", "requested", "failures",
                "last stock-out", "reason", "next retry"):
        table.add_column(col, no_wrap=col != "reason", overflow="fold")
    for rung, r in state.get("rungs", {}).items():
        table.add_row(rung, status_text(r, now), r["role"], str(r["nodes"]),
                      str(r["target_bundles"]),
                      str(r["failures"]), _ago(r.get("last_stockout"), now),
                      r.get("last_stockout_reason") or "-",
                      _ago(r.get("next_retry"), now) if r["status"] == "stocked_out" else "-")
    return table


def hook_states(kv: Kv, ladder: str | None = None) -> dict[str, dict[str, Any]]:
    """The hook states published in the cluster's KV, by ladder (all, or ``ladder``'s)."""
    entries = read_entries(kv, STATE_PREFIX + (ladder or ""))
    names = {key[len(STATE_PREFIX):]: state for key, state in entries.items()}
    return {name: state for name, state in names.items() if ladder in (None, name)}


@click.group()
def autoscale() -> None:
    """Run and inspect the autoscaler hook (one actor per ladder)."""


@autoscale.command()
@_ADDRESS
@click.option("--ladder", "ladder_name", default=None, help="Only this ladder.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw state as JSON.")
def status(address: str, ladder_name: str | None, as_json: bool) -> None:
    """Show each hook's state: target per rung, last stock-out, next retry.

    Read-only, like `ray-ladder status`: it joins no cluster (no driver, job or actor).
    Exit 0: found; 1: no hook state; 3: no cluster at the address (within seconds).
    """
    states = hook_states(open_cluster(address).kv, ladder_name)
    if not states:
        click.echo(f"no autoscaler hook state found{f' for {ladder_name!r}' if ladder_name else ''}"
                   "; start one with `ray-ladder autoscale start LADDER.yaml`", err=True)
        sys.exit(1)
    if as_json:
        click.echo(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "planner"}
                               for k, v in states.items()}, indent=2))
        return
    console = Console(width=max(Console().width, 140))
    now = time.time()
    for name, state in sorted(states.items()):
        console.print(status_table(name, state, now))
        if state.get("last_error"):
            console.print(f"[red]last error:[/red] {state['last_error']}")


@autoscale.command()
@click.argument("ladder_file", type=click.Path(exists=True, dir_okay=False))
@_ADDRESS
@click.option("--node-type", "node_types", multiple=True, metavar="RUNG=TYPE[,TYPE]",
              help="Autoscaler node types of a rung (default: the type named after it); "
                   "RUNG= marks fixed machines the autoscaler cannot launch (on-prem).")
@click.option("--retry-initial-s", type=float, default=None, help="First backoff (s).")
@click.option("--retry-max-s", type=float, default=None, help="Longest backoff (s).")
@click.option("--provision-timeout-s", type=float, default=None,
              help="No node after this long counts as a stock-out.")
@click.option("--drain-s", type=float, default=None, help="Drain time before release (s).")
@click.option("--interval-s", type=float, default=None, help="Seconds between steps.")
@click.option("--team", default=None, help="Fleet team the ladder's work belongs to: cloud "
              "rungs are bought for it only while on-prem is full for it (docs/teams.md).")
def start(ladder_file: str, address: str, node_types: tuple[str, ...], team: str | None,
          **values: Any) -> None:
    """Start the hook actor of LADDER_FILE (detached; returns at once).

    Exit 2: an invalid ladder file or option; 3: no cluster at the address.
    """
    from ray_ladder.autoscale.hook import hook_name, start_hook

    try:
        ladder = load_ladder(ladder_file)
    except ConfigError as err:
        click.echo(str(err), err=True)
        sys.exit(2)
    options: dict[str, Any] = {k: v for k, v in values.items() if v is not None}
    mapping: dict[str, list[str]] = {}
    for item in node_types:
        rung, sep, types = item.partition("=")
        if not sep or not rung:
            raise click.BadParameter(f"{item!r}: write RUNG=TYPE[,TYPE] (RUNG= for a static "
                                     "rung of fixed machines)", param_hint="--node-type")
        mapping[rung] = [t.strip() for t in types.split(",") if t.strip()]
    if mapping:
        options["node_types"] = mapping
    try:
        with _connected(address):
            import ray

            hook = start_hook(ladder, options, team=team)
            # Wait for the actor to answer, so a detached hook is really up when we return.
            ray.get(hook.state.remote(), timeout=120)
    except ValueError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    click.echo(f"started {hook_name(ladder.name)} (namespace ray_ladder); "
               f"watch it with `ray-ladder autoscale status --ladder {ladder.name}`")


@autoscale.command()
@click.option("--ladder", "ladder_name", required=True, help="Ladder whose hook to stop.")
@_ADDRESS
def stop(ladder_name: str, address: str) -> None:
    """Stop a ladder's hook and withdraw its node request.

    Exit 1: no hook runs for the ladder; 3: no cluster at the address.
    """
    from ray_ladder.autoscale.hook import stop_hook

    with _connected(address):
        stopped = stop_hook(ladder_name)
    if not stopped:
        click.echo(f"no running hook for ladder {ladder_name!r}", err=True)
        sys.exit(1)
    click.echo(f"stopped the hook of {ladder_name}")
