"""`ray-ladder submit LADDER -- COMMAND`: one job on the best cluster rung of a ladder,
followed until it is over (moved from its checkpoint when its cluster or rung is lost,
climbed home at a checkpoint)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ray_ladder.core.exceptions import ConfigError
from ray_ladder.core.spec import load_ladder


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("ladder_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("entrypoint", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--storage", required=True, metavar="URI",
              help="Shared storage of the run's checkpoints: a pyarrow.fs URI every cluster "
                   "reads (s3://bucket/runs?endpoint_override=HOST:PORT&scheme=http) or a "
                   "shared path.")
@click.option("--run", "run", default=None, help="The run's name (default: the ladder's "
              "name and a hash of the command; the same command adopts its running job).")
@click.option("--working-dir", default=None, type=click.Path(exists=True, file_okay=False),
              help="Uploaded with each attempt (runtime_env working_dir).")
@click.option("--runtime-env-json", default=None, help="The job's runtime_env as JSON.")
@click.option("--max-failures", type=int, default=3, show_default=True,
              help="Attempts that may fail on an obtainable rung before the run fails.")
@click.option("--timeout-s", type=float, default=None, help="Give up following after this.")
@click.option("--no-logs", is_flag=True, help="Do not stream the job's logs.")
def submit(ladder_file: str, entrypoint: tuple[str, ...], storage: str, run: str | None,
           working_dir: str | None, runtime_env_json: str | None, max_failures: int,
           timeout_s: float | None, no_logs: bool) -> None:
    """Submit `-- COMMAND` to the best cluster rung of LADDER_FILE and follow it.

    Exit 0: the job succeeded; 1: it failed; 2: an invalid ladder file or option; 3: still
    running when --timeout-s passed.
    """
    from ray_ladder.jobs.runner import JobEvent, LadderJob

    try:
        ladder = load_ladder(ladder_file)
    except ConfigError as err:
        click.echo(str(err), err=True)
        sys.exit(2)
    runtime_env: dict[str, Any] = json.loads(runtime_env_json) if runtime_env_json else {}
    if working_dir:
        runtime_env["working_dir"] = working_dir

    def show(event: JobEvent) -> None:
        click.echo(f"ray-ladder: {event.message}", err=True)

    def log(text: str) -> None:
        click.echo(text, nl=False)

    try:
        job = LadderJob(ladder, " ".join(entrypoint), storage=storage, run=run,
                        runtime_env=runtime_env, max_failures=max_failures, on_event=show,
                        on_log=None if no_logs else log)
    except ValueError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    try:
        outcome = job.run(timeout_s=timeout_s)
    except TimeoutError as err:
        click.echo(f"ray-ladder: {err}", err=True)
        sys.exit(3)
    sys.exit(0 if outcome == "SUCCEEDED" else 1)
