"""`ray-ladder validate`, `ray-ladder show` and `ray-ladder schema`: ladder and fleet files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from ray_ladder.cli.spec_views import (
    clusters_table,
    data_line,
    fleet_rungs_table,
    fleet_teams_table,
    ladder_table,
)
from ray_ladder.core.documents import SUFFIXES, json_schema, load_document
from ray_ladder.core.exceptions import ConfigError
from ray_ladder.core.fleet import Fleet, is_fleet_document
from ray_ladder.core.spec import Ladder

__all__ = ["ladder_table", "load_file", "schema", "show", "validate"]

#: Exit code of an invalid file (docs/spec.md); click's usage errors are 2 as well.
EXIT_INVALID = 2


def load_file(path: str | Path) -> Ladder | Fleet:
    """A ladder or a fleet file (a top-level ``fleet:`` key tells them apart), validated.

    Raises:
        ConfigError: naming the file, each field, the value and the fix.
    """
    data = load_document(path)
    if is_fleet_document(data):
        return Fleet.from_dict(data, str(path))
    return Ladder.from_dict(data, str(path))


def _summary(model: Ladder | Fleet) -> str:
    if isinstance(model, Fleet):
        return (f"fleet {model.fleet}, {len(model.teams)} teams, "
                f"{len(model.rungs)} shared rungs")
    return f"{model.name}, {len(model.rungs)} rungs"


def _expand(paths: tuple[str, ...]) -> list[tuple[Path, bool]]:
    """Files to check, each with whether it came from a directory (one line each)."""
    out: list[tuple[Path, bool]] = []
    for arg in paths:
        p = Path(arg)
        if not p.is_dir():
            out.append((p, False))
            continue
        found = sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in SUFFIXES)
        if not found:
            click.echo(f"error: {p}: no {', '.join('*' + s for s in SUFFIXES)} file in this "
                       "directory. Fix: pass a directory of ladder or fleet files", err=True)
            sys.exit(EXIT_INVALID)
        out += [(f, True) for f in found]
    return out


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(), metavar="FILE|DIR...")
def validate(files: tuple[str, ...]) -> None:
    """Check ladder and fleet files (a directory: each *.yaml, *.yml and *.json in it);
    exit 0 when all are valid, 2 with the errors otherwise.

    One line per file on stdout (`PATH: ok (...)` or `PATH: invalid (N problems)` for a
    file of a directory); every problem on stderr with its field, value and fix.
    """
    failed = False
    for path, in_dir in _expand(files):
        try:
            model = load_file(path)
        except ConfigError as err:
            failed = True
            if in_dir:
                n = len(err.issues)
                click.echo(f"{path}: invalid ({n} problem{'s' if n != 1 else ''})")
            click.echo(str(err), err=True)
        else:
            click.echo(f"{path}: ok ({_summary(model)})")
    if failed:
        sys.exit(EXIT_INVALID)


def _policy_line(ladder: Ladder) -> str:
    p = ladder.policy
    return (f"policy: promotion_hysteresis={p.promotion_hysteresis} "
            f"max_degraded_seconds={p.max_degraded_seconds} "
            f"probe_interval_s={p.probe_interval_s} pending_timeout_s={p.pending_timeout_s} "
            f"retry_after_s={p.retry_after_s}")


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True,
              help="Print the validated file as JSON, every default filled in.")
def show(file: str, as_json: bool) -> None:
    """Print a table of a ladder's rungs and policy, or of a fleet's shared rungs and teams."""
    try:
        model = load_file(file)
    except ConfigError as err:
        click.echo(str(err), err=True)
        sys.exit(EXIT_INVALID)
    if as_json:
        click.echo(json.dumps(model.model_dump(mode="json"), indent=2))
        return
    console = Console()
    if isinstance(model, Fleet):
        console.print(fleet_rungs_table(model, console.width))
        console.print(fleet_teams_table(model, console.width))
        console.print(f"control_period_s={model.control_period_s:g}")
        return
    console.print(ladder_table(model, console.width))
    if model.clusters:
        console.print(clusters_table(model, console.width))
    if (line := data_line(model)) is not None:
        console.print(line)
    console.print(_policy_line(model))


@click.command()
@click.option("--fleet", "of_fleet", is_flag=True, help="The fleet file's schema instead.")
def schema(of_fleet: bool) -> None:
    """Print the JSON Schema of the ladder file (or, with --fleet, of the fleet file).

    \b
    For editors (VS Code's YAML extension, a `# yaml-language-server: $schema=` line) and
    CI linters (check-jsonschema):
      ray-ladder schema > ladder.schema.json
    """
    model: type[Ladder] | type[Fleet] = Fleet if of_fleet else Ladder
    click.echo(json.dumps(json_schema(model), indent=2))
