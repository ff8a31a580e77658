"""The NVML seam: the pynvml calls detection makes, and a fake that answers them."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

from ray_ladder._lazy import requires_extra

# NVML return codes (nvml.h); errors are told apart by their ``.value`` so that pynvml's
# error classes and the fake's answer to the same code the same way.
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_DEVICE_MIG_ENABLE = 1

#: Codes that mean "this machine has no usable NVIDIA driver": a CPU node, not a fault.
NO_DRIVER_CODES = frozenset({NVML_ERROR_DRIVER_NOT_LOADED, NVML_ERROR_LIBRARY_NOT_FOUND})

_CODE_NAMES = {
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NvmlApi(Protocol):
    """The pynvml functions detection calls; the ``pynvml`` module itself satisfies it.

    Errors are exceptions carrying the NVML return code in ``.value``.
    """

    def nvmlInit(self) -> None: ...  # noqa: N802 (pynvml's names)
    def nvmlShutdown(self) -> None: ...  # noqa: N802
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...  # noqa: N802
    def nvmlDeviceGetCount(self) -> int: ...  # noqa: N802
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...  # noqa: N802
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...  # noqa: N802
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...  # noqa: N802
    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]: ...  # noqa: N802
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int: ...  # noqa: N802
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any: ...  # noqa: N802
    def nvmlDeviceGetAttributes(self, handle: Any) -> Any: ...  # noqa: N802


class NvmlImportError(ImportError):
    """The ``pynvml`` module (package ``nvidia-ml-py``, the ``gpu`` extra) is not installed."""


def load_pynvml() -> NvmlApi:
    """The real pynvml module, imported quietly.

    Raises:
        NvmlImportError: when ``nvidia-ml-py`` is not installed; the message names the
            extra that brings it (``pip install 'ray-ladder[gpu]'``).

    Example:
        >>> nvml = load_pynvml()  # doctest: +SKIP
    """
    try:
        with warnings.catch_warnings():
            # The `pynvml` shim package warns that it is deprecated in favour of
            # nvidia-ml-py, which provides the very module we import.
            warnings.simplefilter("ignore", FutureWarning)
            with requires_extra("gpu", "GPU detection (nvidia-ml-py)"):
                import pynvml
    except ImportError as err:
        raise NvmlImportError(str(err)) from None
    return pynvml  # type: ignore[return-value]


def error_code(err: BaseException) -> int | None:
    """The NVML return code an error carries, or None for a non-NVML error."""
    value = getattr(err, "value", None)
    return value if isinstance(value, int) else None


def error_text(err: BaseException) -> str:
    """A one-line description naming the NVML error, e.g. ``NVMLError_GPUIsLost: GPU is lost``."""
    code = error_code(err)
    try:
        text = str(err)
    except Exception:  # pynvml's __str__ calls into the library, which may be gone
        text = _CODE_NAMES.get(code or -1, "")
    name = type(err).__name__
    if code is not None and name in ("NVMLError", "FakeNVMLError"):
        name = f"NVMLError({code})"
    return f"{name}: {text}" if text else name


class FakeNVMLError(Exception):
    """An NVML error raised by :class:`FakeNvml`, like ``pynvml.NVMLError(code)``.

    Example:
        >>> FakeNVMLError(6).value
        6
    """

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _CODE_NAMES.get(self.value, f"NVML error {self.value}")


@dataclass(frozen=True)
class FakeMig:
    """One MIG device of a :class:`FakeGpu`.

    Example:
        >>> FakeMig(gi_slices=1, memory_mb=9728)
        FakeMig(gi_slices=1, memory_mb=9728, ci_slices=None, name=None)
    """

    gi_slices: int
    memory_mb: int
    ci_slices: int | None = None
    name: str | None = None


@dataclass(frozen=True)
class FakeGpu:
    """One fake GPU: its NVML name, memory, MIG devices and injected per-call errors.

    ``mig`` is ``None`` for a GPU without MIG support (NVML answers "Not Supported"),
    ``()`` for MIG-capable with MIG off, and a tuple of slices for MIG on. ``errors`` maps
    a pynvml function name to the NVML code that call raises for this GPU.

    Example:
        >>> FakeGpu("NVIDIA H100 80GB HBM3", 81559).name
        'NVIDIA H100 80GB HBM3'
    """

    name: str
    memory_mb: int
    mig: tuple[FakeMig, ...] | None = ()
    mig_enabled: bool = False
    errors: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Handle:
    gpu: int
    mig: int | None = None


class FakeNvml:
    """A stand-in for pynvml that reports the GPUs it is given (tests, docs, dry runs).

    Args:
        gpus: the devices, index order.
        init_error: NVML code ``nvmlInit`` raises (e.g. 12: library not found).
        count_error: NVML code ``nvmlDeviceGetCount`` raises.
        names_as_bytes: answer names as ``bytes``, as pynvml < 11.5 does.
        driver_version: what ``nvmlSystemGetDriverVersion`` answers.

    Example:
        >>> nvml = FakeNvml([FakeGpu("NVIDIA L4", 23034)] * 2)
        >>> nvml.nvmlInit(); nvml.nvmlDeviceGetCount()
        2
    """

    def __init__(
        self,
        gpus: Iterable[FakeGpu] = (),
        *,
        init_error: int | None = None,
        count_error: int | None = None,
        names_as_bytes: bool = False,
        driver_version: str = "550.54.15",
    ) -> None:
        self.gpus = list(gpus)
        self.init_error = init_error
        self.count_error = count_error
        self.names_as_bytes = names_as_bytes
        self.driver_version = driver_version
        self.initialized = 0  # init calls not yet matched by a shutdown

    # --- pynvml's surface ------------------------------------------------------------------

    def nvmlInit(self) -> None:  # noqa: N802
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)
        self.initialized += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self._check_init()
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        self._check_init()
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._check_init()
        if self.count_error is not None:
            raise FakeNVMLError(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:  # noqa: N802
        self._check_init()
        if not 0 <= index < len(self.gpus):
            raise FakeNVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT
        self._raise_injected(index, "nvmlDeviceGetHandleByIndex")
        return _Handle(index)

    def nvmlDeviceGetName(self, handle: _Handle) -> str | bytes:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetName")
        name = gpu.name
        if handle.mig is not None:
            mig = self._mig(handle)
            name = mig.name if mig.name is not None else gpu.name
        return name.encode() if self.names_as_bytes else name

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> SimpleNamespace:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        mb = self._mig(handle).memory_mb if handle.mig is not None else gpu.memory_mb
        return SimpleNamespace(total=mb * 2**20, free=mb * 2**20, used=0)

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetMigMode")
        if gpu.mig is None:
            raise FakeNVMLError(NVML_ERROR_NOT_SUPPORTED)
        mode = NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else 0
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetMaxMigDeviceCount")
        if gpu.mig is None:
            raise FakeNVMLError(NVML_ERROR_NOT_SUPPORTED)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        if not gpu.mig_enabled or gpu.mig is None or index >= len(gpu.mig):
            raise FakeNVMLError(NVML_ERROR_NOT_FOUND)
        return _Handle(handle.gpu, index)

    def nvmlDeviceGetAttributes(self, handle: _Handle) -> SimpleNamespace:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetAttributes")
        if handle.mig is None:
            return SimpleNamespace(gpuInstanceSliceCount=7, computeInstanceSliceCount=7,
                                   memorySizeMB=gpu.memory_mb)
        mig = self._mig(handle)
        ci = mig.ci_slices if mig.ci_slices is not None else mig.gi_slices
        return SimpleNamespace(gpuInstanceSliceCount=mig.gi_slices,
                               computeInstanceSliceCount=ci, memorySizeMB=mig.memory_mb)

    # --- helpers ---------------------------------------------------------------------------

    def _check_init(self) -> None:
        if self.initialized <= 0:
            raise FakeNVMLError(1)  # NVML_ERROR_UNINITIALIZED

    def _raise_injected(self, index: int, call: str) -> None:
        code = self.gpus[index].errors.get(call)
        if code is not None:
            raise FakeNVMLError(code)

    def _gpu(self, handle: _Handle, call: str) -> FakeGpu:
        self._check_init()
        self._raise_injected(handle.gpu, call)
        return self.gpus[handle.gpu]

    def _mig(self, handle: _Handle) -> FakeMig:
        mig = self.gpus[handle.gpu].mig
        assert mig is not None and handle.mig is not None
        return mig[handle.mig]

    # --- construction from data ------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FakeNvml:
        """Build from JSON-shaped data (what ``RAY_LADDER_FAKE_NVML`` holds).

        Example:
            >>> FakeNvml.from_dict({"gpus": [{"name": "NVIDIA L4", "memory_mb": 23034,
            ...                               "count": 2}]}).gpus[1].name
            'NVIDIA L4'
        """
        gpus: list[FakeGpu] = []
        for item in data.get("gpus", []):
            mig_data = item.get("mig", [])
            mig = None if mig_data is None else tuple(
                FakeMig(**{k: v for k, v in m.items() if k != "count"})
                for m in mig_data for _ in range(int(m.get("count", 1)))
            )
            gpu = FakeGpu(
                name=item["name"], memory_mb=int(item["memory_mb"]), mig=mig,
                mig_enabled=bool(item.get("mig_enabled", bool(mig))),
                errors=dict(item.get("errors", {})),
            )
            gpus += [gpu] * int(item.get("count", 1))
        return cls(gpus, init_error=data.get("init_error"), count_error=data.get("count_error"),
                   names_as_bytes=bool(data.get("names_as_bytes", False)))

    @classmethod
    def preset(cls, name: str) -> FakeNvml:
        """A named machine from :data:`PRESETS` (``h100x8``, ``a100-mig``, ``mixed`` ...).

        Example:
            >>> len(FakeNvml.preset("h100x8").gpus)
            8
        """
        if name not in PRESETS:
            raise KeyError(f"no fake NVML preset {name!r}; presets: {sorted(PRESETS)}")
        return cls.from_dict(PRESETS[name])

    @classmethod
    def from_spec(cls, spec: str) -> FakeNvml:
        """A preset name, a JSON document, or the path of a JSON file.

        Example:
            >>> FakeNvml.from_spec('{"gpus": []}').gpus
            []
        """
        spec = spec.strip()
        if spec in PRESETS:
            return cls.preset(spec)
        if spec.startswith("{"):
            return cls.from_dict(json.loads(spec))
        path = Path(spec)
        if path.is_file():
            return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))
        raise ValueError(
            f"fake NVML spec {spec!r} is not a preset ({', '.join(sorted(PRESETS))}), "
            "a JSON object or a JSON file"
        )


_A100_80 = {"name": "NVIDIA A100-SXM4-80GB", "memory_mb": 81920}

#: Machines the fake can play by name; memory figures are what NVML reports for them.
PRESETS: dict[str, dict[str, Any]] = {
    "h100x8": {"gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559, "count": 8}]},
    "a100x8": {"gpus": [dict(_A100_80, count=8)]},
    "l4x1": {"gpus": [{"name": "NVIDIA L4", "memory_mb": 23034, "mig": None}]},
    # One A100 cut into 7 x 1g.10gb, one into 2 x 3g.40gb, one whole.
    "a100-mig": {"gpus": [
        dict(_A100_80, mig=[{"gi_slices": 1, "memory_mb": 9728, "count": 7}]),
        dict(_A100_80, mig=[{"gi_slices": 3, "memory_mb": 40192, "count": 2}]),
        dict(_A100_80),
    ]},
    "mixed": {"gpus": [
        {"name": "NVIDIA A100-PCIE-40GB", "memory_mb": 40960},
        {"name": "Tesla T4", "memory_mb": 15360, "mig": None, "count": 2},
        {"name": "NVIDIA GeForce RTX 4090", "memory_mb": 24564, "mig": None},
    ]},
    "no-driver": {"init_error": NVML_ERROR_LIBRARY_NOT_FOUND},
    "driver-error": {"init_error": NVML_ERROR_UNKNOWN},
}
