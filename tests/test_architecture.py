"""The layout is the architecture: folders import downwards only, no cycles, small modules
and functions, and Ray's private APIs behind one door (docs/architecture.md draws the
same table)."""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterator, Mapping

import pytest

from tests._imports import PACKAGE, cycles, folder, import_graph, modules

#: Folder -> the folders it may import (besides itself). docs/architecture.md has this table.
MAY_IMPORT = {
    "ray_ladder": {"core", "_lazy"},
    "_lazy": set(),
    "engines": {"_lazy"},
    "ladders": set(),
    "core": set(),
    "node": {"core", "_lazy"},
    "cluster": {"core"},
    "testing": {"core", "cluster", "serve", "_lazy"},
    "task": {"core", "cluster", "_lazy"},
    "serve": {"core", "cluster", "_lazy", "engines"},
    "tune": {"core", "cluster", "_lazy"},
    "train": {"core", "cluster", "_lazy"},
    "fleet": {"core", "cluster"},
    "jobs": {"core", "cluster", "serve", "testing", "_lazy"},
    "autoscale": {"core", "cluster", "testing", "_lazy"},
    "simulate": {"core", "ray_ladder", "_lazy"},
    "cli": {"core", "node", "cluster", "autoscale", "simulate", "fleet", "jobs", "_lazy"},
    "demo": {"core", "cluster", "serve", "task", "tune", "fleet", "testing", "ladders", "_lazy",
             "engines"},
}
MAX_LINES = 400
#: Code lines (no docstring, blank or comment-only line) a function may have.
MAX_FUNCTION_LINES = 60
#: "module:qualname" -> why it stays long. An entry that no longer names a long function
#: fails the check: remove it.
LONG_FUNCTIONS = {
    "ray_ladder.core.selector:Selector.observe":
        "the hot path, one call per observation: docs/selector.md quotes its throughput "
        "(bench/selector.py), and its state lives in bound locals, not helper calls",
    "ray_ladder.simulate.replay:replay":
        "the per-tick loop of bench/simulate.py (a year of one-minute ticks): its state "
        "lives in local ints so a stepped tick makes one table lookup and allocates "
        "nothing",
}
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


def code_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> int:
    """Lines from ``def`` to the end that hold code: not the docstring, a blank line or a
    comment-only line (nested functions count in their parent too)."""
    body, skip = fn.body, range(0)
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        skip = range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1)
    return sum(1 for n in range(fn.lineno, (fn.end_lineno or fn.lineno) + 1)
               if n not in skip and lines[n - 1].strip()
               and not lines[n - 1].strip().startswith("#"))


def functions(source: str) -> Iterator[tuple[str, int]]:
    """(qualname, code lines) of every function of a module, methods and nested ones."""
    lines = source.splitlines()

    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + child.name, code_lines(child, lines)
                yield from visit(child, f"{prefix}{child.name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")
            else:
                yield from visit(child, prefix)

    yield from visit(ast.parse(source), "")


def long_functions(sources: Mapping[str, str],
                   limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """"module:qualname" -> code lines, of every function over ``limit``."""
    return {f"{module}:{name}": n for module, source in sources.items()
            for name, n in functions(source) if n > limit}


def test_the_function_counter_counts_code_lines_only() -> None:
    # Guard against a counter that finds nothing, or counts words for humans as code.
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    source = textwrap.dedent('''
        def short():
            """A docstring
            of three lines.
            """
            # a comment

        {body}

        class Box:
            async def long(self):
        {indented}
                y = 1
                def inner():
                    return 2
        ''').format(body=body, indented=textwrap.indent(body, "    "))
    counted = dict(functions(source))
    assert counted == {"short": 61, "Box.long": 64, "Box.long.<locals>.inner": 2}
    assert long_functions({"m": source}) == {"m:short": 61, "m:Box.long": 64}
    assert long_functions({"m": source}, limit=61) == {"m:Box.long": 64}


def test_functions_stay_short_or_say_why() -> None:
    found = long_functions({m: p.read_text() for m, p in modules().items()})
    new = {name: n for name, n in found.items() if name not in LONG_FUNCTIONS}
    assert new == {}, (f"over {MAX_FUNCTION_LINES} code lines: split by concept (extract "
                       "a helper), or list it in LONG_FUNCTIONS with a true reason")
    stale = sorted(set(LONG_FUNCTIONS) - set(found))
    assert stale == [], "no longer long (or gone): remove from LONG_FUNCTIONS"
    assert all(reason.strip() for reason in LONG_FUNCTIONS.values())


def test_ray_private_apis_go_through_one_door() -> None:
    users = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                   if PRIVATE.search(p.read_text()))
    assert set(users) <= DOOR, users
    assert "cluster/ray_private.py" in users  # the pattern still finds the door itself
    assert "cluster/ray_private_train.py" in users  # and Ray Train's
