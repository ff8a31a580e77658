"""The ladder files that ship inside the package (the demo's), found wherever it is installed.

They are package data, read through :mod:`importlib.resources`, so a wheel installed by
``pip install ray-ladder`` has them as a source checkout does; the files themselves live
in this folder (``ray_ladder/ladders/*.yaml``), their only copy.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["ladder_path", "shipped_ladders"]


def shipped_ladders() -> list[str]:
    """The names of the shipped ladders (file names without ``.yaml``), sorted.

    Example:
        >>> shipped_ladders()
        ['demo', 'llm']
    """
    return sorted(entry.name[: -len(".yaml")] for entry in files(__name__).iterdir()
                  if entry.is_file() and entry.name.endswith(".yaml"))


def ladder_path(name: str) -> Path:
    """The file of the shipped ladder ``name`` (``"llm"`` or ``"llm.yaml"``).

    The package must be installed as files (as pip installs a wheel), not run from a zip.

    Raises:
        ValueError: no shipped ladder has that name; the message lists those that do.

    Example:
        >>> from ray_ladder import load_ladder
        >>> load_ladder(ladder_path("llm")).name
        'llm'
    """
    stem = name.removesuffix(".yaml")
    resource = files(__name__) / f"{stem}.yaml"
    if not resource.is_file():
        known = ", ".join(shipped_ladders())
        raise ValueError(f"no shipped ladder named {name!r} (shipped: {known})")
    return Path(str(resource))
