"""What NVML found on a machine: value classes only (detection itself is in accelerators)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class MigSlice:
    """One MIG device (GPU instance + compute instance) of a GPU.

    Example:
        >>> MigSlice(index=0, profile="1g.10gb", memory_mb=9728).profile
        '1g.10gb'
    """

    index: int
    profile: str
    memory_mb: int


@dataclass(frozen=True)
class Gpu:
    """One physical GPU as NVML reports it.

    Example:
        >>> gpu = Gpu(0, "NVIDIA A100-SXM4-80GB", "A100-80GB", 81920)
        >>> gpu.key, gpu.family, gpu.memory_gb
        ('a100-80gb', 'a100', 80)
    """

    index: int
    nvml_name: str
    model: str
    memory_mb: int
    mig_enabled: bool = False
    mig: tuple[MigSlice, ...] = ()

    @property
    def key(self) -> str:
        """Lowercase model, the suffix of its ``ladder/<key>`` resource."""
        return self.model.lower()

    @property
    def family(self) -> str:
        """The model without its memory variant (``a100`` for both A100s)."""
        return re.sub(r"-\d+gb$", "", self.key)

    @property
    def memory_gb(self) -> int:
        """Total memory in GiB, rounded."""
        return math.floor(self.memory_mb / 1024 + 0.5)


@dataclass(frozen=True)
class Detection:
    """What NVML found on this machine.

    ``status`` is ``ok`` (NVML answered; ``gpus`` may still be empty), ``no-driver`` (no
    NVIDIA library or driver: a CPU node) or ``error`` (a driver that fails; ``message``
    names the NVML error). ``warnings`` lists devices or slices that were skipped.

    Example:
        >>> Detection("no-driver", message="no NVIDIA driver").gpus
        ()
    """

    status: Literal["ok", "no-driver", "error"]
    gpus: tuple[Gpu, ...] = ()
    driver_version: str | None = None
    message: str | None = None
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (lists for tuples)."""
        return json.loads(json.dumps(asdict(self)))
