"""Local NVIDIA GPU detection, turned into the Ray resources and labels that rungs ask for."""

from __future__ import annotations

import contextlib
import math
import re
from typing import Any

from ray_ladder.node.advertise import (
    CPU_ACCELERATOR,
    LABEL_ACCELERATOR,
    LABEL_GPU_COUNT,
    LABEL_GPU_MEMORY,
    LABEL_MIG,
    LABEL_SITE,
    RESOURCE_PREFIX,
    NodeResources,
    missing_for,
    node_resources,
)
from ray_ladder.node.detection import Detection, Gpu, MigSlice
from ray_ladder.node.nvml import (
    NO_DRIVER_CODES,
    NVML_DEVICE_MIG_ENABLE,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    PRESETS,
    FakeGpu,
    FakeMig,
    FakeNvml,
    FakeNVMLError,
    NvmlApi,
    NvmlImportError,
    error_code,
    error_text,
    load_pynvml,
)

__all__ = [
    "CPU_ACCELERATOR", "LABEL_ACCELERATOR", "LABEL_GPU_COUNT", "LABEL_GPU_MEMORY",
    "LABEL_MIG", "LABEL_SITE", "PRESETS", "RESOURCE_PREFIX", "Detection", "FakeGpu",
    "FakeMig", "FakeNVMLError", "FakeNvml", "Gpu", "MigSlice", "NodeResources", "NvmlApi",
    "canonical_name", "detect", "mig_profile", "missing_for", "node_resources", "slugify",
]

_MIB = 2**20
_GIB = 2**30

# Known models, first match wins. `\b` keeps L4 from matching L40S and H200 from GH200.
_KNOWN_MODELS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), model)
    for pattern, model in (
        (r"\bH200\b", "H200"),
        (r"\bH100\b", "H100"),
        (r"\bA100\b", "A100"),  # split into -80GB / -40GB below
        (r"\bL40S\b", "L40S"),
        (r"\bL4\b", "L4"),
        (r"\bA10G\b", "A10G"),
        (r"\bT4\b", "T4"),
        (r"\bV100\b", "V100"),
        (r"\bK80\b", "K80"),
    )
)
_VENDOR_WORDS = re.compile(r"^(?:nvidia|tesla)\s+", re.IGNORECASE)
_MIG_IN_NAME = re.compile(r"\b((?:\d+c\.)?\d+g\.\d+gb)\b", re.IGNORECASE)


def _text(value: str | bytes) -> str:
    # pynvml < 11.5 answers bytes, later versions str.
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def slugify(text: str) -> str:
    """Lowercase ``text`` into a Ray-resource- and label-safe slug (at most 63 chars).

    Example:
        >>> slugify("GeForce RTX 4090")
        'geforce-rtx-4090'
    """
    slug = re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")
    return slug[:63].rstrip("-.") or "unknown-gpu"


def canonical_name(nvml_name: str | bytes, memory_mb: int | None = None) -> str:
    """The canonical short model name of an NVML device name.

    Known models get their short name (``H100``, ``A100-80GB`` ...); any other card keeps
    a slug of its NVML name without the vendor word. An A100 whose name does not say its
    memory size is told apart by ``memory_mb`` (>= 60 GiB is the 80 GB card).

    Example:
        >>> canonical_name("NVIDIA A100-SXM4-80GB"), canonical_name(b"Tesla T4")
        ('A100-80GB', 'T4')
        >>> canonical_name("NVIDIA GeForce RTX 4090")
        'geforce-rtx-4090'
    """
    name = _text(nvml_name).strip()
    for pattern, model in _KNOWN_MODELS:
        if pattern.search(name):
            if model != "A100":
                return model
            if re.search(r"80\s*GB", name, re.IGNORECASE):
                return "A100-80GB"
            if re.search(r"40\s*GB", name, re.IGNORECASE):
                return "A100-40GB"
            big = memory_mb is not None and memory_mb >= 60 * 1024
            return "A100-80GB" if big else "A100-40GB"
    return slugify(_VENDOR_WORDS.sub("", name))


def mig_profile(gi_slices: int, ci_slices: int, memory_mb: int, parent_total_bytes: int) -> str:
    """The MIG profile name (``1g.10gb``, ``1c.3g.40gb``) of a MIG device's attributes.

    NVIDIA's naming: the slice's share of the parent's memory, rounded up to eighths,
    times the parent's memory in whole GiB (rounded up), rounded to the nearest GB.

    Example:
        >>> mig_profile(1, 1, 9728, 81920 * 2**20)
        '1g.10gb'
        >>> mig_profile(3, 1, 40192, 81920 * 2**20)
        '1c.3g.40gb'
    """
    share = math.ceil(memory_mb * _MIB / parent_total_bytes * 8) / 8
    total_gb = math.ceil(parent_total_bytes / _GIB)
    gb = math.floor(share * total_gb + 0.5)
    prefix = f"{ci_slices}c." if ci_slices < gi_slices else ""
    return f"{prefix}{gi_slices}g.{gb}gb"


