"""Issue 29, item 2: the peers as the real systems behave, on hand-made traces (exact rows).

Each test fails on the model before the change: Ray native moving on to another rung or onto
the CPU pool, GKE retrying a failed node pool at once, Karpenter consolidating by weight,
LiteLLM's fall costing nothing, and LiteLLM rows for a training gang.
"""

from __future__ import annotations

from ray_ladder import Ladder
from ray_ladder.simulate import Trace, simulate
from ray_ladder.simulate.baselines import GkeComputeClass, Karpenter, LiteLLM, RayNative
from ray_ladder.simulate.report import PolicyReport
from tests.simulate.hand import TICK, A, C, H, L, bits


def gpu_ladder(*, train: bool = False) -> Ladder:
    """h100 (12/h), a100 (4/h), l4 (1/h) ask for accelerators; cpu (0.1/h) for none."""
    rungs: list[dict[str, object]] = [
        {"name": H, "resources": {"ladder/h100": 1}, "cost_per_hour": 12.0},
        {"name": A, "resources": {"ladder/a100": 1}, "cost_per_hour": 4.0},
        {"name": L, "resources": {"ladder/l4": 1}, "quality": 0.8, "cost_per_hour": 1.0},
        {"name": C, "num_cpus": 1, "quality": 0.5, "cost_per_hour": 0.1},
        {"name": "shed", "kind": "shed", "quality": 0.0}]
    if train:
        rungs[0]["train"] = {"workers": 2}
    return Ladder.from_dict({"name": "g", "policy": {"promotion_hysteresis": 1},
                             "rungs": rungs})


def run(lad: Ladder, traces: dict[str, Trace | str], policy: object) -> PolicyReport:
    return simulate(lad, traces, compare=[policy], tick_s=TICK).comparison[0]  # type: ignore[list-item]


def test_ray_native_never_puts_a_gpu_replica_on_the_cpu_pool() -> None:
    # h100 lost at 2 and back at 6; a100 and l4 never obtainable; the CPU pool is up
    # (no trace). The old model put the replica on cpu at 2 and left it there.
    traces: dict[str, Trace | str] = {H: bits(1, 1, 0, 0, 0, 0, 1, 1, 1, 1),
                                      A: "never", L: "never"}
    p = run(gpu_ladder(), traces, RayNative(start_s=0))
    assert p.replay.served_per_tick() == [H, H, None, None, None, None, H, H, H, H]
    assert p.rung_fraction[C] == 0


def test_ray_native_keeps_relaunching_the_primary_rather_than_moving_on() -> None:
    # a100 is obtainable all along, but no node of it is up: autoscaler v2 launches the
    # primary's type every round (label-selector score first), whatever the timeout.
    traces: dict[str, Trace | str] = {H: bits(1, 0, 0, 0, 0, 1, 1, 1, 1, 1),
                                      A: "always", L: "never", C: "never"}
    p = run(gpu_ladder(), traces, RayNative(launch_timeout_s=100, start_s=0))
    assert p.replay.served_per_tick() == [H, None, None, None, None, H, H, H, H, H]


