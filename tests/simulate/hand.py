"""Hand-made traces for the peers' tests: one value a tick of ``TICK`` seconds."""

from __future__ import annotations

from ray_ladder.simulate import Trace

TICK = 100.0
H, A, L, C = "h100", "a100", "l4", "cpu"


def bits(*values: int) -> Trace:
    """A trace obtainable (1) or not (0) one tick at a time."""
    return Trace.from_steps([(i * TICK, bool(v)) for i, v in enumerate(values)],
                            duration_s=len(values) * TICK, resolution_s=TICK)
