"""ray-ladder: compute fallback ladders for Ray."""

from __future__ import annotations

from ray_ladder._lazy import lazy_getattr
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.context import RungContext
from ray_ladder.core.events import TransitionEvent
from ray_ladder.core.exceptions import (
    Attempt,
    BudgetExhaustedError,
    ConfigError,
    ConstraintNotAllowedError,
    InvalidConstraintsError,
    LadderError,
    LadderExhaustedError,
    RungUnavailableError,
)
from ray_ladder.core.selector import Decision, Selector
from ray_ladder.core.spec import CacheSettings, Ladder, Policy, Rung, load_ladder

__version__ = "0.1.0"

# Parts that import Ray load on first use, so `import ray_ladder` stays Ray-free.
_LAZY = {
    "ladder_task": "ray_ladder.task.decorator",
    "LadderTask": "ray_ladder.task.decorator",
    "last_rung": "ray_ladder.task.decorator",
    "CapacityView": "ray_ladder.cluster.capacity",
}

__all__ = [
    "Attempt",
    "BudgetExhaustedError",
    "CacheSettings",
    "CapacityView",
    "ConfigError",
    "ConstraintNotAllowedError",
    "Constraints",
    "Decision",
    "InvalidConstraintsError",
    "Ladder",
    "LadderError",
    "LadderExhaustedError",
    "LadderTask",
    "Policy",
    "Rung",
    "RungContext",
    "RungUnavailableError",
    "Selector",
    "TransitionEvent",
    "ladder_task",
    "last_rung",
    "load_ladder",
]


__getattr__ = lazy_getattr("ray_ladder", _LAZY, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
