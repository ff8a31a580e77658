"""Which cloud machine carries each accelerator: the table `ray-ladder render` reads."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ray_ladder.core.spec import Rung

PROVIDERS = ("aws", "gcp", "azure")


@dataclass(frozen=True)
class Machine:
    """One machine type of a cloud.

    Attributes:
        name: The cloud's machine type (``p5.48xlarge``, ``a3-highgpu-8g``...).
        gpus: GPUs it carries.
        cpus: vCPUs it carries.
        gce_accelerator: GCP only: the ``guestAccelerators`` type an N1 machine needs
            attached (``None``: the GPU is built into the machine type).
    """

    name: str
    gpus: int
    cpus: int
    gce_accelerator: str | None = None


@dataclass(frozen=True)
class Accelerator:
    """An accelerator model and where each cloud and Kubernetes offers it.

    Attributes:
        key: ``ray-ladder node-resources`` name (the ``ladder/<key>`` resource).
        machines: Cloud -> machine type.
        gke_type: GKE ``gpu.type`` (``cloud.google.com/gke-accelerator``).
        product: NVIDIA GPU feature discovery ``nvidia.com/gpu.product`` label.
        ray_type: Ray's ``accelerator_type`` for it.
    """

    key: str
    machines: dict[str, Machine]
    gke_type: str | None = None
    product: str | None = None
    ray_type: str | None = None


def _m(name: str, gpus: int, cpus: int, gce: str | None = None) -> Machine:
    return Machine(name, gpus, cpus, gce)


CATALOG: dict[str, Accelerator] = {a.key: a for a in (
    Accelerator("h200", {"aws": _m("p5e.48xlarge", 8, 192), "gcp": _m("a3-ultragpu-8g", 8, 224),
                         "azure": _m("Standard_ND96isr_H200_v5", 8, 96)},
                "nvidia-h200-141gb", "NVIDIA-H200", "H200"),
    Accelerator("h100", {"aws": _m("p5.48xlarge", 8, 192), "gcp": _m("a3-highgpu-8g", 8, 208),
                         "azure": _m("Standard_ND96isr_H100_v5", 8, 96)},
                "nvidia-h100-80gb", "NVIDIA-H100-80GB-HBM3", "H100"),
    Accelerator("a100-80gb", {"aws": _m("p4de.24xlarge", 8, 96),
                              "gcp": _m("a2-ultragpu-1g", 1, 12),
                              "azure": _m("Standard_NC24ads_A100_v4", 1, 24)},
                "nvidia-a100-80gb", "NVIDIA-A100-SXM4-80GB", "A100-80G"),
    Accelerator("a100", {"aws": _m("p4d.24xlarge", 8, 96), "gcp": _m("a2-highgpu-1g", 1, 12),
                         "azure": _m("Standard_NC24ads_A100_v4", 1, 24)},
                "nvidia-tesla-a100", "NVIDIA-A100-SXM4-40GB", "A100"),
    Accelerator("l40s", {"aws": _m("g6e.xlarge", 1, 4)}, None, "NVIDIA-L40S", "L40S"),
    Accelerator("l4", {"aws": _m("g6.xlarge", 1, 4), "gcp": _m("g2-standard-8", 1, 8)},
                "nvidia-l4", "NVIDIA-L4", "L4"),
    Accelerator("a10g", {"aws": _m("g5.xlarge", 1, 4)}, None, "NVIDIA-A10G", "A10G"),
    Accelerator("a10", {"azure": _m("Standard_NV36ads_A10_v5", 1, 36)}, None, "NVIDIA-A10",
                "A10"),
    Accelerator("v100", {"aws": _m("p3.2xlarge", 1, 8),
                         "gcp": _m("n1-standard-8", 1, 8, "nvidia-tesla-v100"),
                         "azure": _m("Standard_NC6s_v3", 1, 6)},
                "nvidia-tesla-v100", "Tesla-V100-SXM2-16GB", "V100"),
    Accelerator("t4", {"aws": _m("g4dn.xlarge", 1, 4),
                       "gcp": _m("n1-standard-8", 1, 8, "nvidia-tesla-t4"),
                       "azure": _m("Standard_NC4as_T4_v3", 1, 4)},
                "nvidia-tesla-t4", "Tesla-T4", "T4"),
    Accelerator("cpu", {"aws": _m("m6i.2xlarge", 0, 8), "gcp": _m("n2-standard-8", 0, 8),
                        "azure": _m("Standard_D8s_v5", 0, 8)}),
)}
# Ray's accelerator_type values -> catalog keys.
_BY_RAY_TYPE = {a.ray_type.lower(): a.key for a in CATALOG.values() if a.ray_type}
_MIG = re.compile(r"^(?P<family>.+?)-mig-(?:\d+c\.)?(?P<g>\d+)g\.(?P<gb>\d+)gb$")
# MIG instances of one profile a GPU holds (NVIDIA's A100/H100 tables).
_MIG_SLICES = {1: 7, 2: 3, 3: 2, 4: 1, 7: 1}
# How the machine is bought, as a resource suffix: h100-spot is an h100 (issue 19 adds the
# reservation, flex-start and capacity-block suffixes).
_MARKET = re.compile(r"-(spot|ondemand|on-demand|reserved|reservation|flex|flex-start|block"
                     r"|capacity-block)$")


@dataclass(frozen=True)
class RungHardware:
    """What a rung runs on: its accelerator, MIG profile, spot or not, site.

    Attributes:
        accelerator: Catalog key (``cpu`` for CPU-only rungs).
        mig: MIG profile (``3g.40gb``) when the rung asks for a MIG slice.
        mig_slices: Slices of that profile one GPU holds.
        spot: The rung's ``tags.spot`` is true or its ``capacity.type`` is ``spot``.
        site: The rung's ``tags.site``.
        resource: The rung's ``ladder/...`` resource name, if any.
    """

    accelerator: str
    mig: str | None = None
    mig_slices: int = 0
    spot: bool = False
    site: str | None = None
    resource: str | None = None


def rung_hardware(rung: Rung, override: str | None = None) -> RungHardware:
    """Infer the hardware of ``rung`` from its ``ladder/`` resource, accelerator type or labels.

    ``override`` (a catalog key) wins. A rung asking for GPUs of an unknown model raises
    ``ValueError`` naming the fix (``--accelerator RUNG=KEY``).

    Example:
        >>> rung_hardware(Rung(name="m", resources={"ladder/a100-mig-3g.40gb": 1})).mig
        '3g.40gb'
    """
    site = rung.tags.get("site")
    spot = rung.tags.get("spot", "").lower() == "true" or (
        rung.capacity is not None and rung.capacity.type == "spot")
    resource = next((k for k in rung.resources if k.startswith("ladder/")), None)
    if override is not None:
        if override not in CATALOG:
            raise ValueError(f"unknown accelerator {override!r} for rung {rung.name!r}; "
                             f"known: {sorted(CATALOG)}")
        return RungHardware(override, spot=spot, site=site, resource=resource)
    if resource is not None:
        name = resource[len("ladder/"):]
        if site and name.startswith(site + "-"):
            name = name[len(site) + 1:]
        name = _MARKET.sub("", name)  # h100-spot / h100-ondemand: an h100 bought another way
        m = _MIG.match(name)
        if m and m["family"] in CATALOG:
            profile = name[len(m["family"]) + len("-mig-"):]
            family = m["family"]
            if family == "a100" and int(m["gb"]) >= 10 * int(m["g"]):
                family = "a100-80gb"  # 10 GB per slice: the 80 GB card (40 GB: 5 GB)
            return RungHardware(family, profile, _MIG_SLICES.get(int(m["g"]), 1), spot,
                                site, resource)
        if name in CATALOG:
            return RungHardware(name, spot=spot, site=site, resource=resource)
    if rung.accelerator_type and rung.accelerator_type.lower() in _BY_RAY_TYPE:
        return RungHardware(_BY_RAY_TYPE[rung.accelerator_type.lower()], spot=spot, site=site,
                            resource=resource)
    labelled = rung.label_selector.get("ladder.accelerator", "")
    if labelled in CATALOG:
        return RungHardware(labelled, spot=spot, site=site, resource=resource)
    if rung.num_gpus or rung.accelerator_type or resource is not None and "cpu" not in resource:
        raise ValueError(
            f"rung {rung.name!r}: cannot tell which accelerator it needs "
            f"(resources {dict(rung.resources)}, accelerator_type {rung.accelerator_type!r}); "
            f"pass --accelerator {rung.name}=KEY with KEY one of {sorted(CATALOG)}")
    return RungHardware("cpu", spot=spot, site=site, resource=resource)


def machine_for(hw: RungHardware, provider: str, override: str | None = None) -> Machine:
    """The machine type that carries ``hw`` on ``provider`` (``override``: a type name)."""
    acc = CATALOG[hw.accelerator]
    if override is not None:
        base = acc.machines.get(provider)
        return Machine(override, base.gpus if base else (0 if hw.accelerator == "cpu" else 1),
                       base.cpus if base else 8, base.gce_accelerator if base else None)
    machine = acc.machines.get(provider)
    if machine is None:
        offered = sorted(k for k, a in CATALOG.items() if provider in a.machines)
        raise ValueError(f"{provider} offers no {hw.accelerator} machine in the catalog; pass "
                         f"--instance-type RUNG=TYPE, or move the rung to one of {offered}")
    return machine
