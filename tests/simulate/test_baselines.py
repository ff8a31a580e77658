"""Each baseline policy on small hand-made traces, with the served rung written out per tick."""

from __future__ import annotations

import pytest

from ray_ladder import Ladder
from ray_ladder.simulate import Trace, simulate
from ray_ladder.simulate.baselines import (
    GkeComputeClass,
    Karpenter,
    LadderPolicy,
    LiteLLM,
    PolicyContext,
    RayNative,
    parse_policies,
    parse_policy,
)
from ray_ladder.simulate.replay import replay
from ray_ladder.simulate.report import PolicyReport

TICK = 100.0  # every trace below has one value per 100 s tick, 10 ticks
H, A, C = "h100", "a100", "cpu"


def bits(*values: int) -> Trace:
    return Trace.from_steps([(i * TICK, bool(v)) for i, v in enumerate(values)],
                            duration_s=len(values) * TICK, resolution_s=TICK)


def ladder(*names: str) -> Ladder:
    quality = {H: 1.0, A: 0.8, C: 0.5}
    cost = {H: 36.0, A: 18.0, C: 3.6}
    rungs: list[dict[str, object]] = [
        {"name": n, "num_cpus": 1, "quality": quality[n], "cost_per_hour": cost[n],
         "standby_replicas": 0} for n in names]
    rungs.append({"name": "shed", "kind": "shed", "quality": 0.0})
    return Ladder.from_dict({"name": "t", "policy": {"promotion_hysteresis": 1},
                             "rungs": rungs})


def run(lad: Ladder, traces: dict[str, Trace | str], policy: object) -> PolicyReport:
    report = simulate(lad, traces, compare=[policy], tick_s=TICK)  # type: ignore[list-item]
    return report.comparison[0]


# --- ray-native -------------------------------------------------------------------

NATIVE_TRACES: dict[str, Trace | str] = {
    H: bits(1, 1, 0, 0, 1, 1, 1, 1, 1, 1),
    A: bits(1, 1, 1, 1, 1, 1, 1, 1, 1, 0),
}


def test_ray_native_relaunches_the_primary_after_the_launch_timeout() -> None:
    p = run(ladder(H, A), NATIVE_TRACES, RayNative(launch_timeout_s=150, start_s=50))
    # 2: h100 lost; the launch of h100 times out at 3.5 and autoscaler v2 launches h100
    # again (the label-selector score sorts first), never a100, which no node keeps up.
    # h100 is back at 4 and serves at 4.5 (issue 29: it used to move on to a100).
    assert p.replay.served_per_tick() == [H, H, None, None, None, H, H, H, H, H]
    assert p.rung_fraction == pytest.approx({H: 0.75, A: 0.0, "shed": 0.0})
    assert p.unserved_fraction == pytest.approx(0.25)
    assert (p.falls, p.climbs) == (0, 0)  # it never heads anywhere but h100
    assert p.top_fraction == pytest.approx(0.75)


def test_ray_native_default_timeout_waits_for_the_top_rung() -> None:
    p = run(ladder(H, A), NATIVE_TRACES, RayNative(start_s=50))
    # Ray waits up to an hour on the pending h100 launch: it succeeds when h100 returns
    # at 4 (serving at 4.5); a100 is never used.
    assert p.replay.served_per_tick() == [H, H, None, None, None, H, H, H, H, H]
    assert p.rung_fraction[H] == pytest.approx(0.75)
    assert (p.falls, p.climbs) == (0, 0)


def test_ray_native_takes_a_node_that_is_up_and_stays_there() -> None:
    # cpu has no trace: a pool you own, with nodes up. Ray's scheduler places the
    # replica there at once when h100 goes, and it never moves back.
    p = run(ladder(H, A, C), {H: NATIVE_TRACES[H], A: "never"}, RayNative(start_s=50))
    assert p.replay.served_per_tick() == [H, H, None, C, C, C, C, C, C, C]
    assert p.rung_fraction == pytest.approx({H: 0.2, A: 0.0, C: 0.75, "shed": 0.0})
    assert (p.falls, p.climbs) == (1, 0)
    assert p.quality_weighted_availability == pytest.approx(0.2 + 0.75 * 0.5)


# --- GKE ComputeClass -------------------------------------------------------------

GKE_TRACES: dict[str, Trace | str] = {
    H: bits(1, 1, 0, 0, 0, 1, 1, 1, 1, 1),
    A: bits(0, 0, 0, 1, 1, 1, 1, 1, 1, 1),
    C: "always",  # traced: no node of it is up before it is asked for
}


