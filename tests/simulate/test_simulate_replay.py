"""Exact replays of small hand-made traces: the rung at every tick, written out."""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_ladder import Ladder
from ray_ladder.simulate import SimulationReport, simulate

DATA = Path(__file__).parent.parent / "data" / "traces"
# Per 100 s tick:  0  1  2  3  4  5  6  7  8  9
# h100.json        1  1  0  0  1  0  1  1  1  1
# a100.csv         1  1  0  0  1  1  1  1  0  0   (200 s gap: aligned onto 100 s ticks)
TRACES = {"h100": str(DATA / "h100.json"), "a100": str(DATA / "a100.csv")}
H, A, C, S = "h100", "a100", "cpu", "shed"


def ladder(**policy: object) -> Ladder:
    return Ladder.from_dict({
        "name": "t",
        "policy": {"promotion_hysteresis": 1, **policy},
        "rungs": [
            {"name": "h100", "resources": {"ladder/h100": 1}, "quality": 1.0,
             "cost_per_hour": 36.0},
            {"name": "a100", "resources": {"ladder/a100": 1}, "quality": 0.8,
             "cost_per_hour": 18.0},
            {"name": "cpu", "num_cpus": 1, "quality": 0.5, "cost_per_hour": 3.6},
            {"name": "shed", "kind": "shed", "quality": 0.0},
        ],
    })


def run(**kw: object) -> SimulationReport:
    return simulate(ladder(max_degraded_seconds=150), TRACES, **kw)  # type: ignore[arg-type]


def test_default_tick_is_the_finest_gap_and_the_horizon_the_shortest_trace() -> None:
    r = run()
    assert (r.tick_s, r.ticks, r.duration_s) == (100, 10, 1000)
    assert [x["obtainable_fraction"] for x in r.rungs] == [0.7, 0.6, 1.0, 1.0]


@pytest.mark.parametrize(
    ("h", "expected"),
    [
        (1, [H, H, C, C, H, A, H, H, H, H]),
        # h=2: at 4 both are new (streak 1); a100 reaches 2 at 5, h100 at 7.
        (2, [H, H, C, C, C, A, A, H, H, H]),
        # h=3: a100 reaches 3 at 6, h100 at 8.
        (3, [H, H, C, C, C, C, A, A, H, H]),
    ],
)
def test_rung_at_every_tick(h: int, expected: list[str]) -> None:
    p = run(hysteresis=h).policies[0]
    assert p.replay.served_per_tick() == expected


def test_hysteresis_one_figures() -> None:
    p = run(hysteresis=1).policies[0]
    assert p.rung_fraction == {H: 0.7, A: 0.1, C: 0.2, S: 0.0}
    assert p.unserved_fraction == 0
    assert (p.falls, p.climbs, p.climbs_abandoned) == (2, 2, 0)
    assert p.degraded_episodes == 2
    assert (p.degraded_s_total, p.degraded_longest_s, p.degraded_p95_episode_s) == (300, 200, 200)
    assert p.alerts == 0  # the longest episode is observed at 100 s, not > 150 s
    assert p.quality_weighted_availability == pytest.approx((7 + 0.8 + 2 * 0.5) / 10)
    # cost: h100 700 s at 36/h, a100 100 s at 18/h, cpu 200 s at 3.6/h
    assert p.cost == pytest.approx(7.0 + 0.5 + 0.2)
    assert p.cost_always_top == pytest.approx(10.0)
    assert p.cost_oracle == p.cost and p.cost_vs_oracle == pytest.approx(1.0)


def test_hysteresis_three_figures_and_alert() -> None:
    p = run(hysteresis=3).policies[0]
    assert p.rung_fraction == {H: 0.4, A: 0.2, C: 0.4, S: 0.0}
    assert (p.falls, p.climbs) == (1, 2)  # cpu -> a100 -> h100
    assert (p.degraded_episodes, p.degraded_s_total) == (1, 600)
    assert p.alerts == 1  # one episode, alerted once at 200 s > 150 s
    assert p.cost_oracle == pytest.approx(7.7)


