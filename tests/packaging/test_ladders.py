"""The ladders that ship in the package: found through importlib.resources, their only copy."""

from __future__ import annotations

import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest

from ray_ladder import load_ladder
from ray_ladder.demo.__main__ import parse_args
from ray_ladder.ladders import ladder_path, shipped_ladders

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_ladders_ship_in_the_package() -> None:
    assert shipped_ladders() == ["demo", "llm", "vllm"]
    for name in shipped_ladders():
        path = ladder_path(name)
        assert path == ladder_path(f"{name}.yaml")
        assert path.parent == Path(str(files("ray_ladder"))) / "ladders"
        assert load_ladder(path).name == name
    # One source: the repository's examples hold no copy of a shipped ladder.
    assert not {p.stem for p in (ROOT / "examples" / "ladders").glob("*.yaml")} & set(
        shipped_ladders())


def test_the_demo_defaults_to_the_shipped_ladders() -> None:
    assert parse_args([]).ladder == ladder_path("llm")
    assert parse_args(["--story", "digits"]).ladder == ladder_path("demo")


def test_an_unknown_name_lists_the_shipped_ones() -> None:
    with pytest.raises(ValueError, match=r"'gpu-serving'.*shipped: demo, llm"):
        ladder_path("gpu-serving")


def test_finding_them_imports_no_ray() -> None:
    code = ("import sys, ray_ladder.ladders as l; l.ladder_path('llm'); "
            "assert not [m for m in sys.modules if m == 'ray' or m.startswith('ray.')]")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