def test_gke_walks_the_priorities_then_migrates_up() -> None:
    p = run(ladder(H, A, C), GKE_TRACES,
            GkeComputeClass(climb_s=150, provision_fail_s=20, start_s=50,
                            backoff_initial_s=0))  # backoff: test_peers_faithful
    # 2: h100 lost; h100 fails (2.2), a100 fails (2.4), cpu serves at 2.9. 3: a100 is
    # obtainable: migration, cpu serving until 4.5. 5: h100: migration until 6.5.
    assert p.replay.served_per_tick() == [H, H, None, C, C, A, A, H, H, H]
    assert p.rung_fraction == pytest.approx({H: 0.55, A: 0.2, C: 0.16, "shed": 0.0})
    assert p.unserved_fraction == pytest.approx(0.09)
    assert (p.falls, p.climbs, p.climbs_abandoned) == (1, 2, 0)


def test_gke_without_active_migration_stays_low() -> None:
    p = run(ladder(H, A, C), GKE_TRACES,
            GkeComputeClass(provision_fail_s=20, start_s=50, active_migration=False))
    assert p.replay.served_per_tick() == [H, H, None, C, C, C, C, C, C, C]
    assert p.climbs == 0


def test_gke_abandons_a_migration_whose_target_is_lost() -> None:
    traces: dict[str, Trace | str] = {H: bits(1, 0, 1, 0, 0, 0, 0, 0, 0, 0), C: "always"}
    p = run(ladder(H, C), traces, GkeComputeClass(climb_s=150, provision_fail_s=0, start_s=0,
                                                    backoff_initial_s=0))
    # 1: onto cpu at once; 2: migration to h100 (ready 3.5), lost at 3: abandoned.
    assert p.replay.served_per_tick() == [H, C, C, C, C, C, C, C, C, C]
    assert (p.falls, p.climbs, p.climbs_abandoned) == (2, 1, 1)


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        # Nothing obtainable at 2-3: pending until h100 returns at 4.
        ("DoNotScaleUp", [H, H, None, None, H, H, H, H, H, H]),
        # GKE's default machine series (the last compute rung) serves although its trace
        # says no, then active migration moves back to h100 at 4.
        ("ScaleUpAnyway", [H, H, C, C, H, H, H, H, H, H]),
    ],
)
def test_gke_when_unsatisfiable_both_ways(when: str, expected: list[str | None]) -> None:
    traces: dict[str, Trace | str] = {H: bits(1, 1, 0, 0, 1, 1, 1, 1, 1, 1),
                                      C: bits(1, 1, 0, 0, 0, 0, 0, 0, 0, 0)}
    p = run(ladder(H, C), traces, GkeComputeClass(climb_s=0, provision_fail_s=0, start_s=0,
                                                  when_unsatisfiable=when,
                                                  backoff_initial_s=0))
    assert p.replay.served_per_tick() == expected


def test_gke_rejects_an_unknown_when_unsatisfiable() -> None:
    with pytest.raises(ValueError, match="DoNotScaleUp"):
        GkeComputeClass(when_unsatisfiable="Sometimes")


# --- Karpenter --------------------------------------------------------------------

KARPENTER_TRACES: dict[str, Trace | str] = {
    H: bits(1, 1, 0, 1, 1, 1, 1, 1, 1, 1),
    A: bits(1, 1, 1, 1, 0, 1, 1, 1, 1, 1),
    C: "always",
}


def test_karpenter_skips_a_cached_offering_and_never_climbs() -> None:
    p = run(ladder(H, A, C), KARPENTER_TRACES, Karpenter(ice_ttl_s=300, retry_s=20, start_s=50))
    # 2: h100 interrupted (cached until 5); a100 serves at 2.5. 4: a100 interrupted;
    # h100 is obtainable again but still cached: cpu serves at 4.5, for good.
    assert p.replay.served_per_tick() == [H, H, None, A, None, C, C, C, C, C]
    assert p.rung_fraction == pytest.approx({H: 0.2, A: 0.15, C: 0.55, "shed": 0.0})
    assert p.unserved_fraction == pytest.approx(0.1)
    assert (p.falls, p.climbs) == (2, 0)


def test_karpenter_without_the_cache_keeps_asking_for_the_top_offering() -> None:
    p = run(ladder(H, A, C), KARPENTER_TRACES, Karpenter(ice_ttl_s=0, retry_s=20, start_s=50))
    # Nothing is ever skipped: the highest weight is refused every 20 s until h100
    # returns at 3 (serving at 3.5); a100 is never launched.
    assert p.replay.served_per_tick() == [H, H, None, None, H, H, H, H, H, H]
    assert (p.falls, p.climbs) == (0, 0)


