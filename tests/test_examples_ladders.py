"""Every example ladder (and every ladder shipped in the package) is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_ladder import Constraints, Ladder, Selector, load_ladder

ROOT = Path(__file__).parent.parent
LADDERS = sorted((ROOT / "examples" / "ladders").glob("*.yaml")) + sorted(
    (ROOT / "ray_ladder" / "ladders").glob("*.yaml")
)


def test_there_are_examples() -> None:
    names = {p.name for p in LADDERS}
    assert {"gpu-serving.yaml", "hybrid-sovereign.yaml", "mig.yaml"} <= names


@pytest.mark.parametrize("path", LADDERS, ids=lambda p: p.name)
def test_example_is_valid(path: Path) -> None:
    ladder = load_ladder(path)
    assert ladder.schema_version == 1
    assert Ladder.from_yaml(ladder.to_yaml()) == ladder
    # With everything obtainable a fresh selector sits on the top rung.
    everything = dict.fromkeys(ladder.names, True)
    assert Selector(ladder).observe(everything, 0.0).rung == ladder.names[0]


def test_gpu_serving_shape() -> None:
    ladder = load_ladder(ROOT / "examples" / "ladders" / "gpu-serving.yaml")
    assert ladder.names == ["h100", "a100", "l4", "cpu", "cache", "shed"]
    assert [r.kind for r in ladder.rungs][-2:] == ["cache", "shed"]
    assert ladder.rung("h100").placement()["resources"] == {"ladder/h100": 1.0}
    assert ladder.policy.promotion_hysteresis == 3
    assert ladder.policy.max_degraded_seconds == 600


def test_hybrid_sovereign_never_leaves_the_eu() -> None:
    ladder = load_ladder(ROOT / "examples" / "ladders" / "hybrid-sovereign.yaml")
    assert all(r.tags.get("jurisdiction") == "eu" for r in ladder.rungs)
    # On-prem first; cloud only when on-prem is full.
    assert ladder.rungs[0].tags["site"] == "onprem"
    sel = Selector(ladder, Constraints(jurisdiction="eu"))
    assert sel.observe({"onprem-h100": False, "eu-cloud-h100": True}, 0).rung == "eu-cloud-h100"


def test_mig_slices_are_rungs() -> None:
    ladder = load_ladder(ROOT / "examples" / "ladders" / "mig.yaml")
    resources = [next(iter(r.resources)) for r in ladder.rungs if r.resources]
    assert "ladder/a100-mig-3g.40gb" in resources
    assert "ladder/a100-mig-1g.10gb" in resources
