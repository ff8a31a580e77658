"""Replay the compared policies (the ladder and the baselines) and report them alike."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence

from ray_ladder.simulate.baselines import Baseline, LadderPolicy, PolicyContext
from ray_ladder.simulate.reference import Reference
from ray_ladder.simulate.replay import Replay
from ray_ladder.simulate.report import PolicyReport, summarise


def run_comparison(
    ctx: PolicyContext,
    policies: Sequence[Baseline],
    *,
    quality: list[float],
    cost_per_hour: list[float],
    serves: list[bool],
    reference: Reference,
    cost_oracle: float,
    obtainable_ticks: list[int],
    standby_rate: Callable[[str], float],
    flap_window_s: float,
    oracle: Replay | None = None,
) -> list[PolicyReport]:
    """One :class:`PolicyReport` per policy, with the same figures for every one.

    Args:
        ctx: The replay context (rungs, segments).
        policies: What to replay, in report order.
        quality: Quality per eligible rung.
        cost_per_hour: Cost per eligible rung.
        serves: Whether time on each eligible rung is served time (one definition for
            every policy: :func:`~ray_ladder.simulate.figures.serving_rungs`).
        reference: The best available rung per tick and the blocks of the spread, the
            same for every policy.
        cost_oracle: The oracle's bill (for ``cost_vs_oracle``).
        obtainable_ticks: Ticks each eligible rung is obtainable (standby billing).
        standby_rate: Standby bill per hour of a warm rung while it idles.
        flap_window_s: The window flaps are counted in.
        oracle: The oracle's replay, reused for a ladder policy that is the oracle
            (hysteresis 1, no switching cost).

    Example:
        >>> run_comparison(ctx, [RayNative()], ...)  # doctest: +SKIP
    """
    out = []
    done: dict[Hashable, PolicyReport] = {}  # replay key and standby -> its report
    for policy in policies:
        warm = set(policy.warm_rungs(ctx))
        standby = [standby_rate(n) if n in warm else 0.0 for n in ctx.names]
        key = (policy.replay_key(ctx), tuple(standby))
        same = done.get(key)
        if same is not None:  # replays alike (GKE's two settings on a GPU pod): one run
            rep = Replay(**{**same.replay.__dict__, "policy": policy.label,
                            "params": policy.params()})
            out.append(dataclasses.replace(same, policy=rep.policy, params=dict(rep.params),
                                           replay=rep))
            continue
        is_oracle = (isinstance(policy, LadderPolicy) and policy.hysteresis == 1
                     and policy.fall_s == 0 and policy.start_s == 0 and policy.climb_s == 0)
        if is_oracle and oracle is not None:
            rep = Replay(**{**oracle.__dict__, "policy": policy.label,
                            "params": policy.params()})
        else:
            rep = policy.run(ctx)
            rep.policy = policy.label
        done[key] = summarise(rep, quality=quality, cost_per_hour=cost_per_hour,
                              serves=serves, reference=reference, cost_oracle=cost_oracle,
                              standby_per_hour=standby, obtainable_ticks=obtainable_ticks,
                              flap_window_s=flap_window_s)
        out.append(done[key])
    return out