def test_karpenter_refused_launch_waits_and_tries_the_next_offering() -> None:
    traces: dict[str, Trace | str] = {H: bits(1, 0, 0, 0, 0, 0, 0, 0, 0, 0),
                                      A: bits(1, 0, 0, 1, 1, 1, 1, 1, 1, 1)}
    p = run(ladder(H, A), traces, Karpenter(ice_ttl_s=100, retry_s=50, start_s=0))
    # 1: h100 cached by the interruption, a100 refused (cached until 2); 1.5: all cached,
    # wait; 2: h100 refused (until 3); 2.5: a100 refused (until 3.5); 3: h100 refused
    # again; 3.5: a100, obtainable since 3, serves.
    assert p.replay.served_per_tick() == [H, None, None, None, A, A, A, A, A, A]
    assert p.rung_fraction[A] == pytest.approx(0.65)
    assert (p.falls, p.climbs) == (1, 0)  # refused launches start nothing: not moves


def test_karpenter_price_consolidation_moves_to_the_cheapest_offering() -> None:
    p = run(ladder(H, A, C), KARPENTER_TRACES,
            Karpenter(ice_ttl_s=300, retry_s=20, start_s=50, consolidation=True,
                      consolidate_after_s=0))
    # Consolidation is by price, not weight (issue 29): at 0 the h100 node (36/h) can be
    # replaced by a single cheaper one, cpu (3.6/h, obtainable, same kind of request),
    # serving at 0.5; nothing is cheaper than cpu, so it stays, and never climbs.
    assert p.replay.served_per_tick() == [H, C, C, C, C, C, C, C, C, C]
    assert (p.falls, p.climbs) == (1, 0)


# --- LiteLLM ----------------------------------------------------------------------

def test_litellm_retries_at_once_and_comes_back_at_a_cooldown_boundary() -> None:
    traces: dict[str, Trace | str] = {H: bits(1, 1, 0, 0, 1, 1, 0, 1, 1, 1),
                                      A: "always", C: "always"}
    p = run(ladder(H, A, C), traces, LiteLLM(cooldown_s=30, start_s=50, fail_s=0,
                                             cooldown_dead=True))
    # 2: h100 fails, the retry goes to a100 at once. 4: h100 obtainable, its endpoint
    # answers at 4.5; retries every 30 s since 2 put it back at 4.7. 6: fails again;
    # 7: up at 7.5, which is a retry boundary (6 + 5 x 0.3).
    assert p.replay.served_per_tick() == [H, H, A, A, A, H, A, A, H, H]
    assert p.rung_fraction == pytest.approx({H: 0.58, A: 0.42, C: 0.0, "shed": 0.0})
    assert p.unserved_fraction == 0
    assert (p.falls, p.climbs) == (2, 2)
    # A climb at 4.7 followed by a fall at 6 is a flap within 2 ticks, not within one
    # (the default window: the ladder's hysteresis, 1 tick).
    assert p.flaps == 0 and p.flap_window_s == 100
    assert simulate(ladder(H, A, C), traces, compare=[LiteLLM(30, 50, 0, True)], tick_s=TICK,
                    flap_window_s=200).comparison[0].flaps == 1


def test_litellm_bills_every_deployment_as_standby() -> None:
    traces: dict[str, Trace | str] = {H: bits(1, 1, 1, 1, 1, 0, 0, 0, 0, 0)}
    p = run(ladder(H, A), traces, LiteLLM(cooldown_s=5, start_s=0, fail_s=0, num_retries=0))
    # h100 serves 500 s (36/h: 5.0), a100 500 s (18/h: 2.5); a100 idles running for
    # the other 500 s (standby 2.5). Per served hour: (7.5 + 2.5) / (1000 / 3600).
    assert p.cost == pytest.approx(7.5)
    assert p.cost_standby == pytest.approx(2.5)
    assert p.cost_per_served_hour == pytest.approx(36.0)


# --- the ladder -------------------------------------------------------------------

def test_ladder_policy_is_the_selector_replay_with_measured_costs() -> None:
    lad = ladder(H, A, C)
    r = simulate(lad, NATIVE_TRACES, compare=["ladder"], tick_s=TICK)
    ctx = PolicyContext.build(lad, r.timeline)
    direct = replay(lad, ctx.timeline, promotion_delay_s=10.3, demotion_delay_s=10.33,
                    fall_delay_s=0.33)
    assert r.comparison[0].replay.served == direct.served
    assert r.comparison[0].replay.target == direct.target


