"""The package's own import graph, read from the source (no module is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ray_ladder"


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of ray_ladder."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the ray_ladder modules it imports anywhere (top level, functions and
    ``TYPE_CHECKING`` blocks alike: a cycle through any of them is a cycle)."""
    mods = modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(resolve(a.name) for a in node.names
                            if a.name.startswith("ray_ladder"))
            elif isinstance(node, ast.ImportFrom) and node.level == 0 \
                    and (node.module or "").startswith("ray_ladder"):
                module = node.module or ""
                for alias in node.names:
                    full = f"{module}.{alias.name}"
                    deps.add(full if full in mods else resolve(module))
        graph[name] = {d for d in deps if d is not None and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def folder(module: str) -> str:
    """The layer folder of a module: ``ray_ladder.task.orchestrator.lanes`` -> ``task``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "ray_ladder"
