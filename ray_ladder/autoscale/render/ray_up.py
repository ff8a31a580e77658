"""`ray-ladder render`: cluster templates whose node types come from the ladder's rungs."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ray_ladder.autoscale.render import capacity as bought
from ray_ladder.autoscale.render.catalog import (
    CATALOG,
    Machine,
    RungHardware,
    machine_for,
    rung_hardware,
)
from ray_ladder.core.placement import labels_satisfying
from ray_ladder.core.spec import Ladder, Rung

PROVIDERS = ("aws", "gcp", "azure", "kuberay", "local-fake", "gke-computeclass")
_DEFAULT_REGION = {"aws": "us-west-2", "gcp": "us-central1", "azure": "westus2"}
_EU_REGION = {"aws": "eu-central-1", "gcp": "europe-west4", "azure": "westeurope"}
_EU_AZURE = {"northeurope", "westeurope", "francecentral", "francesouth", "germanywestcentral",
             "germanynorth", "swedencentral", "swedensouth", "italynorth", "polandcentral",
             "spaincentral", "norwayeast", "switzerlandnorth"}
HEAD_TYPE = "ray.head.default"
_MIB = 2**20
START_WORKER = ('ulimit -n 65536; eval "ray start --address=$RAY_HEAD_IP:6379 '
                '--object-manager-port=8076 $(ray-ladder node-resources --format=ray-start)"')


@dataclass(frozen=True)
class RenderOptions:
    """Choices the ladder does not say.

    Attributes:
        region: Cloud region (default: the rungs' ``tags.region``, an EU region when every
            rung is ``jurisdiction: eu``, else the provider's usual default).
        max_workers: Most nodes per rung.
        idle_timeout_minutes: Autoscaler idle timeout (default 5; 0.1 for local-fake).
        accelerators: Rung -> catalog accelerator key, when the rung does not say.
        instance_types: Rung -> machine type, to override the catalog.
        static_sites: Rungs tagged with these sites are fixed machines that join by hand
            (on-prem): no node type is written for them.
        ray_version: Ray version to install / image tag.
        ladder_path: The ladder file mounted on the head (the hook reads it).
        cluster_name: Cluster name (default: the ladder's name).
        kube: KubeRay node labels: ``karpenter`` (EKS, the default), ``gke`` or ``aks``.
        node_resources: Rung -> what one node of its machine has (``{"CPU": 24, "GPU": 1}``),
            for a machine type the catalog does not know (or to correct it).
        kind: KubeRay object: ``raycluster`` (default), ``rayservice`` or ``rayjob``.
        serve_config: RayService only: the Serve config (``serve run`` file, parsed) whose
            applications become ``serveConfigV2``.
        entrypoint: RayJob only: the job's command.
        image: Image repository of the Ray pods, built from ``docker/Dockerfile`` (the tag
            is ``<ray_version>-py311[-gpu]``).
        drain_timeout_s: KubeRay: ``RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S`` of the workers,
            the notice a deleted pod gives (its grace period is this plus 30 s).
    """

    region: str | None = None
    max_workers: int = 2
    idle_timeout_minutes: float | None = None
    accelerators: Mapping[str, str] = field(default_factory=dict)
    instance_types: Mapping[str, str] = field(default_factory=dict)
    static_sites: tuple[str, ...] = ("onprem",)
    ray_version: str = "2.60.0"
    ladder_path: str = "ladder.yaml"
    cluster_name: str | None = None
    kube: str = "karpenter"
    node_resources: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    kind: str = "raycluster"
    serve_config: Mapping[str, Any] | None = None
    entrypoint: str | None = None
    image: str = "ray-ladder"
    drain_timeout_s: float = 30.0


def is_eu_region(provider: str, region: str) -> bool:
    """Whether ``region`` of ``provider`` is inside the EU/EEA (data residency).

    Example:
        >>> is_eu_region("gcp", "europe-west4"), is_eu_region("aws", "us-east-1")
        (True, False)
    """
    if provider == "aws":
        return region.startswith("eu-")
    if provider == "gcp":
        return region.startswith("europe-")
    return region in _EU_AZURE


@dataclass(frozen=True)
class NodeTypePlan:
    """One rung's node type: hardware, machine, and what the node advertises."""

    rung: Rung
    hw: RungHardware
    machine: Machine
    resources: dict[str, int]
    labels: dict[str, str]


def rung_labels(rung: Rung) -> dict[str, str]:
    """Labels a node of ``rung``'s type carries: ``ladder.rung`` and the selector's equalities."""
    return {"ladder.rung": rung.name, **labels_satisfying(rung.label_selector)}


def node_resources_for(rung: Rung, hw: RungHardware, machine: Machine) -> dict[str, int]:
    """What one node of the rung's type advertises: CPU, GPU and the rung's resources.

    Each ``ladder/`` resource of the rung is scaled to the placements the node holds (its
    GPUs, or its MIG slices), so a node of 8 H100s advertises ``ladder/h100: 8``.
    """
    placements = machine.gpus * hw.mig_slices if hw.mig else max(machine.gpus, 1)
    out: dict[str, int] = {"CPU": machine.cpus}
    if machine.gpus:
        out["GPU"] = machine.gpus
    for key, amount in rung.resources.items():
        out[key] = max(int(math.ceil(amount)), placements if key.startswith("ladder/") else 1)
    if rung.accelerator_type:
        out[f"accelerator_type:{rung.accelerator_type}"] = 1
    return out


def check_rung_names(ladder: Ladder, opts: RenderOptions) -> None:
    """Every rung named in ``--instance-type`` / ``--accelerator`` / ``--node-resources`` exists.

    Raises:
        ValueError: naming the option, the unknown rung and the valid ones.
    """
    valid = [r.name for r in ladder.rungs if r.is_compute]
    for flag, given in (("--instance-type", opts.instance_types),
                        ("--accelerator", opts.accelerators),
                        ("--node-resources", opts.node_resources)):
        unknown = [name for name in given if name not in valid]
        if unknown:
            raise ValueError(f"{flag}: no compute rung {unknown[0]!r} in ladder "
                             f"{ladder.name!r}; valid rungs: {valid}")


def node_rungs(ladder: Ladder, opts: RenderOptions) -> list[Rung]:
    """Compute rungs that get a node type (rungs of static sites join by hand)."""
    return [r for r in ladder.rungs
            if r.is_compute and r.tags.get("site") not in opts.static_sites]


def plan_node_types(ladder: Ladder, cloud: str, opts: RenderOptions) -> list[NodeTypePlan]:
    """One node type per rung of :func:`node_rungs`, on ``cloud``'s machines, in rung order.

    Rungs bought in a way ``cloud`` does not sell (:func:`capacity.left_out`) get none.
    """
    plans = []
    for rung in node_rungs(ladder, opts):
        if bought.left_out(cloud, rung):
            continue
        hw = rung_hardware(rung, opts.accelerators.get(rung.name))
        given = opts.node_resources.get(rung.name)
        machine = machine_for(hw, cloud, opts.instance_types.get(rung.name),
                              dict(given) if given is not None else None, rung.name)
        plans.append(NodeTypePlan(rung, hw, machine, node_resources_for(rung, hw, machine),
                                  rung_labels(rung)))
    return plans


def _region(ladder: Ladder, provider: str, opts: RenderOptions) -> str:
    eu_only = all(r.tags.get("jurisdiction") == "eu" for r in ladder.rungs if r.is_compute)
    regions = {r.tags["region"] for r in ladder.rungs if r.is_compute and "region" in r.tags
               and r.tags.get("site") not in opts.static_sites}
    if opts.region:
        region = opts.region
    elif len(regions) == 1 and is_eu_region(provider, next(iter(regions))) == eu_only:
        region = next(iter(regions))
    else:
        region = _EU_REGION[provider] if eu_only else _DEFAULT_REGION[provider]
    if eu_only and not is_eu_region(provider, region):
        raise ValueError(f"every rung of {ladder.name!r} is jurisdiction: eu, but region "
                         f"{region!r} is outside the EU; pick an EU region, e.g. "
                         f"{_EU_REGION[provider]}")
    return region


def _node_config(provider: str, plan: NodeTypePlan | None, machine: Machine,
                 spot: bool = False) -> dict[str, Any]:
    gpu = machine.gpus > 0
    if provider == "aws":
        cfg: dict[str, Any] = {
            "InstanceType": machine.name, "ImageId": "latest_dlami",
            "BlockDeviceMappings": [{"DeviceName": "/dev/sda1",
                                     "Ebs": {"VolumeSize": 256 if gpu else 100,
                                             "VolumeType": "gp3"}}]}
        if spot:
            cfg["InstanceMarketOptions"] = {"MarketType": "spot"}
        if plan is not None:
            cfg.update(bought.aws_fields(plan.rung))
        return cfg
    if provider == "gcp":
        family = "common-cu124" if gpu else "common-cpu"
        cfg = {"machineType": machine.name,
               "disks": [{"boot": True, "autoDelete": True, "type": "PERSISTENT",
                          "initializeParams": {
                              "diskSizeGb": 200 if gpu else 100,
                              "sourceImage": "projects/deeplearning-platform-release/global/"
                                             f"images/family/{family}"}}]}
        if machine.gce_accelerator:
            cfg["guestAccelerators"] = [{"acceleratorType": machine.gce_accelerator,
                                         "acceleratorCount": machine.gpus}]
        scheduling: dict[str, Any] = {}
        if gpu:
            scheduling["onHostMaintenance"] = "TERMINATE"
            cfg["metadata"] = {"items": [{"key": "install-nvidia-driver", "value": "True"}]}
        if spot:
            scheduling["preemptible"] = True
        if plan is not None:
            top, sched = bought.gcp_fields(plan.rung)
            cfg.update(top)
            scheduling.update(sched)
        if scheduling:
            cfg["scheduling"] = [scheduling]
        return cfg
    params: dict[str, Any] = {"vmSize": machine.name, "imagePublisher": "microsoft-dsvm",
                              "imageOffer": "ubuntu-hpc" if gpu else "ubuntu-2204",
                              "imageSku": "2204" if gpu else "2204-gen2",
                              "imageVersion": "latest"}
    if plan is not None:
        params.update(bought.azure_params(plan.rung, spot))
    return {"azure_arm_parameters": params}


def _provider_section(provider: str, region: str, name: str) -> dict[str, Any]:
    if provider == "aws":
        return {"type": "aws", "region": region,
                "availability_zone": f"{region}a,{region}b", "cache_stopped_nodes": False}
    if provider == "gcp":
        return {"type": "gcp", "region": region, "availability_zone": f"{region}-a",
                "project_id": "YOUR-GCP-PROJECT-ID"}
    return {"type": "azure", "location": region, "resource_group": f"{name}-rg",
            "cache_stopped_nodes": False}


_SDK = {"aws": "'boto3>=1.26'", "gcp": "google-api-python-client",
        "azure": "azure-identity azure-mgmt-compute azure-mgmt-network azure-mgmt-resource"}


def _install(opts: RenderOptions) -> str:
    return f'pip install -U "ray[default,serve]=={opts.ray_version}" ray-ladder'


def join_command(rung: Rung) -> str:
    """The command a fixed (static-site) machine runs to join the cluster as ``rung``."""
    site = rung.tags.get("site")
    hw = rung_hardware(rung)
    derived = f"ladder/{site}-{hw.accelerator}" if site and hw.accelerator != "cpu" else None
    extra = {k: int(math.ceil(v)) for k, v in rung.resources.items() if k != derived}
    args = ["--format=ray-start"] + ([f"--site {site}"] if site else [])
    if extra:
        args.append(f"--extra-resources '{json.dumps(extra)}'")
    labels = {k: v for k, v in rung_labels(rung).items() if k != "ladder.site"}
    args += [f"--label {k}={v}" for k, v in labels.items()]
    return (f'eval "ray start --address=HEAD_IP:6379 '
            f'$(ray-ladder node-resources {" ".join(args)})"')


def render_ray_up(ladder: Ladder, provider: str, opts: RenderOptions) -> dict[str, Any]:
    """A ``ray up`` cluster config: one worker node type per rung, named after it."""
    region = _region(ladder, provider, opts)
    name = opts.cluster_name or ladder.name
    head_machine = CATALOG["cpu"].machines[provider]
    types: dict[str, Any] = {HEAD_TYPE: {
        "resources": {"CPU": head_machine.cpus},
        "labels": {"ladder.node-type": "head"},
        "node_config": _node_config(provider, None, head_machine)}}
    plans = plan_node_types(ladder, provider, opts)
    for i, p in enumerate(plans):
        types[p.rung.name] = {
            "min_workers": 0, "max_workers": opts.max_workers,
            # Autoscaler v2 prefers higher priority among types that fit a request.
            "priority": len(plans) - i,
            "resources": p.resources, "labels": p.labels,
            "node_config": _node_config(provider, p, p.machine, p.hw.spot)}
        if p.hw.mig:  # per-type setup commands replace the global ones: install too
            slices = ",".join([p.hw.mig] * p.hw.mig_slices)
            types[p.rung.name]["worker_setup_commands"] = [
                _install(opts), "sudo nvidia-smi -mig 1",
                f"sudo nvidia-smi mig -cgi {slices} -C"]
    # Fixed machines, and rungs bought in a way this cloud does not sell: never requested.
    static = [r.name for r in ladder.rungs
              if r.is_compute and (r.tags.get("site") in opts.static_sites
                                   or bought.left_out(provider, r))]
    start_hook = "ray-ladder autoscale start ~/ladder.yaml" + "".join(
        f" --node-type {r}=" for r in static)
    return {
        "cluster_name": name,
        "max_workers": opts.max_workers * len(plans),
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": opts.idle_timeout_minutes or 5,
        "provider": _provider_section(provider, region, name),
        "auth": {"ssh_user": "ubuntu"},
        "available_node_types": types,
        "head_node_type": HEAD_TYPE,
        "file_mounts": {"~/ladder.yaml": opts.ladder_path},
        "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [], "initialization_commands": [],
        "setup_commands": [_install(opts)],
        "head_setup_commands": [f"pip install {_SDK[provider]}"],
        "worker_setup_commands": [],
        "head_start_ray_commands": [
            "ray stop",
            "ulimit -n 65536; ray start --head --port=6379 --object-manager-port=8076 "
            "--autoscaling-config=~/ray_bootstrap_config.yaml --dashboard-host=0.0.0.0 "
            "--labels=ladder.node-type=head",
            start_hook],
        "worker_start_ray_commands": ["ray stop", START_WORKER],
    }


def render_local_fake(ladder: Ladder, opts: RenderOptions) -> dict[str, Any]:
    """An autoscaling config for Ray's fake multi-node cluster with the stock-out provider.

    Each fake node hosts one placement of its rung (1 CPU unless the rung asks more).
    """
    from ray_ladder.autoscale.fake.cluster import fake_cluster_config, fake_worker_type

    types = {}
    for rung in node_rungs(ladder, opts):
        res: dict[str, Any] = {k: int(math.ceil(v)) for k, v in rung.resources.items()}
        res["CPU"] = max(1, int(math.ceil(rung.num_cpus or 1)))
        if rung.num_gpus:
            res["GPU"] = int(math.ceil(rung.num_gpus))
        if rung.accelerator_type:
            res[f"accelerator_type:{rung.accelerator_type}"] = 1
        types[rung.name] = fake_worker_type(
            res, labels={**rung_labels(rung), "ladder.node-type": rung.name},
            max_workers=opts.max_workers)
    cfg = fake_cluster_config(types, head_resources={"CPU": 2},
                              idle_timeout_minutes=opts.idle_timeout_minutes or 0.1,
                              cluster_name=opts.cluster_name or ladder.name)
    cfg["provider"]["capacity_schedule"] = "/tmp/ray-ladder-capacity.yaml"
    cfg["provider"]["events_log"] = "/tmp/ray-ladder-provider-events.jsonl"
    return cfg