def test_ladder_at_hysteresis_one_without_cost_is_the_oracle() -> None:
    r = simulate(ladder(H, A, C), NATIVE_TRACES, tick_s=TICK,
                 compare=[LadderPolicy(hysteresis=1, fall_s=0, start_s=0, climb_s=0)])
    assert r.comparison[0].replay.served == r.oracle.replay.served
    assert r.comparison[0].quality_weighted_availability == \
        r.oracle.quality_weighted_availability


def test_warm_fall_delay_serves_nothing_briefly() -> None:
    p = run(ladder(H, A, C), {H: NATIVE_TRACES[H]},
            LadderPolicy(hysteresis=1, fall_s=20, start_s=0, climb_s=0))
    assert p.unserved_fraction == pytest.approx(0.02)  # the fall at 2 onto cold a100


# --- specs ------------------------------------------------------------------------

def test_policy_specs_parse_and_name_their_keys() -> None:
    assert parse_policy("ray-native:launch_timeout=5m").launch_timeout_s == 300  # type: ignore[attr-defined]
    assert parse_policy("ladder:h=2") == LadderPolicy(hysteresis=2)
    assert parse_policy("gke-computeclass:active_migration=off") == GkeComputeClass(
        active_migration=False)
    assert [p.label for p in parse_policies("all")] == [
        "ladder", "ray-native", "gke-computeclass",
        "gke-computeclass (when_unsatisfiable=ScaleUpAnyway)", "karpenter", "litellm"]
    with pytest.raises(ValueError, match="unknown policy 'slurm'"):
        parse_policy("slurm")
    with pytest.raises(ValueError, match="keys: cooldown, start"):
        parse_policy("litellm:ttl=1")
    with pytest.raises(ValueError, match="on or off"):
        parse_policy("karpenter:consolidation=maybe")
    with pytest.raises(ValueError, match="retry_s must be >= 0"):
        Karpenter(retry_s=-1)


def test_comparing_skips_the_sweep_unless_asked() -> None:
    r = simulate(ladder(H, A), NATIVE_TRACES, compare="ray-native,litellm", tick_s=TICK)
    assert r.policies == [] and [p.policy for p in r.comparison] == ["ray-native", "litellm"]
    assert r.compared("litellm").policy == "litellm"
    r2 = simulate(ladder(H, A), NATIVE_TRACES, compare="litellm", hysteresis=[1, 2],
                  tick_s=TICK)
    assert [p.hysteresis for p in r2.policies] == [1, 2]
    keys = {"policy", "quality_weighted_availability", "top_fraction", "unserved_fraction",
            "climbs_per_day", "falls_per_day", "flaps", "cost_per_served_hour"}
    d = r2.to_dict()
    assert all(keys <= set(p) for p in [*d["policies"], *d["comparison"], d["oracle"]])


def test_gke_scale_up_anyway_cannot_host_an_accelerator_pod() -> None:
    lad = Ladder.from_dict({"name": "g", "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}},
        {"name": "l4", "resources": {"ladder/l4": 1}, "quality": 0.8}]})
    traces: dict[str, Trace | str] = {"h100": bits(1, 1, 0, 0, 1, 1, 1, 1, 1, 1),
                                      "l4": bits(1, 1, 0, 0, 0, 0, 0, 0, 0, 0)}
    p = run(lad, traces, GkeComputeClass(climb_s=0, provision_fail_s=0, start_s=0,
                                         when_unsatisfiable="ScaleUpAnyway",
                                         backoff_initial_s=0))
    # The default machine series has no GPU: the pod stays pending, as with DoNotScaleUp.
    assert p.replay.served_per_tick() == [H, H, None, None, H, H, H, H, H, H]


def test_ladder_policy_warm_options() -> None:
    traces: dict[str, Trace | str] = {H: NATIVE_TRACES[H], A: "always"}
    cold = run(ladder(H, A, C), traces, LadderPolicy(hysteresis=1, fall_s=0, start_s=50,
                                                     climb_s=0, warm="none"))
    warm = run(ladder(H, A, C), traces, LadderPolicy(hysteresis=1, fall_s=0, start_s=50,
                                                     climb_s=0, warm="a100"))
    assert cold.unserved_fraction == pytest.approx(0.05)  # the fall at 2 onto cold a100
    assert warm.unserved_fraction == 0
    # a100 serves 2.0-4.5 (the climb back waits 50 s) and idles warm 750 s at 18/h.
    assert warm.cost_standby == pytest.approx(3.75)
    ctx = PolicyContext.build(ladder(H, A, C),
                              simulate(ladder(H, A, C), traces, tick_s=TICK).timeline)
    assert parse_policy("ladder:warm=all").warm_rungs(ctx) == [H, A, C]
    with pytest.raises(ValueError, match="not compute rungs"):
        run(ladder(H, A), traces, LadderPolicy(warm="shed"))
