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


_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave with pytest's own status once every report is written.

    After a session that started and stopped many Ray clusters in one process, Ray's
    core-worker library can crash during interpreter teardown (SIGSEGV after the
    summary line), turning a green run into exit 139. Nothing is left to run or report
    at this point, so skip the teardown.
    """
    if _EXIT_STATUS and os.environ.get("RAY_LADDER_NORMAL_EXIT") != "1":
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])
