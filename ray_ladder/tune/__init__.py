"""Ray Tune on a ladder: trials resume on another rung after a preemption and climb back."""

from __future__ import annotations

from ray_ladder.tune.callback import LadderCallback
from ray_ladder.tune.history import RungSpan, rung_history
from ray_ladder.tune.scheduler import LadderScheduler
from ray_ladder.tune.trainable import current_rung, should_checkpoint, with_ladder
from ray_ladder.tune.tuner import Tuner, ladder_configs

__all__ = [
    "LadderCallback",
    "LadderScheduler",
    "RungSpan",
    "Tuner",
    "current_rung",
    "ladder_configs",
    "rung_history",
    "should_checkpoint",
    "with_ladder",
]
