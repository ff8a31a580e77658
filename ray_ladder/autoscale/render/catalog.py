"""Which cloud machine carries each accelerator: the table `ray-ladder render` reads."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ray_ladder.autoscale.render.machines import MACHINES, Machine, close_matches
from ray_ladder.core.spec import Rung

PROVIDERS = ("aws", "gcp", "azure")


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


def _m(name: str, gce: str | None = None) -> Machine:
    """The catalog's default machine ``name``, counts from :data:`MACHINES` (a GCE N1 machine
    with ``gce``: one GPU of that type attached)."""
    known = next(rows[name] for rows in MACHINES.values() if name in rows)
    if gce is None:
        return known
    return Machine(name, 1, known.cpus, known.memory_gib, None, gce)


CATALOG: dict[str, Accelerator] = {a.key: a for a in (
    Accelerator("h200", {"aws": _m("p5e.48xlarge"), "gcp": _m("a3-ultragpu-8g"),
                         "azure": _m("Standard_ND96isr_H200_v5")},
                "nvidia-h200-141gb", "NVIDIA-H200", "H200"),
    Accelerator("h100", {"aws": _m("p5.48xlarge"), "gcp": _m("a3-highgpu-8g"),
                         "azure": _m("Standard_ND96isr_H100_v5")},
                "nvidia-h100-80gb", "NVIDIA-H100-80GB-HBM3", "H100"),
    Accelerator("a100-80gb", {"aws": _m("p4de.24xlarge"),
                              "gcp": _m("a2-ultragpu-1g"),
                              "azure": _m("Standard_NC24ads_A100_v4")},
                "nvidia-a100-80gb", "NVIDIA-A100-SXM4-80GB", "A100-80G"),
    Accelerator("a100", {"aws": _m("p4d.24xlarge"), "gcp": _m("a2-highgpu-1g"),
                         "azure": _m("Standard_NC24ads_A100_v4")},
                "nvidia-tesla-a100", "NVIDIA-A100-SXM4-40GB", "A100"),
    Accelerator("l40s", {"aws": _m("g6e.xlarge")}, None, "NVIDIA-L40S", "L40S"),
    Accelerator("l4", {"aws": _m("g6.xlarge"), "gcp": _m("g2-standard-8")},
                "nvidia-l4", "NVIDIA-L4", "L4"),
    Accelerator("a10g", {"aws": _m("g5.xlarge")}, None, "NVIDIA-A10G", "A10G"),
    Accelerator("a10", {"azure": _m("Standard_NV36ads_A10_v5")}, None, "NVIDIA-A10",
                "A10"),
    Accelerator("v100", {"aws": _m("p3.2xlarge"),
                         "gcp": _m("n1-standard-8", "nvidia-tesla-v100"),
                         "azure": _m("Standard_NC6s_v3")},
                "nvidia-tesla-v100", "Tesla-V100-SXM2-16GB", "V100"),
    Accelerator("t4", {"aws": _m("g4dn.xlarge"),
                       "gcp": _m("n1-standard-8", "nvidia-tesla-t4"),
                       "azure": _m("Standard_NC4as_T4_v3")},
                "nvidia-tesla-t4", "Tesla-T4", "T4"),
    Accelerator("cpu", {"aws": _m("m6i.2xlarge"), "gcp": _m("n2-standard-8"),
                        "azure": _m("Standard_D8s_v5")}),
)}
# An N1 default carries the GPU of the accelerator it is listed under.
CATALOG = {k: replace(a, machines={c: m if m.accelerator else replace(m, accelerator=k)
                                   for c, m in a.machines.items()})
           for k, a in CATALOG.items()}
#: A machine of the value's GPUs also carries a rung of the key's (same chip, more memory).
SATISFIES = {"a100": ("a100-80gb",), "h100": ("h200",)}
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


#: The keys ``--node-resources RUNG=JSON`` takes: what one node of the machine has.
NODE_RESOURCE_KEYS = ("CPU", "GPU")


def node_resources_machine(name: str, hw: RungHardware, given: dict[str, int]) -> Machine:
    """A machine the user describes with ``--node-resources`` (``{"CPU": 24, "GPU": 1}``).

    Raises:
        ValueError: a key other than CPU/GPU, a count that is not a whole number >= 0,
            no CPU, or a GPU rung with no GPU.
    """
    unknown = sorted(set(given) - set(NODE_RESOURCE_KEYS))
    if unknown:
        raise ValueError(f"--node-resources for {name}: unknown key(s) {unknown}; valid: "
                         f"{list(NODE_RESOURCE_KEYS)} (the rung's own resources are scaled "
                         "from GPU)")
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"--node-resources for {name}: {key} must be a whole number "
                             f">= 0, got {value!r}")
    if given.get("CPU", 0) < 1:
        raise ValueError(f"--node-resources for {name}: say how many CPUs it has "
                         '(e.g. {"CPU": 24, "GPU": 1})')
    gpus = given.get("GPU", 0)
    if hw.accelerator != "cpu" and not gpus:
        raise ValueError(f"--node-resources for {name}: the rung needs a {hw.accelerator} "
                         'GPU; give its count (e.g. {"CPU": 24, "GPU": 1})')
    return Machine(name, gpus, given["CPU"], 0.0, hw.accelerator)


def _known_machine(hw: RungHardware, provider: str, name: str, rung: str) -> Machine:
    """The catalog's machine ``name`` on ``provider``, checked against the rung's GPU."""
    machine = MACHINES.get(provider, {}).get(name)
    if machine is None:
        near = close_matches(provider, name)
        hint = ("; close matches: " + ", ".join(MACHINES[provider][n].describe() for n in near)
                if near else "")
        raise ValueError(
            f"unknown {provider} machine type {name!r}{hint}. Pick a known one, or say what "
            f"it has: --node-resources {rung}='{{\"CPU\": 24, \"GPU\": 1}}'")
    if machine.accelerator is None:  # GCE N1: the rung's GPU is attached to it
        base = CATALOG[hw.accelerator].machines.get(provider)
        if hw.accelerator == "cpu":
            return Machine(name, 0, machine.cpus, machine.memory_gib, "cpu")
        if base is None or base.gce_accelerator is None:
            raise ValueError(f"{name} takes attached GPUs (T4, V100), not {hw.accelerator}")
        return Machine(name, 1, machine.cpus, machine.memory_gib, hw.accelerator,
                       base.gce_accelerator)
    if machine.accelerator not in (hw.accelerator, *SATISFIES.get(hw.accelerator, ())):
        what = f"{machine.accelerator} GPUs" if machine.gpus else "no GPU"
        raise ValueError(f"{machine.describe()} carries {what}, the rung needs "
                         f"{hw.accelerator}; pick a {hw.accelerator} machine, or pass "
                         f"--accelerator {rung}={machine.accelerator} if the rung should run "
                         "on it")
    return machine


def machine_for(hw: RungHardware, provider: str, override: str | None = None,
                resources: dict[str, int] | None = None, rung: str = "RUNG") -> Machine:
    """The machine type that carries ``hw`` on ``provider``.

    ``override`` names a machine type (``--instance-type``): its GPUs and vCPUs come from
    :data:`MACHINES`, or from ``resources`` (``--node-resources``), which also describe a
    type the catalog does not know. ``rung`` names the rung in error messages.

    Raises:
        ValueError: an unknown machine type without ``resources`` (naming close matches),
            a machine whose GPUs are not the rung's, or no machine for ``hw`` here.
    """
    acc = CATALOG[hw.accelerator]
    default = acc.machines.get(provider)
    if resources is not None:
        name = override or (default.name if default else None)
        if name is None:
            raise ValueError(f"{provider} offers no {hw.accelerator} machine in the catalog; "
                             f"pass --instance-type {rung}=TYPE with --node-resources")
        given = node_resources_machine(f"{rung} ({name})", hw, resources)
        base = MACHINES.get(provider, {}).get(name)
        gce = default.gce_accelerator if default and name.startswith("n1-") else None
        return Machine(name, given.gpus, given.cpus, base.memory_gib if base else 0.0,
                       hw.accelerator, gce)
    if override is not None:
        return _known_machine(hw, provider, override, rung)
    if default is None:
        offered = sorted(k for k, a in CATALOG.items() if provider in a.machines)
        raise ValueError(f"{provider} offers no {hw.accelerator} machine in the catalog; pass "
                         f"--instance-type {rung}=TYPE, or move the rung to one of {offered}")
    return default
