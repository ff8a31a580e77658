"""`ray-ladder validate` and `ray-ladder show`."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

from ray_ladder.core.exceptions import ConfigError
from ray_ladder.core.spec import Ladder, Rung, load_ladder


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
def validate(files: tuple[str, ...]) -> None:
    """Check ladder files; exit 0 when all are valid, 2 with the errors otherwise."""
    failed = False
    for path in files:
        try:
            ladder = load_ladder(path)
        except ConfigError as err:
            failed = True
            click.echo(str(err), err=True)
        else:
            click.echo(f"{path}: ok ({ladder.name}, {len(ladder.rungs)} rungs)")
    if failed:
        sys.exit(2)


def _placement_text(rung: Rung) -> str:
    if not rung.is_compute:
        return "-"
    parts = [f"{k}={v:g}" for k, v in rung.resources.items()]
    for key in ("num_gpus", "num_cpus"):
        value = getattr(rung, key)
        if value is not None:
            parts.append(f"{key}={value:g}")
    if rung.accelerator_type:
        parts.append(f"accelerator_type={rung.accelerator_type}")
    parts += [f"label {k}={v}" for k, v in rung.label_selector.items()]
    return ", ".join(parts)


def _train_text(rung: Rung) -> str:
    """``4 x (ladder/h100=2)``: the gang a Ray Train run puts on the rung."""
    if rung.train is None:
        return "-"
    each = rung.train.resources_per_worker
    per = ", ".join(f"{k}={v:g}" for k, v in each.items()) if each else _placement_text(rung)
    return f"{rung.train.workers} x ({per})"


def ladder_table(ladder: Ladder) -> Table:
    """A rich table of the rungs: order, kind, placement, quality, cost, tags (and capacity,
    training shape)."""
    table = Table(title=f"ladder {ladder.name}")
    # In a narrow or piped terminal rich would cut cells to "eu-cloud-h1…"; keep rung names
    # whole and fold the other cells so no name, resource or tag is lost.
    # The capacity column appears only where a rung says how it is bought (issue 19).
    bought = any(r.capacity is not None for r in ladder.rungs)
    trains = any(r.train is not None for r in ladder.rungs)  # likewise the training shape
    for col in ("#", "rung", "kind", "placement", "quality", "cost/h", "tags") + (
            ("capacity",) if bought else ()) + (("train",) if trains else ()):
        table.add_column(col, no_wrap=col in ("#", "rung"), overflow="fold")
    for i, r in enumerate(ladder.rungs):
        tags = ", ".join(f"{k}={v}" for k, v in r.tags.items())
        capacity = ((r.capacity.describe() if r.capacity else "on-demand" if r.is_compute
                     else "-"),) if bought else ()
        train = (_train_text(r),) if trains else ()
        table.add_row(str(i), r.name, r.kind, _placement_text(r), f"{r.quality:g}",
                      f"{r.cost_per_hour:g}", tags, *capacity, *train)
    return table


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
def show(file: str) -> None:
    """Print a table of the ladder's rungs and its policy."""
    try:
        ladder = load_ladder(file)
    except ConfigError as err:
        click.echo(str(err), err=True)
        sys.exit(2)
    console = Console()
    console.print(ladder_table(ladder))
    p = ladder.policy
    console.print(
        f"policy: promotion_hysteresis={p.promotion_hysteresis} "
        f"max_degraded_seconds={p.max_degraded_seconds} probe_interval_s={p.probe_interval_s} "
        f"pending_timeout_s={p.pending_timeout_s} retry_after_s={p.retry_after_s}"
    )
