"""Synthetic capacity traces: always, never, random on/off (Markov), outage windows."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from ray_ladder.simulate.traces import Trace, tick_index


def always_on() -> Trace:
    """A rung that is always obtainable (what a rung without a trace gets)."""
    return Trace((0.0,), (True,), source="always")


def never_on() -> Trace:
    """A rung that is never obtainable."""
    return Trace((0.0,), (False,), source="never")


def markov_trace(
    mean_up_s: float,
    mean_down_s: float,
    duration_s: float,
    *,
    seed: int = 0,
    gap_s: float = 60.0,
    start: bool | None = None,
) -> Trace:
    """Random on/off capacity: a two-state Markov chain sampled every ``gap_s``.

    Up and down periods are geometric in whole gaps with the given means (the discrete
    twin of exponential holding times); a mean shorter than one gap becomes one gap.
    The first state is ``start``, or drawn from the long-run distribution
    ``up / (up + down)`` when ``None``. Deterministic for a given seed.

    Example:
        >>> t = markov_trace(3600, 600, duration_s=86400, seed=1)
        >>> t.duration_s, t.resolution_s
        (86400.0, 60.0)
    """
    for name, value in (("mean_up_s", mean_up_s), ("mean_down_s", mean_down_s),
                        ("duration_s", duration_s), ("gap_s", gap_s)):
        if not value > 0:
            raise ValueError(f"markov_trace: {name} must be > 0, got {value}")
    rng = random.Random(seed)
    state = rng.random() < mean_up_s / (mean_up_s + mean_down_s) if start is None else start
    total = tick_index(duration_s, gap_s)
    steps: list[tuple[float, bool]] = []
    k = 0
    while k < total:
        steps.append((k * gap_s, state))
        mean = (mean_up_s if state else mean_down_s) / gap_s
        k += _geometric(rng, mean)
        state = not state
    source = f"markov:up={mean_up_s:g},down={mean_down_s:g},seed={seed},gap={gap_s:g}"
    return Trace.from_steps(steps, duration_s=float(duration_s), resolution_s=float(gap_s),
                            source=source)


def _geometric(rng: random.Random, mean: float) -> int:
    """A geometric number of steps (>= 1) with the given mean (<= 1 gives 1)."""
    if mean <= 1:
        return 1
    p = 1.0 / mean
    return 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - p))


def outage_trace(
    windows: Sequence[tuple[float, float]], duration_s: float | None = None
) -> Trace:
    """Obtainable except during the ``[start, end)`` outage windows (seconds).

    Overlapping or touching windows merge. The resolution is the greatest common divisor
    of the window edges when they are whole seconds, so a generated-only run ticks on
    them exactly.

    Example:
        >>> outage_trace([(100, 400), (900, 1000)]).starts
        (0.0, 100.0, 400.0, 900.0, 1000.0)
    """
    merged: list[list[float]] = []
    for start, end in sorted((float(a), float(b)) for a, b in windows):
        if start < 0 or end <= start:
            raise ValueError(f"outage window {start:g}-{end:g}: need 0 <= start < end")
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    steps: list[tuple[float, bool]] = [(0.0, True)]
    for start, end in merged:
        steps += [(start, False), (end, True)]
    if duration_s is not None:
        steps = [s for s in steps if s[0] < duration_s]
    edges = [e for w in merged for e in w if e] + ([duration_s] if duration_s else [])
    resolution: float | None = None
    if edges and all(float(e).is_integer() for e in edges):
        resolution = float(math.gcd(*(int(e) for e in edges)))
    source = "outage:" + ",".join(f"{a:g}-{b:g}" for a, b in merged)
    return Trace.from_steps(steps, duration_s=duration_s, resolution_s=resolution,
                            source=source)


def queued_trace(
    wait_s: float,
    run_s: float | None = None,
    *,
    at_s: float = 0.0,
    requeue: bool = True,
    duration_s: float | None = None,
) -> Trace:
    """Queued capacity (flex-start): requested at ``at_s``, granted ``wait_s`` later.

    The grant holds for ``run_s`` (for ever when ``None``); then, with ``requeue``, the
    rung is queued again at once and granted after another ``wait_s``, as the autoscaler
    hook does, until ``duration_s``. The resolution is the greatest common divisor of the
    edges when they are whole seconds.

    Example:
        >>> t = queued_trace(7200, 21600, duration_s=36000)
        >>> t.starts, t.values, t.obtainable_fraction()
        ((0.0, 7200.0, 28800.0), (False, True, False), 0.6)
    """
    for name, value in (("wait_s", wait_s), ("at_s", at_s)):
        if value < 0:
            raise ValueError(f"queued_trace: {name} must be >= 0, got {value}")
    if run_s is not None and run_s <= 0:
        raise ValueError(f"queued_trace: run_s must be > 0, got {run_s}")
    repeats = run_s is not None and requeue
    if repeats and duration_s is None:
        raise ValueError("queued_trace: a grant that ends and is queued again needs "
                         "duration_s (or requeue=False)")
    steps: list[tuple[float, bool]] = [(0.0, False)]
    t = float(at_s) + wait_s
    while duration_s is None or t < duration_s:
        steps.append((t, True))
        if run_s is None:
            break
        steps.append((t + run_s, False))
        if not repeats:
            break
        t += run_s + wait_s
    if duration_s is not None:
        steps = [s for s in steps if s[0] < duration_s]
    edges = [s[0] for s in steps if s[0]] + ([duration_s] if duration_s else [])
    resolution: float | None = None
    if edges and all(float(e).is_integer() for e in edges):
        resolution = float(math.gcd(*(int(e) for e in edges)))
    parts = [f"wait={wait_s:g}"] + ([f"run={run_s:g}"] if run_s is not None else []) + (
        [f"at={at_s:g}"] if at_s else []) + ([] if requeue or run_s is None else ["requeue=off"])
    return Trace.from_steps(steps, duration_s=duration_s, resolution_s=resolution,
                            source="queued:" + ",".join(parts))
