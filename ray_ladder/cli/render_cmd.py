"""`ray-ladder render`: a cluster template (ray up, KubeRay, GKE ComputeClass) from a ladder."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ray_ladder.autoscale.render import PROVIDERS, RenderOptions, render_yaml
from ray_ladder.autoscale.render import render as render_template
from ray_ladder.core.exceptions import ConfigError
from ray_ladder.core.spec import load_ladder

RAY_UP = ("aws", "gcp", "azure", "local-fake")


def _pairs(_ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise click.BadParameter(f"{item!r}: write RUNG=VALUE", param=param)
        out[key] = value
    return out


def validate_ray_up(config: dict) -> None:
    """Check a ``ray up`` config with Ray's own validator (``ray-schema.json``).

    Raises:
        ValueError: naming the first schema violation.
    """
    import jsonschema

    from ray_ladder.cluster import ray_private

    try:
        ray_private.validate_cluster_config(config)
    except jsonschema.ValidationError as err:
        path = ".".join(str(p) for p in err.absolute_path) or "<root>"
        raise ValueError(f"Ray's validate_config rejects {path}: {err.message}") from None


@click.command(name="render")
@click.argument("ladder_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--provider", type=click.Choice(PROVIDERS), required=True,
              help="Template kind: ray up config per cloud, KubeRay RayCluster, the local "
                   "fake cluster, or a GKE ComputeClass.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write here instead of stdout.")
@click.option("--region", default=None, help="Cloud region (default: from the rungs' tags; "
              "an EU region when every rung is jurisdiction: eu).")
@click.option("--max-workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Most nodes per rung.")
@click.option("--idle-timeout-minutes", type=float, default=None,
              help="Autoscaler idle timeout (default 5; 0.1 for local-fake).")
@click.option("--accelerator", "accelerators", multiple=True, callback=_pairs,
              metavar="RUNG=KEY", help="The accelerator of a rung the ladder does not name.")
@click.option("--instance-type", "instance_types", multiple=True, callback=_pairs,
              metavar="RUNG=TYPE", help="Override the machine type of a rung.")
@click.option("--static-site", "static_sites", multiple=True, default=("onprem",),
              show_default=True, help="Rungs of this site are fixed machines (no node type).")
@click.option("--kube", type=click.Choice(["karpenter", "gke", "aks"]), default="karpenter",
              show_default=True, help="KubeRay only: whose node labels the worker groups "
              "select on (how a node is bought: spot, reservation, flex-start, block).")
@click.option("--ray-version", default="2.60.0", show_default=True)
@click.option("--cluster-name", default=None, help="Default: the ladder's name.")
@click.option("--validate/--no-validate", default=True, show_default=True,
              help="Check ray up configs with Ray's validate_config.")
def render(ladder_file: str, provider: str, output: str | None, region: str | None,
               max_workers: int, idle_timeout_minutes: float | None, accelerators: dict,
               instance_types: dict, static_sites: tuple[str, ...], kube: str,
               ray_version: str, cluster_name: str | None, validate: bool) -> None:
    """Write the cluster template of LADDER_FILE: one node type per rung, in rung order."""
    try:
        ladder = load_ladder(ladder_file)
    except ConfigError as err:
        click.echo(str(err), err=True)
        sys.exit(2)
    opts = RenderOptions(region=region, max_workers=max_workers,
                         idle_timeout_minutes=idle_timeout_minutes, accelerators=accelerators,
                         instance_types=instance_types, static_sites=tuple(static_sites),
                         ray_version=ray_version, cluster_name=cluster_name, kube=kube,
                         ladder_path=str(Path(ladder_file)))
    try:
        text = render_yaml(ladder, provider, opts, source=ladder_file,
                           file=output or "cluster.yaml")
        if validate and provider in RAY_UP:
            validate_ray_up(render_template(ladder, provider, opts))
    except ValueError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    if output:
        Path(output).write_text(text, encoding="utf-8")
        click.echo(f"wrote {output} ({provider}, {ladder.name})", err=True)
    else:
        click.echo(text, nl=False)

