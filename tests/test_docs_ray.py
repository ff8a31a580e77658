"""The docs' blocks marked ``<!-- run by: tests/test_docs_ray.py -->`` run on one local Ray.

They run as written, in page order, each page in its own namespace, from the repository
root. The one block that calls ``ray.init(`` (docs/accelerators.md's single-node try-out)
runs first and starts the Ray the others join; the test shuts it down at the end, and
with it what the blocks left running (the autoscaler hook is a detached actor). A block
marked so must not need the page's other blocks.
"""

from __future__ import annotations

import pytest

from tests.test_docs_snippets import ALL, ROOT, Block

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

HERE = "tests/test_docs_ray.py"
MINE = [b for b in ALL if b.run_by == HERE]


def test_the_marked_blocks_run_on_one_local_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    starts = [b for b in MINE if "ray.init(" in b.code]
    assert len(starts) == 1, f"one block starts the Ray the others join: {starts}"
    assert not ray.is_initialized(), "another test of this process left Ray connected"
    monkeypatch.chdir(ROOT)
    namespaces: dict[str, dict[str, object]] = {}
    try:
        for block in [*starts, *(b for b in MINE if b not in starts)]:
            _run(block, namespaces.setdefault(block.page.name, {"__name__": "__docs__"}))
    finally:
        ray.shutdown()


def _run(block: Block, namespace: dict[str, object]) -> None:
    try:
        exec(compile(block.code, block.where, "exec"), namespace)  # noqa: S102
    except Exception as err:  # noqa: BLE001 (the failure names the block)
        pytest.fail(f"{block.where}: {type(err).__name__}: {err}")
