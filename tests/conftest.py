"""Shared fixtures: small ladders; Ray clusters are started per module by the tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ray_ladder import Ladder, load_ladder

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "ladders"
# The shared traces sit beside the repository (../shared/traces) in CI and sessions.
TRACES = Path(os.environ.get("RAY_LADDER_TRACES", ROOT.parent / "shared" / "traces"))

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture(scope="session")
def gpu_ladder() -> Ladder:
    """The GPU serving example ladder."""
    return load_ladder(EXAMPLES / "gpu-serving.yaml")


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The real spot-capacity traces; skips when they are not beside the repo."""
    if not TRACES.is_dir():
        pytest.skip(f"shared traces not found at {TRACES}")
    return TRACES