def test_gke_backs_a_failed_node_pool_off() -> None:
    # h100 lost at 1 and back at 2; l4 is traced and always there (cpu too, but it cannot
    # host the GPU pod). The walk at 1 fails on h100 (provision_fail 0): it is backed off
    # for 300 s (3 ticks), so the pod goes to l4 and active migration may only move it
    # back at 4, not at 2.
    traces: dict[str, Trace | str] = {H: bits(1, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                      A: "never", L: "always", C: "always"}
    p = run(gpu_ladder(), traces, GkeComputeClass(climb_s=0, provision_fail_s=0, start_s=0))
    assert p.replay.served_per_tick() == [H, L, L, L, H, H, H, H, H, H]
    no_backoff = GkeComputeClass(climb_s=0, provision_fail_s=0, start_s=0,
                                 backoff_initial_s=0)
    assert run(gpu_ladder(), traces, no_backoff).replay.served_per_tick() == [
        H, L, H, H, H, H, H, H, H, H]


def test_gke_backoff_doubles_after_each_failure() -> None:
    # Nothing else to run on: h100 (and cpu) fail at 1, backed off for 3 ticks; the walk
    # at 4 fails again: backed off for 6 ticks (4-10), so h100, back at 5, serves at 10.
    traces: dict[str, Trace | str] = {H: bits(1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1),
                                      A: "never", L: "never", C: "never"}
    p = run(gpu_ladder(), traces, GkeComputeClass(climb_s=0, provision_fail_s=0, start_s=0))
    assert p.replay.served_per_tick() == [H] + [None] * 9 + [H, H]


def test_gke_scale_up_anyway_differs_where_the_default_node_can_host_the_pod() -> None:
    cpu = Ladder.from_dict({"name": "c", "rungs": [
        {"name": "big", "num_cpus": 8}, {"name": "small", "num_cpus": 1, "quality": 0.5}]})
    traces: dict[str, Trace | str] = {"big": bits(1, 0, 0, 1), "small": bits(1, 0, 0, 0)}
    rows = [run(cpu, traces, GkeComputeClass(climb_s=0, provision_fail_s=0, start_s=0,
                                             when_unsatisfiable=w)).replay.served_per_tick()
            for w in ("DoNotScaleUp", "ScaleUpAnyway")]
    assert rows[0] == ["big", None, None, None]  # big is backed off at 3 (until 4)
    assert rows[1] == ["big", "small", "small", "small"]


def test_karpenter_consolidates_by_price_back_to_the_cheaper_offering() -> None:
    # The spot rung is cheaper and better (on top); on-demand is the fallback. Spot is
    # lost at 1 and cached for 180 s; back at 3 and out of the cache: the on-demand node
    # "can be replaced by a single lower price replacement node" (aws/karpenter-provider-
    # aws#7490: go back to spot). Without consolidation it stays on on-demand.
    lad = Ladder.from_dict({"name": "s", "rungs": [
        {"name": "spot", "num_cpus": 1, "cost_per_hour": 1.0},
        {"name": "od", "num_cpus": 1, "cost_per_hour": 3.0}]})
    traces: dict[str, Trace | str] = {"spot": bits(1, 0, 0, 1, 1, 1), "od": "always"}
    on = run(lad, traces, Karpenter(start_s=0, retry_s=0, consolidation=True,
                                    consolidate_after_s=0))
    off = run(lad, traces, Karpenter(start_s=0, retry_s=0))
    assert on.replay.served_per_tick() == ["spot", "od", "od", "spot", "spot", "spot"]
    assert off.replay.served_per_tick() == ["spot", "od", "od", "od", "od", "od"]


def test_karpenter_price_consolidation_leaves_a_dearer_better_rung() -> None:
    # On h100 with a100 (cheaper, same quality) and l4 (cheapest GPU) obtainable, it moves
    # to l4; never to cpu (no accelerator: the pod's request does not fit).
    traces: dict[str, Trace | str] = {H: bits(1, 1, 1, 1), A: "always", L: "always"}
    p = run(gpu_ladder(), traces, Karpenter(start_s=0, consolidation=True,
                                            consolidate_after_s=0))
    assert set(p.replay.served_per_tick()) == {L}


def test_litellm_pays_the_failed_try_on_the_dead_deployment() -> None:
    # h100 lost at 2: requests fail on it for fail_s = 50 s before a100 answers; with no
    # cooldown for a dead one-deployment group, traffic is back on h100 as soon as it
    # answers (3, start 0), not at a cooldown boundary.
    traces: dict[str, Trace | str] = {H: bits(1, 1, 0, 1, 1, 1), A: "always"}
    lad = Ladder.from_dict({"name": "l", "rungs": [
        {"name": H, "num_cpus": 1}, {"name": A, "num_cpus": 1, "quality": 0.8}]})
    p = run(lad, traces, LiteLLM(start_s=0, fail_s=50, num_retries=0))
    assert p.replay.served == [(0.0, 0), (2.0, -1), (2.5, 1), (3.0, 0)]
    assert p.unserved_fraction == 50 / 600
    # With the Router's default 2 retries the first request tries it 3 times, sleeping
    # 0.5, 1 and 2 s (plus 0.375 s of jitter on average) after the tries: 34.625 s.
    p = run(lad, traces, LiteLLM(start_s=0, fail_s=10))
    assert p.replay.served == [(0.0, 0), (2.0, -1), (2.34625, 1), (3.0, 0)]
    old = run(lad, traces, LiteLLM(start_s=0, fail_s=0, cooldown_dead=True, cooldown_s=70))
    assert old.replay.served == [(0.0, 0), (2.0, -1), (2.0, 1), (3.4, 0)]


def test_litellm_gets_no_row_for_a_training_gang() -> None:
    traces: dict[str, Trace | str] = {H: bits(1, 0, 1, 1)}
    r = simulate(gpu_ladder(train=True), traces, compare=["litellm", "karpenter"],
                 tick_s=TICK)
    assert [p.policy for p in r.comparison] == ["karpenter"]
    assert [(n.kind, n.policy) for n in r.notes] == [("cannot_run", "litellm")]
    assert r.notes[0].text.startswith("no row for litellm: h100 train")
