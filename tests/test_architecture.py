"""The layout is the architecture: folders import downwards only, no cycles, small modules,
and Ray's private APIs behind one door (docs/architecture.md draws the same table)."""

from __future__ import annotations

import re

import pytest

from tests._imports import PACKAGE, cycles, folder, import_graph, modules

#: Folder -> the folders it may import (besides itself). docs/architecture.md has this table.
MAY_IMPORT = {
    "ray_ladder": {"core", "_lazy"},
    "_lazy": set(),
    "core": set(),
    "node": {"core"},
    "cluster": {"core"},
    "testing": {"core", "cluster"},
    "task": {"core", "cluster", "_lazy"},
    "serve": {"core", "cluster", "_lazy"},
    "tune": {"core", "cluster", "_lazy"},
    "train": {"core", "cluster"},
    "autoscale": {"core", "cluster", "testing", "_lazy"},
    "simulate": {"core", "ray_ladder"},
    "cli": {"core", "node", "cluster", "autoscale", "simulate"},
    "demo": {"core", "cluster", "serve", "testing"},
}
MAX_LINES = 400
#: Uses of Ray internals; only ray_private.py, ray_private_train.py (Ray Train v2's) and,
#: pickled by value into the Serve controller, serve/scaling.py may name them.
PRIVATE = re.compile(r"ray\._private|ray\._common|_internal_kv_|global_worker|core_worker\b"
                     r"|_fetch_future_result_async|autoscaler\._private|autoscaler\.v2"
                     r"|_set_trial_status|train\.v2\._internal")
DOOR = {"cluster/ray_private.py", "cluster/ray_private_train.py", "serve/scaling.py"}


def test_the_graph_reader_sees_imports_and_cycles() -> None:
    # Guard against a reader that finds nothing (a check that cannot fail).
    graph = import_graph()
    assert "ray_ladder.core.spec" in graph["ray_ladder.core.selector"]
    assert "ray_ladder.task.policy" in graph["ray_ladder.task.orchestrator.lanes"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_inside_the_package() -> None:
    assert cycles(import_graph()) == []


def test_every_folder_imports_only_the_layers_below_it() -> None:
    graph = import_graph()
    wrong = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                   if folder(d) != folder(m) and folder(d) not in MAY_IMPORT[folder(m)])
    assert wrong == []
    assert set(MAY_IMPORT) >= {folder(m) for m in graph}, "a new folder needs its row"


@pytest.mark.parametrize("name", sorted(modules()))
def test_modules_stay_small(name: str) -> None:
    lines = modules()[name].read_text().count("\n")
    assert lines < MAX_LINES, f"{name}: {lines} lines; split it by concept"


def test_ray_private_apis_go_through_one_door() -> None:
    users = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                   if PRIVATE.search(p.read_text()))
    assert set(users) <= DOOR, users
    assert "cluster/ray_private.py" in users  # the pattern still finds the door itself
    assert "cluster/ray_private_train.py" in users  # and Ray Train's