def _no_gpu(err: BaseException) -> Detection:
    if isinstance(err, NvmlImportError):  # a CPU node needs no NVML binding: say which extra
        return Detection("no-driver", message=f"no NVML binding ({err})")
    if error_code(err) in NO_DRIVER_CODES:
        return Detection("no-driver", message=f"no NVIDIA driver ({error_text(err)})")
    return Detection("error", message=f"NVML failed: {error_text(err)}")


def detect(nvml: NvmlApi | None = None) -> Detection:
    """Ask NVML (``pynvml``, or the ``nvml`` given, e.g. a :class:`FakeNvml`) what GPUs exist.

    Never raises for a missing or failing driver: that is a CPU-only answer with
    ``status`` ``no-driver`` or ``error``. A device whose queries fail is skipped with a
    warning, so a node advertises less than it has, never more.

    Example:
        >>> [g.model for g in detect(FakeNvml.preset("h100x8")).gpus][:2]
        ['H100', 'H100']
        >>> detect(FakeNvml.preset("no-driver")).status
        'no-driver'
    """
    if nvml is None:
        try:
            nvml = load_pynvml()
        except NvmlImportError as err:
            return _no_gpu(err)
    try:
        nvml.nvmlInit()
    except Exception as err:  # pynvml raises NVMLError subclasses; old versions others
        return _no_gpu(err)
    try:
        return _scan(nvml)
    except Exception as err:
        return _no_gpu(err)
    finally:
        # Nothing left to release, or a dying driver: the answer stands either way.
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _scan(nvml: NvmlApi) -> Detection:
    try:
        driver: str | None = _text(nvml.nvmlSystemGetDriverVersion())
    except Exception:
        driver = None
    notes: list[str] = []
    gpus: list[Gpu] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            gpus.append(_read_gpu(nvml, index, notes))
        except Exception as err:
            notes.append(f"GPU {index} skipped: {error_text(err)}")
    return Detection("ok", tuple(gpus), driver, None, tuple(notes))


def _read_gpu(nvml: NvmlApi, index: int, notes: list[str]) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name = _text(nvml.nvmlDeviceGetName(handle))
    total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    model = canonical_name(name, total // _MIB)
    try:
        mig_enabled = nvml.nvmlDeviceGetMigMode(handle)[0] == NVML_DEVICE_MIG_ENABLE
    except Exception as err:
        # Pre-Ampere cards and old drivers have no MIG; any other failure skips the GPU,
        # since advertising a MIG GPU as whole would promise a device CUDA cannot open.
        if error_code(err) not in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND):
            raise
        mig_enabled = False
    slices: list[MigSlice] = []
    if mig_enabled:
        for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except Exception as err:
                if error_code(err) != NVML_ERROR_NOT_FOUND:  # NOT_FOUND: an empty slot
                    notes.append(f"GPU {index} MIG slot {slot} skipped: {error_text(err)}")
                continue
            found = _read_mig(nvml, mig, slot, total)
            if isinstance(found, str):
                notes.append(f"GPU {index} MIG slot {slot} skipped: {found}")
            else:
                slices.append(found)
        if not slices:
            notes.append(f"GPU {index} is in MIG mode with no MIG devices: it offers nothing")
    return Gpu(index, name, model, total // _MIB, mig_enabled, tuple(slices))


def _read_mig(nvml: NvmlApi, mig: Any, slot: int, parent_total: int) -> MigSlice | str:
    try:
        attrs = nvml.nvmlDeviceGetAttributes(mig)
        memory_mb = int(attrs.memorySizeMB)
        profile = mig_profile(int(attrs.gpuInstanceSliceCount),
                              int(attrs.computeInstanceSliceCount), memory_mb, parent_total)
        return MigSlice(slot, profile, memory_mb)
    except Exception as err:
        attrs_error = error_text(err)
    # Without attributes, the profile may still be read from the device's name.
    try:
        match = _MIG_IN_NAME.search(_text(nvml.nvmlDeviceGetName(mig)))
        memory_mb = int(nvml.nvmlDeviceGetMemoryInfo(mig).total) // _MIB
    except Exception as err:
        return f"{attrs_error}; {error_text(err)}"
    if match is None:
        return f"{attrs_error}; no profile in its name"
    return MigSlice(slot, match.group(1).lower(), memory_mb)
