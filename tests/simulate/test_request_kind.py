"""One rule for every peer that places pods: a pod's request decides the rungs it can use.

A GPU pod (or Ray replica) cannot schedule on a node without GPUs, whatever the priorities,
NodePools or fallback selectors say: Ray native, GKE (``ScaleUpAnyway``'s default node too)
and Karpenter (consolidation too) never serve it from the CPU rung. LiteLLM routes between
separate deployments, and the ladder runs its own deployment per rung, so both may.
Hand-made traces, exact rows; each GKE and Karpenter row here used to end on ``cpu``.
"""

from __future__ import annotations

import pytest

from ray_ladder.simulate import Trace
from ray_ladder.simulate.baselines import (
    GkeComputeClass,
    Karpenter,
    LiteLLM,
    PolicyContext,
    RayNative,
)
from ray_ladder.simulate.baselines.base import Baseline
from tests.simulate.test_peers_faithful import A, C, H, L, bits, gpu_ladder, run

# h100 lost at 2 and back at 5; a100 and l4 never obtainable.
GPU_DOWN: dict[str, Trace | str] = {H: bits(1, 1, 0, 0, 0, 1, 1, 1), A: "never", L: "never"}
POOLS = {"cpu traced, always obtainable": {C: "always"}, "cpu pool up, no trace": {}}
PENDING = [H, H, None, None, None, H, H, H]

PEERS: list[Baseline] = [
    RayNative(start_s=0),
    GkeComputeClass(climb_s=0, provision_fail_s=0, start_s=0, backoff_initial_s=0),
    GkeComputeClass(climb_s=0, provision_fail_s=0, start_s=0, backoff_initial_s=0,
                    when_unsatisfiable="ScaleUpAnyway"),
    GkeComputeClass(climb_s=0, provision_fail_s=0, start_s=0),  # with node-pool backoff
    Karpenter(start_s=0, retry_s=0, ice_ttl_s=0),
    Karpenter(start_s=0, retry_s=0, ice_ttl_s=0, consolidation=True, consolidate_after_s=0),
]


@pytest.mark.parametrize("pool", list(POOLS), ids=list(POOLS))
@pytest.mark.parametrize("peer", PEERS, ids=[p.label for p in PEERS])
def test_a_gpu_pod_never_lands_on_the_cpu_rung(peer: Baseline, pool: str) -> None:
    # Nothing that can host the GPU pod is obtainable at 2-4: it is pending, then h100.
    p = run(gpu_ladder(), {**GPU_DOWN, **POOLS[pool]}, peer)
    assert p.replay.served_per_tick() == PENDING
    assert p.rung_fraction[C] == 0


def test_karpenter_with_the_default_cache_waits_for_the_gpu_offering() -> None:
    # h100 is cached for 180 s from its interruption at 2 and refused again at 3.8
    # (still down), so it is launched at 5.6 and serves from tick 6; never cpu.
    p = run(gpu_ladder(), {**GPU_DOWN, C: "always"}, Karpenter(start_s=0, retry_s=0))
    assert p.replay.served_per_tick() == [H, H, None, None, None, None, H, H]


def test_a_gpu_pod_falls_to_another_gpu_rung() -> None:
    # l4 is obtainable from 2 on: GKE and Karpenter place the pod there, not on cpu.
    traces: dict[str, Trace | str] = {H: bits(1, 1, 0, 0, 0, 1, 1, 1), A: "never",
                                      L: bits(0, 0, 1, 1, 1, 1, 1, 1), C: "always"}
    gke = run(gpu_ladder(), traces, GkeComputeClass(climb_s=0, provision_fail_s=0,
                                                    start_s=0, backoff_initial_s=0))
    assert gke.replay.served_per_tick() == [H, H, L, L, L, H, H, H]
    karp = run(gpu_ladder(), traces, Karpenter(start_s=0, retry_s=0, ice_ttl_s=0))
    assert karp.replay.served_per_tick() == [H, H, L, L, L, L, L, L]  # no climb by weight


def test_litellm_and_the_ladder_still_fall_to_the_cpu_deployment() -> None:
    # Separate deployments per rung: the CPU one answers while no GPU one is up.
    traces = {**GPU_DOWN, C: "always"}
    lite = run(gpu_ladder(), traces, LiteLLM(start_s=0, fail_s=0, num_retries=0))
    assert lite.replay.served_per_tick() == [H, H, C, C, C, H, H, H]
    lad = run(gpu_ladder(), traces, "ladder:h=1,fall=0,start=0,climb=0")
    assert lad.replay.served_per_tick() == [H, H, C, C, C, H, H, H]


def test_the_rule_follows_the_top_compute_rung() -> None:
    from ray_ladder import Ladder
    from ray_ladder.simulate.align import align

    tl = align({H: bits(1, 1)}, tick_s=100.0, ticks=2)
    assert PolicyContext.build(gpu_ladder(), tl).placeable() == (0, 1, 2)
    cpu_first = Ladder.from_dict({"name": "c", "rungs": [
        {"name": "big", "num_cpus": 8}, {"name": "gpu", "num_gpus": 1},
        {"name": "small", "num_cpus": 1, "quality": 0.5}]})
    assert PolicyContext.build(cpu_first, tl).placeable() == (0, 2)
