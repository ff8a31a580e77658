"""Ray Tune on a ladder: trials resume on another rung after a preemption and climb back.

A trial's lifecycle rules are the pure :mod:`ray_ladder.tune.lifecycle`, which imports no
Ray, so this package loads its Ray-facing parts on first use.
"""

from __future__ import annotations

from ray_ladder._lazy import lazy_getattr

_LAZY = {
    "LadderCallback": "ray_ladder.tune.callback",
    "LadderScheduler": "ray_ladder.tune.scheduler",
    "RungSpan": "ray_ladder.tune.history",
    "Tuner": "ray_ladder.tune.tuner",
    "current_rung": "ray_ladder.tune.trainable",
    "ladder_configs": "ray_ladder.tune.tuner",
    "rung_history": "ray_ladder.tune.history",
    "should_checkpoint": "ray_ladder.tune.trainable",
    "with_ladder": "ray_ladder.tune.trainable",
}

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

__getattr__ = lazy_getattr("ray_ladder.tune", _LAZY, globals(), extra="tune",
                           probe="ray.tune")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
