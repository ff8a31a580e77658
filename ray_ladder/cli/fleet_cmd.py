"""`ray-ladder fleet start FLEET.yaml`, `ray-ladder fleet status` (the cluster's arbiter) and
`ray-ladder fleet hash-key` (an entry of a shared endpoint's keys file)."""

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


@fleet.command("hash-key")
@click.option("--team", required=True, help="The fleet team the key belongs to.")
@click.option("--name", default=None, help="A label for the entry (who holds the key).")
def hash_key_cmd(team: str, name: str | None) -> None:
    """Read an API key on stdin and print its keys-file entry (its SHA-256, never the key).

    \b
    printf %s "$KEY" | ray-ladder fleet hash-key --team research >> keys.yaml
    """
    import re

    from ray_ladder.core.keys import MIN_KEY_CHARS, hash_key
    from ray_ladder.core.spec import SLUG_PATTERN

    if not re.fullmatch(SLUG_PATTERN, team):
        click.echo(f"--team {team!r} is not a fleet team's name (lowercase letters, digits, "
                   "'.', '_', '-')", err=True)
        sys.exit(EXIT_INVALID)
    if sys.stdin.isatty():
        key = click.prompt("API key", hide_input=True, err=True)
    else:
        key = sys.stdin.read()
    key = key.strip()
    if len(key) < MIN_KEY_CHARS or any(c.isspace() for c in key):
        click.echo(f"the key must be one word of at least {MIN_KEY_CHARS} characters (a "
                   "shorter one could be guessed from its hash); e.g. python -c \"import "
                   "secrets; print('sk-' + secrets.token_urlsafe(32))\"", err=True)
        sys.exit(EXIT_INVALID)
    label = f", name: {json.dumps(name)}" if name else ""
    click.echo(f"  - {{team: {team}, sha256: {hash_key(key)}{label}}}")
