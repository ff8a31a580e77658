"""Ray Serve integration: a ladder app of one deployment per rung behind a ladder router.

``LadderResult``, the cache and the HTTP rules are pure; the parts that import Ray
(``build_app``, ``app_builder``, ``LadderRouter``) load on first use.
"""

from __future__ import annotations

from ray_ladder._lazy import lazy_getattr
from ray_ladder.serve.result import LadderResult

_LAZY = {
    "build_app": "ray_ladder.serve.app",
    "app_builder": "ray_ladder.serve.app",
    "LadderAppArgs": "ray_ladder.serve.app",
    "LadderRouter": "ray_ladder.serve.router",
    "RemoteLadderRung": "ray_ladder.serve.remote",
    "SharedApp": "ray_ladder.serve.shared",
    "SharedFront": "ray_ladder.serve.shared",
    "SharedFrontArgs": "ray_ladder.serve.shared",
    "build_shared_app": "ray_ladder.serve.shared",
    "shared_front_builder": "ray_ladder.serve.shared",
}

__all__ = ["LadderAppArgs", "LadderResult", "LadderRouter", "RemoteLadderRung", "SharedApp",
           "SharedFront", "SharedFrontArgs", "app_builder", "build_app", "build_shared_app",
           "shared_front_builder"]


__getattr__ = lazy_getattr("ray_ladder.serve", _LAZY, globals(), extra="serve",
                           probe="ray.serve")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
