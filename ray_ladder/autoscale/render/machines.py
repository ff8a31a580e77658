"""The machine types `ray-ladder render` knows: GPUs, vCPUs and memory of each, per cloud.

Counts are the providers' published specifications (AWS EC2 accelerated-computing and
general-purpose instance pages, Google Cloud's GPU and general-purpose machine families,
Azure's N- and D-series sizes). Memory is as the provider lists it (GiB; Google's "GB").
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class Machine:
    """One machine type of a cloud.

    Attributes:
        name: The cloud's machine type (``p5.48xlarge``, ``a3-highgpu-8g``...).
        gpus: GPUs it carries.
        cpus: vCPUs it carries.
        memory_gib: Memory, as the provider lists it.
        accelerator: Catalog key of its GPUs (``cpu``: none; ``None``: a GCE N1 machine,
            which takes the GPU the rung needs attached).
        gce_accelerator: GCP only: the ``guestAccelerators`` type an N1 machine needs
            attached (``None``: the GPU is built into the machine type).
    """

    name: str
    gpus: int
    cpus: int
    memory_gib: float = 0.0
    accelerator: str | None = "cpu"
    gce_accelerator: str | None = None

    def describe(self) -> str:
        """``p5.4xlarge (1 h100, 16 vCPU, 256 GiB)``."""
        gpu = f"{self.gpus} {self.accelerator}, " if self.gpus else ""
        return f"{self.name} ({gpu}{self.cpus} vCPU, {self.memory_gib:g} GiB)"


def _family(acc: str, rows: list[tuple[str, int, int, float]]) -> list[Machine]:
    return [Machine(name, gpus, cpus, mem, acc) for name, gpus, cpus, mem in rows]


def _sizes(prefix: str, acc: str, rows: list[tuple[str, int, int, float]]) -> list[Machine]:
    return _family(acc, [(prefix + size, g, c, m) for size, g, c, m in rows])


# AWS g4dn/g5/g6/g6e share one size ladder of GPU counts and vCPUs.
_G_SIZES = [("xlarge", 1, 4), ("2xlarge", 1, 8), ("4xlarge", 1, 16), ("8xlarge", 1, 32),
            ("12xlarge", 4, 48), ("16xlarge", 1, 64), ("24xlarge", 4, 96),
            ("48xlarge", 8, 192)]


def _g(prefix: str, acc: str, gib_per_cpu: float, sizes: int = 8) -> list[Machine]:
    return _sizes(prefix, acc, [(s, g, c, c * gib_per_cpu) for s, g, c in _G_SIZES[:sizes]])


_AWS = [
    *_family("h100", [("p5.4xlarge", 1, 16, 256), ("p5.48xlarge", 8, 192, 2048)]),
    *_family("h200", [("p5e.48xlarge", 8, 192, 2048), ("p5en.48xlarge", 8, 192, 2048)]),
    *_family("a100", [("p4d.24xlarge", 8, 96, 1152)]),
    *_family("a100-80gb", [("p4de.24xlarge", 8, 96, 1152)]),
    *_family("v100", [("p3.2xlarge", 1, 8, 61), ("p3.8xlarge", 4, 32, 244),
                      ("p3.16xlarge", 8, 64, 488)]),
    *_g("g6.", "l4", 4), *_g("g6e.", "l40s", 8), *_g("g5.", "a10g", 4),
    *_g("g4dn.", "t4", 4, sizes=6),
    *_family("cpu", [(f"m6i.{s}", 0, c, c * 4) for s, c in
                     (("large", 2), ("xlarge", 4), ("2xlarge", 8), ("4xlarge", 16),
                      ("8xlarge", 32), ("16xlarge", 64))]),
]
_GCP = [
    *_family("h100", [("a3-highgpu-1g", 1, 26, 234), ("a3-highgpu-2g", 2, 52, 468),
                      ("a3-highgpu-4g", 4, 104, 936), ("a3-highgpu-8g", 8, 208, 1872),
                      ("a3-megagpu-8g", 8, 208, 1872)]),
    *_family("h200", [("a3-ultragpu-8g", 8, 224, 2952)]),
    *_family("a100", [("a2-highgpu-1g", 1, 12, 85), ("a2-highgpu-2g", 2, 24, 170),
                      ("a2-highgpu-4g", 4, 48, 340), ("a2-highgpu-8g", 8, 96, 680),
                      ("a2-megagpu-16g", 16, 96, 1360)]),
    *_family("a100-80gb", [("a2-ultragpu-1g", 1, 12, 170), ("a2-ultragpu-2g", 2, 24, 340),
                           ("a2-ultragpu-4g", 4, 48, 680), ("a2-ultragpu-8g", 8, 96, 1360)]),
    *_family("l4", [(f"g2-standard-{c}", g, c, c * 4) for c, g in
                    ((4, 1), (8, 1), (12, 1), (16, 1), (24, 2), (32, 1), (48, 4), (96, 8))]),
    *[Machine(f"n1-standard-{c}", 0, c, c * 3.75, None) for c in (4, 8, 16, 32)],
    *_family("cpu", [(f"n2-standard-{c}", 0, c, c * 4) for c in (2, 4, 8, 16, 32, 64)]),
]
_AZURE = [
    *_family("h100", [("Standard_NC40ads_H100_v5", 1, 40, 320),
                      ("Standard_NC80adis_H100_v5", 2, 80, 640),
                      ("Standard_ND96isr_H100_v5", 8, 96, 1900)]),
    *_family("h200", [("Standard_ND96isr_H200_v5", 8, 96, 1850)]),
    *_family("a100", [("Standard_ND96asr_v4", 8, 96, 900)]),
    *_family("a100-80gb", [("Standard_NC24ads_A100_v4", 1, 24, 220),
                           ("Standard_NC48ads_A100_v4", 2, 48, 440),
                           ("Standard_NC96ads_A100_v4", 4, 96, 880),
                           ("Standard_ND96amsr_A100_v4", 8, 96, 1900)]),
    *_family("a10", [("Standard_NV36ads_A10_v5", 1, 36, 440),
                     ("Standard_NV72ads_A10_v5", 2, 72, 880)]),
    *_family("v100", [("Standard_NC6s_v3", 1, 6, 112), ("Standard_NC12s_v3", 2, 12, 224),
                      ("Standard_NC24s_v3", 4, 24, 448)]),
    *_family("t4", [("Standard_NC4as_T4_v3", 1, 4, 28), ("Standard_NC8as_T4_v3", 1, 8, 56),
                    ("Standard_NC16as_T4_v3", 1, 16, 110),
                    ("Standard_NC64as_T4_v3", 4, 64, 440)]),
    *_family("cpu", [(f"Standard_D{c}s_v5", 0, c, c * 4) for c in (2, 4, 8, 16, 32, 64)]),
]
#: Cloud -> machine type name -> machine.
MACHINES: dict[str, dict[str, Machine]] = {
    cloud: {m.name: m for m in rows} for cloud, rows in
    (("aws", _AWS), ("gcp", _GCP), ("azure", _AZURE))}


def close_matches(provider: str, name: str, n: int = 4) -> list[str]:
    """Known machine types of ``provider`` that look like ``name`` (same family first).

    Example:
        >>> close_matches("aws", "p5.banana")[:2]
        ['p5.4xlarge', 'p5.48xlarge']
    """
    known = MACHINES.get(provider, {})
    family = name.split(".")[0] if "." in name else name.rsplit("-", 1)[0]
    same = [k for k in known if k.lower().startswith(family.lower()) and family]
    near = difflib.get_close_matches(name, list(known), n=n, cutoff=0.6)
    return list(dict.fromkeys([*same, *near]))[:n]
