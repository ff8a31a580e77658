"""One definition of served time and of cost per served hour, for every policy.

A shed hour ("try later") is not a served hour, for the ladder and the oracle as for a
baseline with nothing placed. Hand-made traces of four 100 s ticks, exact rows.
"""

from __future__ import annotations

import pytest

from ray_ladder import Ladder
from ray_ladder.simulate import Trace, simulate
from ray_ladder.simulate.baselines import (
    GkeComputeClass,
    Karpenter,
    LadderPolicy,
    LiteLLM,
    RayNative,
)
from ray_ladder.simulate.figures import cost_per_served_hour, served_hours, serving_rungs
from ray_ladder.simulate.report import PolicyReport

TICK = 100.0  # 100 s ticks: a tick on h100 (36/h) costs 1.0, on a100 (18/h) 0.5
H, A, S = "h100", "a100", "shed"


def bits(*values: int) -> Trace:
    return Trace.from_steps([(i * TICK, bool(v)) for i, v in enumerate(values)],
                            duration_s=len(values) * TICK, resolution_s=TICK)


LADDER = Ladder.from_dict({"name": "t", "policy": {"promotion_hysteresis": 1}, "rungs": [
    {"name": H, "num_cpus": 1, "quality": 1.0, "cost_per_hour": 36.0, "standby_replicas": 0},
    {"name": A, "num_cpus": 1, "quality": 0.8, "cost_per_hour": 18.0, "standby_replicas": 0},
    {"name": S, "kind": "shed", "quality": 0.0}]})
# h100 is lost at 1 and back at 3; a100 holds 0-1; nothing at all at 2.
TRACES: dict[str, Trace | str] = {H: bits(1, 0, 0, 1), A: bits(1, 1, 0, 0)}
POLICIES = [LadderPolicy(hysteresis=2, fall_s=0, start_s=0, climb_s=0), LiteLLM(start_s=0),
            RayNative(launch_timeout_s=50, start_s=0), Karpenter(start_s=0),
            GkeComputeClass(start_s=0, provision_fail_s=0, climb_s=0, backoff_initial_s=0)]


def row(p: PolicyReport) -> tuple[list[str | None], float, float, float, float | None]:
    """Rung per tick, seconds served, cost, standby, cost per served hour."""
    cph = None if p.cost_per_served_hour is None else round(p.cost_per_served_hour, 9)
    return (p.replay.served_per_tick(), round(p.served_hours * 3600, 9), round(p.cost, 9),
            round(p.cost_standby, 9), cph)


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    return simulate(LADDER, TRACES, hysteresis=[2], tick_s=TICK, compare=POLICIES)


def test_the_oracle_does_not_count_its_shed_tick(report) -> None:  # type: ignore[no-untyped-def]
    # h100, a100, shed, h100: 300 s served for 2.0 + 0.5; per hour 2.5 / (300/3600) = 30
    # (counting the shed tick as served it printed 22.5).
    assert row(report.oracle) == ([H, A, S, H], 300.0, 2.5, 0.0, 30.0)
    assert (report.oracle.shed_fraction, report.oracle.unserved_fraction) == (0.25, 0.0)


def test_the_ladder_sweep_does_not_count_its_shed_ticks(report) -> None:  # type: ignore[no-untyped-def]
    # Hysteresis 2: h100 seen once at 3 is not enough to climb, so shed at 2 and 3:
    # 200 s served for 1.0 + 0.5, i.e. 27 per served hour (was 13.5 over 400 s).
    p = report.policy(2)
    assert row(p) == ([H, A, S, S], 200.0, 1.5, 0.0, 27.0)
    assert (p.shed_fraction, p.unserved_fraction) == (0.5, 0.0)


def test_every_compared_policy_on_the_same_definition(report) -> None:  # type: ignore[no-untyped-def]
    got = {p.policy: row(p) for p in report.comparison}
    assert got == {
        # The compared ladder with free switching is the sweep's row.
        "ladder (hysteresis=2, fall=0, start=0, climb=0)": ([H, A, S, S], 200.0, 1.5, 0.0,
                                                             27.0),
        # Every deployment runs while obtainable: a100 idles the tick h100 serves (0.5
        # standby). At 1 requests first fail on the dead h100: 3 tries of 5 s and 4.625 s
        # of backoff (LiteLLM retries it twice and never cools a dead one-deployment group
        # down): 280.375 s served, (2.5 + 0.5) / 280.375 s.
        "litellm (start=0)": ([H, None, None, H], 280.375, 2.5, 0.5, 38.519839501),
        # 1: the launch of h100 is relaunched after its 50 s timeout, never a100 (issue
        # 29: autoscaler v2 sorts by the label-selector score first): h100 at 0 and 3.
        "ray-native (launch_timeout=50, start=0)": ([H, None, None, H], 200.0, 2.0, 0.0,
                                                    36.0),
        # 2: both offerings are in the unavailable-offerings cache at 3: nothing.
        "karpenter (start=0)": ([H, A, None, None], 200.0, 1.5, 0.0, 27.0),
        "gke-computeclass (climb=0, provision_fail=0, start=0, backoff_initial=0)": (
            [H, A, None, H], 300.0,
                                                                  2.5, 0.0, 30.0),
    }


def test_a_shed_tick_and_an_empty_tick_are_alike(report) -> None:  # type: ignore[no-untyped-def]
    # The ladder sheds at 2, GKE has nothing: the same served hours and the same bill.
    oracle, gke = report.oracle, report.comparison[-1]
    assert (oracle.served_hours, oracle.cost) == (gke.served_hours, gke.cost)
    assert oracle.cost_per_served_hour == gke.cost_per_served_hour


def test_the_one_definition() -> None:
    assert serving_rungs(LADDER, [H, A, S]) == [True, True, False]
    cache = Ladder.from_dict({"name": "c", "rungs": [
        {"name": "cpu", "num_cpus": 1}, {"name": "cache", "kind": "cache", "quality": 0.3},
        {"name": "shed", "kind": "shed"}]})
    assert serving_rungs(cache, ["cpu", "cache", "shed"]) == [True, True, False]
    assert served_hours([3.0, 1.0, 2.0], [True, True, False], tick_s=900) == 1.0
    assert cost_per_served_hour(4.0, 0.5) == 8.0
    assert cost_per_served_hour(4.0, 0.0) is None


def test_only_shed_is_no_service_at_all() -> None:
    r = simulate(LADDER, {H: "never", A: "never"}, hysteresis=[1], tick_s=TICK,
                 duration_s=400, compare=[LiteLLM(start_s=0)])
    assert r.oracle.shed_fraction == 1.0 and r.oracle.served_hours == 0
    assert r.oracle.cost_per_served_hour is None
    assert r.compared("litellm (start=0)").cost_per_served_hour is None
