"""Ray Serve integration: a ladder app of one deployment per rung behind a ladder router.

``LadderResult``, the cache and the HTTP rules are pure; the parts that import Ray
(``build_app``, ``app_builder``, ``LadderRouter``) load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from ray_ladder.serve.result import LadderResult

_LAZY = {
    "build_app": "ray_ladder.serve.app",
    "app_builder": "ray_ladder.serve.app",
    "LadderAppArgs": "ray_ladder.serve.app",
    "LadderRouter": "ray_ladder.serve.router",
}

__all__ = ["LadderAppArgs", "LadderResult", "LadderRouter", "app_builder", "build_app"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ray_ladder.serve' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
