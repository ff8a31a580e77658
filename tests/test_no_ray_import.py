"""The pure core never imports Ray (checked in a fresh interpreter: other tests import it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests._imports import folder, modules

ROOT = Path(__file__).parent.parent
#: Pure by design: every module under these folders, plus the pure planners, value
#: modules and renderers elsewhere (tests/test_doctests.py runs all of their examples).
PURE_FOLDERS = ("core", "simulate")
PURE_MODULES = (
    "ray_ladder",
    "ray_ladder.task",
    "ray_ladder.task.policy",
    "ray_ladder.autoscale",
    "ray_ladder.autoscale.plan",
    "ray_ladder.autoscale.render",
    "ray_ladder.autoscale.render.api",
    "ray_ladder.autoscale.render.capacity",
    "ray_ladder.autoscale.render.catalog",
    "ray_ladder.autoscale.render.ray_up",
    "ray_ladder.autoscale.sources",
    "ray_ladder.autoscale.fake.cluster",
    "ray_ladder.autoscale.fake.schedule",
    "ray_ladder.node.accelerators",
    "ray_ladder.node.advertise",
    "ray_ladder.node.detection",
    "ray_ladder.node.nvml",
    "ray_ladder.cluster.board",
    "ray_ladder.cluster.errors",
    "ray_ladder.cluster.event_log",
    "ray_ladder.cluster.event_store",
    "ray_ladder.cluster.hook_board",
    "ray_ladder.cluster.metrics",
    "ray_ladder.cluster.ray_private",
    "ray_ladder.cluster.roles",
    "ray_ladder.serve.cache",
    "ray_ladder.serve.demand",
    "ray_ladder.serve.health",
    "ray_ladder.serve.hedge",
    "ray_ladder.serve.keys",
    "ray_ladder.serve.http",
    "ray_ladder.serve.load",
    "ray_ladder.serve.places",
    "ray_ladder.serve.result",
    "ray_ladder.serve.state",
    "ray_ladder.serve.targets",
    "ray_ladder.serve.walk",
    "ray_ladder.serve.walker",
    "ray_ladder.serve.llm.ngram",
    "ray_ladder.serve.llm.protocol",
    "ray_ladder.testing.fault_state",
    "ray_ladder.train.history",
    "ray_ladder.train.lifecycle",
    "ray_ladder.train.planner",
    "ray_ladder.tune.history",
    "ray_ladder.tune.lifecycle",
    "ray_ladder.demo.llm.records",
)


def pure_modules() -> list[str]:
    """Every module that must import without Ray, found by walking the pure folders."""
    found = [m for m in modules() if folder(m) in PURE_FOLDERS]
    assert len(found) > 10, found  # the walk found the folders
    return sorted(set(found) | set(PURE_MODULES))


def run_fresh(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


PROBE = """
import sys
leaked = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))
assert not leaked, leaked
"""


def assert_no_ray(code: str) -> None:
    result = run_fresh(textwrap.dedent(code) + PROBE)
    assert result.returncode == 0, result.stderr


def test_importing_and_using_the_core_does_not_import_ray() -> None:
    imports = "\n".join(f"import {m}" for m in pure_modules())
    assert_no_ray(
        imports
        + """
from ray_ladder import Constraints, Ladder, Selector, load_ladder
ladder = load_ladder("examples/ladders/gpu-serving.yaml")
sel = Selector(ladder, Constraints(max_cost_per_hour=5.0))
d = sel.observe({"a100": True}, now=0.0)
assert d.rung == "a100", d
d.event(ladder.name).to_json()
dir(ray_ladder)
ray_ladder.__all__
"""
    )


def test_cli_validate_and_show_do_not_import_ray() -> None:
    assert_no_ray(
        """
        from ray_ladder.cli import main
        for command in ("validate", "show"):
            try:
                main([command, "examples/ladders/mig.yaml"])
            except SystemExit as exit:
                assert exit.code in (0, None), exit.code
        """
    )


def test_the_probe_detects_a_ray_import() -> None:
    # Guard against a probe that always passes (without paying for a real Ray import).
    result = run_fresh("import sys\nsys.modules['ray.util'] = sys\n" + PROBE)
    assert result.returncode != 0
    assert "ray.util" in result.stderr
