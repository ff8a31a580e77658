"""Shared fixtures: small ladders, the real traces, and a LocalCluster factory (one cluster
per test module: starting one costs seconds, see ../shared/RAY-NOTES.md)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


#: How long ``serve.start`` waits for its HTTP proxy in the suite. Ray Serve's own limit
#: is 60 s (``ray.serve._private.constants.HTTP_PROXY_TIMEOUT``, a constant with no
#: setting); a CI host of two busy cores running two of the suite's clusters took longer
#: to start the proxy's worker, and the module's setup failed (issue 46). The proxy
#: starting late is the machine's speed, not a fault of ours.
SERVE_PROXY_TIMEOUT_S = 240


@pytest.fixture(scope="session", autouse=True)
def patient_serve_start(request: pytest.FixtureRequest) -> None:
    """Give ``serve.start`` :data:`SERVE_PROXY_TIMEOUT_S` for its proxy, where Ray is
    already imported (a Ray test's module)."""
    import sys

    if "ray" not in sys.modules:  # pure tests never import Serve for it
        return
    from ray.serve._private import api

    api.HTTP_PROXY_TIMEOUT = max(api.HTTP_PROXY_TIMEOUT, SERVE_PROXY_TIMEOUT_S)


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[Callable[..., Any]]:
    """Start a :class:`ray_ladder.testing.LocalCluster` for this module; shut down after it.

    Call it with ``LocalCluster``'s arguments (``local_cluster(node_types, **options)``), or
    with ``ladder=`` for :meth:`LocalCluster.from_ladder`. Every cluster a module started
    is shut down when the module ends, even if a test failed.

    Example:
        >>> @pytest.fixture(scope="module")  # doctest: +SKIP
        ... def cluster(local_cluster):
        ...     return local_cluster({"h100": {"resources": {"ladder/h100": 1}}})
    """
    from ray_ladder.testing import LocalCluster

    started: list[LocalCluster] = []

    def start(node_types: Any = None, *, ladder: Any = None, **options: Any) -> LocalCluster:
        if ladder is not None:
            cluster = LocalCluster.from_ladder(ladder, **options)
        else:
            cluster = LocalCluster(node_types, **options)
        started.append(cluster)
        return cluster.start()

    yield start
    for cluster in reversed(started):
        cluster.shutdown()


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Ray modules first, longest first (the ``long`` marker), the quick pure tests last:
    with two workers (``make test TEST_WORKERS=2``) the last module to start decides when
    the run ends, so a quick one should be last. A stable sort: each module keeps its own
    order."""
    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("long") is not None:
            return 0
        return 1 if item.get_closest_marker("ray") is not None else 2

    if os.environ.get("PYTEST_XDIST_WORKER"):  # in one process the order stays as written
        items.sort(key=rank)
