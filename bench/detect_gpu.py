"""Run accelerator detection once on this machine and print one JSON object.

Meant for a real NVIDIA GPU machine: it records what NVML reports, what ray-ladder makes
of it, and what nvidia-smi says, for docs/accelerators.md. Without a driver it prints the
CPU-only answer. Usage: ``python bench/detect_gpu.py``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from importlib import metadata
from typing import Any

from ray_ladder.node.accelerators import detect, node_resources


def _nvidia_smi_list() -> list[str] | None:
    """``nvidia-smi -L`` lines (GPUs and MIG devices with their profiles), if present."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20,
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return [f"failed: {err}"]
    return (out.stdout + out.stderr).strip().splitlines()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def main() -> dict[str, Any]:
    from _machine import MachineProbe

    probe = MachineProbe()
    start = time.perf_counter()
    detection = detect()
    detect_ms = (time.perf_counter() - start) * 1000
    node = node_resources(detection)
    return {
        "detect_ms": round(detect_ms, 2),
        "status": detection.status,
        "message": detection.message,
        "driver_version": detection.driver_version,
        "gpus": detection.to_dict()["gpus"],
        "warnings": list(detection.warnings),
        "node": node.to_dict(),
        "ray_start_flags": node.ray_start_flags(),
        "ray_detects": {"GPU": node.gpus, "accelerator_type": node.accelerator_type},
        "nvidia_smi_L": _nvidia_smi_list(),
        "versions": {d: _version(d) for d in ("nvidia-ml-py", "pynvml", "gpustat")},
        "machine": probe.report(),
    }


if __name__ == "__main__":
    print(json.dumps(main(), indent=2), flush=True)
