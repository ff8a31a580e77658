"""`ray-ladder node-resources`: what this node should advertise to Ray for ladder rungs."""

from __future__ import annotations

import io
import json
import os
import warnings
from collections import Counter
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ray_ladder._lazy import requires_extra
from ray_ladder.core.exceptions import ConfigError
from ray_ladder.core.spec import load_ladder
from ray_ladder.node.accelerators import (
    Detection,
    FakeNvml,
    NodeResources,
    detect,
    missing_for,
)
from ray_ladder.node.accelerators import node_resources as advertise

FAKE_ENV = "RAY_LADDER_FAKE_NVML"


def _parse_extra(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return {}
    try:
        data = json.loads(value)
    except json.JSONDecodeError as err:
        raise click.BadParameter(
            f"not JSON ({err.msg}); e.g. '{{\"ladder/onprem-cpu\": 16}}'"
        ) from None
    if not isinstance(data, dict):
        raise click.BadParameter("must be a JSON object of resource name -> amount")
    return data


def _parse_labels(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> Any:
    labels: dict[str, str] = {}
    for item in values:
        for pair in filter(None, (p.strip() for p in item.split(","))):
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise click.BadParameter(f"{pair!r} is not key=value, e.g. ladder.site=onprem")
            labels[key.strip()] = value.strip()
    return labels


def _report(detection: Detection) -> None:
    """Say on stderr why the answer is CPU-only, and what was skipped."""
    if detection.status == "no-driver":
        click.echo(f"ray-ladder: {detection.message}; advertising CPU only", err=True)
    elif detection.status == "error":
        click.echo(f"ray-ladder: NVIDIA driver error: {detection.message}; "
                   "advertising CPU only", err=True)
    for note in detection.warnings:
        click.echo(f"ray-ladder: warning: {note}", err=True)


def _rung_checks(path: str, node: NodeResources) -> dict[str, dict[str, Any]]:
    try:
        ladder = load_ladder(path)
    except ConfigError as err:
        raise click.UsageError(str(err)) from None
    cpus = float(os.cpu_count() or 1)
    checks = {}
    for rung in ladder.rungs:
        missing = missing_for(rung, node, cpus=cpus)
        checks[rung.name] = {"hostable": not missing, "missing": missing}
    return checks


def _gpustat_text() -> tuple[str | None, str | None]:
    """gpustat's own one-screen view of the real GPUs, or why it could not be had."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            with requires_extra("gpu", "gpustat's view"):
                import gpustat

            out = io.StringIO()
            gpustat.new_query().print_formatted(fp=out, no_color=True)
    except Exception as err:  # gpustat is a convenience view: the tables above stand
        return None, f"{type(err).__name__}: {err}"
    return out.getvalue().rstrip() or None, None


def _print_table(detection: Detection, node: NodeResources,
                 checks: dict[str, dict[str, Any]] | None, real: bool) -> None:
    console = Console(highlight=False)
    gpus = Table(title=f"GPUs (NVML: {detection.status}"
                 + (f", driver {detection.driver_version})" if detection.driver_version else ")"))
    for col in ("#", "NVML name", "model", "memory GiB", "MIG"):
        gpus.add_column(col)
    for g in detection.gpus:
        profiles = Counter(s.profile for s in g.mig)
        mig = ", ".join(f"{n} x {p}" for p, n in profiles.items()) or "on, no slices"
        gpus.add_row(str(g.index), g.nvml_name, g.model, str(g.memory_gb),
                     mig if g.mig_enabled else "-")
    console.print(gpus)
    adv = Table(title="advertise to Ray")
    adv.add_column("kind")
    adv.add_column("name")
    adv.add_column("value")
    for key, amount in node.resources.items():
        adv.add_row("resource", key, f"{amount:g}")
    for key, value in node.labels.items():
        adv.add_row("label", key, value)
    console.print(adv)
    console.print("ray start flags: " + node.ray_start_flags(), soft_wrap=True)
    if checks is not None:
        rungs = Table(title="rungs this node can host")
        for col in ("rung", "hostable", "missing"):
            rungs.add_column(col)
        for name, check in checks.items():
            rungs.add_row(name, "yes" if check["hostable"] else "no",
                          "; ".join(check["missing"]))
        console.print(rungs)
    if not (real and detection.gpus):
        return
    view, why = _gpustat_text()
    if view:
        console.print("gpustat:\n" + view, soft_wrap=True, markup=False)
    else:
        click.echo(f"note: gpustat view unavailable ({why})", err=True)


@click.command(name="node-resources")
@click.option("--format", "fmt", type=click.Choice(["json", "ray-start", "table"]),
              default="json", show_default=True,
              help="json: {resources, labels}; ray-start: shell-quoted flags; table: for people.")
@click.option("--site", default=None,
              help="Label ladder.site=SITE and add a ladder/SITE-<name> copy of each "
                   "accelerator resource (for site-scoped rungs such as onprem-h100).")
@click.option("--extra-resources", callback=_parse_extra, default=None, metavar="JSON",
              help="More resources as a JSON object; they win over detected ones.")
@click.option("--label", "labels", multiple=True, callback=_parse_labels, metavar="K=V",
              help="A node label to add (repeatable, or comma-separated), e.g. "
                   "ladder.jurisdiction=eu. Wins over detected labels.")
@click.option("--ladder", "ladder_path", type=click.Path(dir_okay=False), default=None,
              help="Also say which rungs of this ladder file the node can host.")
@click.option("--fake-nvml", envvar=FAKE_ENV, default=None, hidden=True,
              help="Detect from a fake NVML: preset name, JSON, or JSON file (tests, docs).")
def node_resources(fmt: str, site: str | None, extra_resources: dict[str, Any],
                       labels: dict[str, str], ladder_path: str | None,
                       fake_nvml: str | None) -> None:
    """Detect NVIDIA GPUs and print the Ray resources and labels ladder rungs ask for.

    With no NVIDIA driver it prints a CPU-only answer and exits 0 (a note on stderr); a
    failing driver is named on stderr and the answer is CPU-only too.

    \b
    Start a node with them:
      eval "ray start --address=HEAD:6379 $(ray-ladder node-resources --format=ray-start)"
    """
    if fmt == "ray-start" and ladder_path is not None:
        raise click.UsageError("--ladder works with --format json or table")
    try:
        nvml = FakeNvml.from_spec(fake_nvml) if fake_nvml else None
    except (ValueError, KeyError, TypeError) as err:
        raise click.BadParameter(str(err), param_hint="--fake-nvml") from None
    detection = detect(nvml)
    _report(detection)
    try:
        node = advertise(detection, site=site, extra_resources=extra_resources,
                              labels=labels)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    checks = _rung_checks(ladder_path, node) if ladder_path else None
    if fmt == "ray-start":
        click.echo(node.ray_start_flags())
    elif fmt == "table":
        _print_table(detection, node, checks, real=nvml is None)
    else:
        out = node.to_dict()
        if checks is not None:
            out["rungs"] = checks
        click.echo(json.dumps(out, indent=2))

