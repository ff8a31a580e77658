"""Ray Train on a ladder: a run's worker group takes the best rung shape, falls and climbs.

The worker-side names (``current_rung``, ``report``) import no Ray Train internals, so a
worker that resumes pays nothing for them; the trainer and its policy load on first use.
"""

from __future__ import annotations

from ray_ladder._lazy import lazy_getattr
from ray_ladder.train.gang import GangCapacity, gang_capacity, train_ladder, worker_demand
from ray_ladder.train.history import LadderSummary, TrainSpan
from ray_ladder.train.planner import GangPlanner, Placement
from ray_ladder.train.worker import TrainRungContext, current_rung, report

_LAZY = {
    "LadderTrainer": "ray_ladder.train.trainer",
    "LadderResult": "ray_ladder.train.trainer",
    "LadderScalingPolicy": "ray_ladder.train.policy",
    "PolicySpec": "ray_ladder.train.policy",
}

__all__ = [
    "GangCapacity",
    "GangPlanner",
    "LadderResult",
    "LadderScalingPolicy",
    "LadderSummary",
    "LadderTrainer",
    "Placement",
    "PolicySpec",
    "TrainRungContext",
    "TrainSpan",
    "current_rung",
    "gang_capacity",
    "report",
    "train_ladder",
    "worker_demand",
]


__getattr__ = lazy_getattr("ray_ladder.train", _LAZY, globals(), extra="train",
                           probe="ray.train")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