def test_sweep_keeps_the_order_asked_and_shares_one_oracle() -> None:
    r = run(hysteresis=[3, 1, 2])
    assert [p.hysteresis for p in r.policies] == [3, 1, 2]
    assert [p.hysteresis_s for p in r.policies] == [300, 100, 200]
    assert r.oracle.hysteresis == 1 and r.oracle.cost == pytest.approx(7.7)
    assert r.policy(1).replay is r.oracle.replay
    assert {p.cost_oracle for p in r.policies} == {r.oracle.cost}


def test_promotion_delay_keeps_the_old_rung_serving_and_abandons_lost_climbs() -> None:
    p = run(hysteresis=1, promotion_delay_s=150).policies[0]
    # 4: climb to h100 starts (ready 5.5); 5: h100 lost, the selector falls to a100, which
    # is a climb from cpu (ready 6.5); 6: h100 again (ready 7.5); cpu serves meanwhile.
    assert p.replay.served_per_tick() == [H, H, C, C, C, C, C, C, H, H]
    assert p.rung_fraction[H] == pytest.approx(0.45)  # 0-200 s and 750-1000 s
    assert p.rung_fraction[C] == pytest.approx(0.55)
    assert (p.falls, p.climbs, p.climbs_abandoned) == (2, 2, 2)
    assert (p.degraded_episodes, p.degraded_s_total) == (1, pytest.approx(550))
    # Starting replicas are billed: h100 100 s, a100 100 s, h100 150 s.
    assert p.cost_starting == pytest.approx(1.0 + 0.5 + 1.5)
    assert p.cost == pytest.approx(0.45 * 10 + 0.55 * 1.0 + 3.0)


def test_cold_demotion_serves_nothing_until_the_rung_is_up() -> None:
    p = run(hysteresis=1, demotion_delay_s=150, warm=[]).policies[0]
    # 2: fall to a cold cpu (up at 3.5); 5: fall to a cold a100 (up at 6.5), abandoned at
    # 6 when h100 returns (promotion delay 0).
    assert p.replay.served_per_tick() == [H, H, None, None, H, None, H, H, H, H]
    assert p.rung_fraction == pytest.approx({H: 0.7, A: 0.0, C: 0.05, S: 0.0})
    assert p.unserved_fraction == pytest.approx(0.25)
    assert sum(p.rung_fraction.values()) + p.unserved_fraction == pytest.approx(1)
    assert p.climbs_abandoned == 0  # an abandoned cold start is not a climb
    assert p.quality_weighted_availability == pytest.approx((7 + 0.05 * 10 * 0.5) / 10)
    assert p.cost_starting == pytest.approx(0.15 + 0.5)  # cpu 150 s, a100 100 s


def test_warm_rungs_fall_instantly() -> None:
    cold = run(hysteresis=1, demotion_delay_s=150, warm=["a100", "cpu"]).policies[0]
    assert cold.replay.served_per_tick() == [H, H, C, C, H, A, H, H, H, H]
    # Standby is billed apart: a100 idles warm 500 s (at 18/h), cpu 800 s (at 3.6/h).
    assert cold.cost_standby == pytest.approx(2.5 + 0.8)
    assert cold.cost_standby_by_rung == pytest.approx({H: 0, A: 2.5, C: 0.8, S: 0})
    assert cold.cost == pytest.approx(7.7)
    default = run()
    assert default.warm == ["h100"]  # default: standby_replicas, 1 on the top rung
    assert default.policies[0].cost_standby == 0  # h100 serves whenever it is obtainable
    assert run(hysteresis=3).policies[0].cost_standby == pytest.approx(0.3 * 10)


