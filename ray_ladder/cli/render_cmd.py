"""`ray-ladder render`: a cluster template (ray up, KubeRay, GKE ComputeClass) from a ladder."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import yaml

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


def _node_resources(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
                    ) -> dict:
    out = {}
    for rung, text in _pairs(ctx, param, values).items():
        try:
            given = json.loads(text)
        except json.JSONDecodeError as err:
            raise click.BadParameter(f"{rung}={text}: not JSON ({err.msg}); write "
                                     f"""{rung}='{{"CPU": 24, "GPU": 1}}'""", param=param) from None
        if not isinstance(given, dict):
            raise click.BadParameter(f"{rung}={text}: a JSON object of counts, e.g. "
                                     '{"CPU": 24, "GPU": 1}', param=param)
        out[rung] = given
    return out


def _serve_config(path: str | None) -> dict[str, Any] | None:
    """The Serve config file of ``--serve-config``, parsed (a ValueError names the problem)."""
    if path is None:
        return None
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"--serve-config {path}: cannot read it as YAML ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("applications"), list):
        raise ValueError(f"--serve-config {path}: a Serve config needs an `applications` "
                         "list (as `serve run` / `serve deploy` take)")
    return data


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
@click.option("--node-resources", "node_resources", multiple=True, callback=_node_resources,
              metavar="RUNG=JSON", help="What one node of the rung's machine has, e.g. "
              """h100='{"CPU": 24, "GPU": 1}': for a machine type the catalog does not """
              "know (or to correct it).")
@click.option("--kind", type=click.Choice(["raycluster", "rayservice", "rayjob"]),
              default="raycluster", show_default=True,
              help="KubeRay only: the object to write (with the ladder's ConfigMap).")
@click.option("--serve-config", type=click.Path(exists=True, dir_okay=False), default=None,
              help="--kind rayservice: the Serve config whose applications become "
                   "serveConfigV2 (like examples/serve_config.yaml).")
@click.option("--entrypoint", default=None, help="--kind rayjob: the job's command.")
@click.option("--image", default="ray-ladder", show_default=True,
              help="KubeRay: image repository built from docker/Dockerfile; the tag is "
                   "<ray-version>-py311[-gpu].")
@click.option("--drain-timeout-s", type=click.FloatRange(min=0), default=30.0,
              show_default=True, help="KubeRay: the notice a deleted worker pod gives "
              "(RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S; grace period = this + 30 s).")
@click.option("--ray-version", default="2.60.0", show_default=True)
@click.option("--cluster-name", default=None, help="Default: the ladder's name.")
@click.option("--validate/--no-validate", default=True, show_default=True,
              help="Check ray up configs with Ray's validate_config.")
def render(ladder_file: str, provider: str, output: str | None, region: str | None,
               max_workers: int, idle_timeout_minutes: float | None, accelerators: dict,
               instance_types: dict, static_sites: tuple[str, ...], kube: str,
               node_resources: dict, kind: str, serve_config: str | None,
               entrypoint: str | None, image: str, drain_timeout_s: float,
               ray_version: str, cluster_name: str | None, validate: bool) -> None:
    """Write the cluster template of LADDER_FILE: one node type per rung, in rung order."""
    try:
        ladder = load_ladder(ladder_file)
    except ConfigError as err:
        click.echo(str(err), err=True)
        sys.exit(2)
    try:
        if provider != "kuberay" and (kind != "raycluster" or serve_config or entrypoint):
            raise ValueError("--kind, --serve-config and --entrypoint are for "
                             "--provider kuberay")
        opts = RenderOptions(region=region, max_workers=max_workers,
                             idle_timeout_minutes=idle_timeout_minutes,
                             accelerators=accelerators, instance_types=instance_types,
                             static_sites=tuple(static_sites), ray_version=ray_version,
                             cluster_name=cluster_name, kube=kube,
                             ladder_path=str(Path(ladder_file)), node_resources=node_resources,
                             kind=kind, serve_config=_serve_config(serve_config),
                             entrypoint=entrypoint, image=image,
                             drain_timeout_s=drain_timeout_s)
        text = render_yaml(ladder, provider, opts, source=ladder_file,
                           file=output or "cluster.yaml")
        if validate and provider in RAY_UP:
            validate_ray_up(render_template(ladder, provider, opts))
    except ValueError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as err:
            click.echo(f"error: cannot write {output}: {err.strerror}. Fix: create its "
                       f"directory first (mkdir -p {Path(output).parent}) or pick another "
                       "path", err=True)
            sys.exit(2)
        click.echo(f"wrote {output} ({provider}, {ladder.name})", err=True)
    else:
        click.echo(text, nl=False)

