"""`ray-ladder fleet start FLEET.yaml` and `ray-ladder fleet status`: the cluster's arbiter."""

from __future__ import annotations

import json
import logging
import sys

import click
from rich.console import Console

from ray_ladder.cli.status_cmd import ADDRESS, open_cluster, teams_view
from ray_ladder.core.exceptions import ConfigError

EXIT_INVALID = 2


@click.group()
def fleet() -> None:
    """The fleet arbiter: teams that share the cluster's scarce rungs (docs/teams.md)."""


@fleet.command()
@click.argument("path", type=click.Path(dir_okay=False))
@ADDRESS
def start(path: str, address: str) -> None:
    """Start the cluster's arbiter for the fleet file PATH (or report the running one).

    Checks the file first (exit 2 when invalid) and the cluster (exit 3 when none
    answers), then joins it as a driver just long enough to start the detached actor.
    """
    from ray_ladder.core.fleet import load_fleet

    try:
        spec = load_fleet(path)
    except ConfigError as err:
        click.echo(str(err), err=True)
        sys.exit(EXIT_INVALID)
    reader = open_cluster(address)  # fails fast (exit 3) where no GCS answers
    import ray

    from ray_ladder.fleet import start_arbiter

    ray.init(address=reader.address, logging_level=logging.ERROR, log_to_driver=False)
    handle = start_arbiter(spec)
    status = ray.get(handle.status.remote(), timeout=60)
    click.echo(f"arbiter of fleet {status['fleet']} running on {reader.address}: "
               f"{len(status['teams'])} team(s), round {status['rounds']}")


@fleet.command()
@ADDRESS
@click.option("--json", "as_json", is_flag=True, help="Print the grants as JSON.")
def status(address: str, as_json: bool) -> None:
    """Per team: units held per shared rung, reclaim notices, budget (read-only)."""
    teams = open_cluster(address).teams()
    if as_json:
        click.echo(json.dumps(teams, indent=2))
    elif teams:
        Console(width=120).print(teams_view(teams))
    if not teams:
        click.echo("no fleet arbiter has published grants on this cluster "
                   "(ray-ladder fleet start FLEET.yaml)", err=True)
        sys.exit(1)