def test_old_rung_lost_while_the_new_one_starts() -> None:
    lad = Ladder.from_dict({"name": "t", "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}},
        {"name": "a100", "resources": {"ladder/a100": 1}},
        {"name": "cpu", "num_cpus": 1},
    ]})
    # tick:     0  1  2  3  4        (100 s ticks)
    # h100:     0  1  1  1  1
    # a100:     1  1  0  0  0
    r = simulate(lad, {"h100": "outage:0-100", "a100": "outage:200-500"}, duration_s=500,
                 tick_s=100, promotion_delay_s=250)
    p = r.policies[0]
    # 1: climb to h100 (up at 3.5); 2: a100 gone, nothing left serving until 3.5.
    assert p.replay.served_per_tick() == ["a100", "a100", None, None, "h100"]
    assert p.rung_fraction["h100"] == pytest.approx(0.3)
    assert p.unserved_fraction == pytest.approx(0.3)


def test_exhausted_ladder_serves_nothing_and_climbs_back_with_the_delay() -> None:
    lad = Ladder.from_dict({"name": "t", "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}},
        {"name": "cpu", "num_cpus": 1},
    ]})
    r = simulate(lad, {"h100": "outage:100-300", "cpu": "outage:100-200"}, duration_s=500,
                 tick_s=100, promotion_delay_s=50)
    p = r.policies[0]
    # 1: nothing obtainable; 2: cpu returns (a climb from nothing: up at 2.5);
    # 3: h100 returns (up at 3.5), cpu serving meanwhile.
    assert p.replay.served_per_tick() == ["h100", None, None, "cpu", "h100"]
    assert (p.falls, p.climbs) == (1, 2)
    assert p.unserved_fraction == pytest.approx(0.3)  # 100-250 s
    assert p.degraded_episodes == 1 and p.degraded_s_total == pytest.approx(250)


def test_a_rung_without_a_trace_is_always_obtainable() -> None:
    r = simulate(ladder(), {"a100": "never"}, duration_s=300, tick_s=100)
    assert r.policies[0].replay.served_per_tick() == [H, H, H]
    assert r.rungs[0]["trace"] == "always (no trace)"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"traces": {"tpu": "always"}}, "unknown rung 'tpu'"),
        ({"traces": {"shed": "never"}}, "shed rung, always obtainable"),
        ({"traces": {"h100": "always"}}, "give duration_s"),
        ({"traces": TRACES, "duration_s": 2000}, "covers 1000 s, less than the 2000 s"),
        ({"traces": TRACES, "hysteresis": [1, 0]}, "integers >= 1"),
        ({"traces": TRACES, "promotion_delay_s": -1}, "promotion_delay_s must be >= 0"),
        ({"traces": TRACES, "warm": ["shed"]}, "not a compute rung"),
        ({"traces": TRACES, "tick_s": 0}, "tick_s must be > 0"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        simulate(ladder(), **kwargs)  # type: ignore[arg-type]


def test_report_json_shape() -> None:
    d = run(hysteresis=[1, 2]).to_dict()
    assert d["ladder"] == "t" and d["ticks"] == 10 and d["tick_s"] == 100
    keys = {"hysteresis", "promotion_delay_s", "demotion_delay_s", "rung_fraction", "falls",
            "climbs", "degraded_s_total", "degraded_longest_s", "degraded_p95_episode_s",
            "alerts", "quality_weighted_availability", "cost", "cost_always_top",
            "cost_oracle"}
    assert all(keys <= set(p) for p in d["policies"])
    assert "replay" not in d["policies"][0]


def test_constraints_replay_the_ladder_a_constrained_request_sees() -> None:
    from ray_ladder import Constraints

    r = simulate(ladder(), TRACES, constraints=Constraints(max_cost_per_hour=20.0))
    p = r.policies[0]
    assert [x["name"] for x in r.rungs] == [A, C, S]  # h100 (36/h) is never eligible
    assert p.replay.served_per_tick() == [A, A, C, C, A, A, A, A, C, C]
    assert p.degraded_s_total == 400  # degraded now means "below a100"
    assert p.cost_always_top == pytest.approx(5.0)  # a100 for 1000 s at 18/h
