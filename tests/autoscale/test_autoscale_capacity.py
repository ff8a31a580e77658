"""The planner (pure) with queued capacity (flex-start) and capacity blocks."""

from __future__ import annotations

from ray_ladder import Ladder
from ray_ladder.autoscale.plan import AutoscaleOptions, AutoscalePlanner, LaunchFailure

QUEUED = Ladder.from_yaml("""
name: queued
policy: {promotion_hysteresis: 2}
rungs:
  - {name: h100-flex, resources: {ladder/h100-flex: 1},
     capacity: {type: flex-start, max_wait_s: 100}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9}
  - {name: cpu, resources: {ladder/cpu: 1}, quality: 0.5}
""")
# A block open from t=1000 to 2000, left 100 s before its end: usable in [1000, 1900).
BLOCK = Ladder.from_yaml("""
name: block
policy: {promotion_hysteresis: 2}
rungs:
  - {name: h100-block, resources: {ladder/h100-block: 1},
     capacity: {type: capacity-block, reservation: cr-1, leave_before_s: 100,
                start: "1970-01-01T00:16:40Z", end: "1970-01-01T00:33:20Z"}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9}
  - {name: cpu, resources: {ladder/cpu: 1}, quality: 0.5}
""")
OPTS = AutoscaleOptions(retry_initial_s=10, retry_max_s=40, provision_timeout_s=50, drain_s=5)


def refusal(node_type: str, t: float) -> LaunchFailure:
    return LaunchFailure(node_type, t, "InsufficientInstanceCapacity", "no capacity")


def asked(plan) -> list[str]:
    return [next(k.split("/")[1] for k in b if k.startswith("ladder/")) for b in plan.bundles]


def test_a_queued_rung_is_asked_for_early_and_the_next_rung_is_the_target():
    p = AutoscalePlanner(QUEUED, OPTS)
    plan = p.step({}, [], now=0.0)
    flex = p.rungs["h100-flex"]
    assert flex.status == "queued" and flex.queued_since == 0.0 and flex.capacity == "flex-start"
    assert plan.target == "a100"  # not waited for: the best rung obtainable otherwise
    assert asked(plan) == ["h100-flex", "a100"]
    [ev] = [e for e in plan.events if e["rung"] == "h100-flex"]
    assert ev["kind"] == "requested" and "queued for flex-start" in ev["reason"]


def test_refusals_keep_the_queued_request_standing_while_lower_rungs_serve():
    p = AutoscalePlanner(QUEUED, OPTS)
    p.step({}, [], now=0.0)
    events = []
    for t in range(1, 40):
        present = {"a100": 1} if t >= 5 else {}
        plan = p.step(present, [refusal("h100-flex", t - 1)], now=float(t))
        events += plan.events
        assert "h100-flex" in asked(plan), t  # never dropped: no backoff while queued
    flex = p.rungs["h100-flex"]
    assert flex.status == "queued" and flex.queued_since == 0.0
    assert flex.failures == 39 and flex.next_retry is None
    assert "InsufficientInstanceCapacity" in flex.last_stockout_reason
    assert [e["kind"] for e in events if e["rung"] == "h100-flex"] == ["stockout"]  # one
    assert plan.serving == "a100"  # climbed from nothing at once, served meanwhile


def test_the_queued_rung_is_climbed_to_when_granted_and_the_lower_rung_released():
    p = AutoscalePlanner(QUEUED, OPTS)
    for t in range(0, 10):
        p.step({"a100": 1}, [refusal("h100-flex", t)] if t else [], now=float(t))
    plan = p.step({"a100": 1, "h100-flex": 1}, [], now=10.0)  # granted
    assert plan.serving == "a100" and p.rungs["h100-flex"].role == "warming"
    assert p.rungs["h100-flex"].status == "up" and p.rungs["h100-flex"].queued_since is None
    plan = p.step({"a100": 1, "h100-flex": 1}, [], now=11.0)
    assert plan.serving == "h100-flex"  # hysteresis 2, as always
    assert p.rungs["a100"].role == "draining"
    plan = p.step({"a100": 1, "h100-flex": 1}, [], now=16.0)
    assert asked(plan) == ["h100-flex"] and p.rungs["a100"].role == "released"


def test_a_queue_that_outlives_max_wait_counts_as_a_stockout_then_queues_again():
    p = AutoscalePlanner(QUEUED, OPTS)
    p.step({"a100": 1}, [], now=0.0)
    plan = p.step({"a100": 1}, [], now=99.0)
    assert "h100-flex" in asked(plan)
    plan = p.step({"a100": 1}, [], now=100.0)
    flex = p.rungs["h100-flex"]
    assert flex.status == "stocked_out" and "capacity.max_wait_s (100 s)" in \
        flex.last_stockout_reason
    assert flex.next_retry == 110.0 and asked(plan) == ["a100"]
    plan = p.step({"a100": 1}, [], now=110.0)
    assert flex.status == "queued" and flex.queued_since == 110.0
    assert asked(plan)[0] == "h100-flex"
    assert any(e["kind"] == "probe" and "queued again" in e["reason"] for e in plan.events)


def test_a_queued_rung_above_the_serving_rung_only():
    """Once a better rung serves, the queue is withdrawn; it is asked for again below it."""
    ladder = Ladder.from_yaml("""
name: two
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: h100-flex, resources: {ladder/h100-flex: 1}, capacity: {type: flex-start}}
  - {name: a100, resources: {ladder/a100: 1}}
""")
    p = AutoscalePlanner(ladder, OPTS)
    plan = p.step({}, [], now=0.0)
    assert asked(plan) == ["h100", "h100-flex"] and plan.target == "h100"
    plan = p.step({"h100": 1}, [], now=1.0)
    assert asked(plan) == ["h100"] and p.rungs["h100-flex"].status == "idle"


def test_a_block_is_asked_for_only_inside_its_window_and_left_before_it_ends():
    p = AutoscalePlanner(BLOCK, OPTS)
    plan = p.step({"cpu": 1}, [], now=500.0)
    assert plan.target == "a100" and "h100-block" not in asked(plan)
    assert p.rungs["h100-block"].window == [1000.0, 1900.0]
    plan = p.step({"cpu": 1, "a100": 1}, [], now=999.0)
    plan = p.step({"cpu": 1, "a100": 1}, [], now=1000.0)  # the window opens
    assert plan.target == "h100-block" and asked(plan)[0] == "h100-block"
    for t in (1001.0, 1002.0):
        plan = p.step({"cpu": 1, "a100": 1, "h100-block": 1}, [], now=t)
    assert plan.serving == "h100-block"
    plan = p.step({"cpu": 1, "h100-block": 1}, [], now=1100.0)  # a100 released, node gone
    assert asked(plan) == ["h100-block"]
    # provision_timeout_s (50) before the window closes, the rung below is asked for again.
    plan = p.step({"cpu": 1, "h100-block": 1}, [], now=1850.0)
    assert plan.serving == "h100-block" and plan.target == "a100"
    assert asked(plan) == ["h100-block", "a100"]
    plan = p.step({"cpu": 1, "a100": 1, "h100-block": 1}, [], now=1899.0)
    assert plan.serving == "h100-block"
    plan = p.step({"cpu": 1, "a100": 1, "h100-block": 1}, [], now=1900.0)  # closes
    assert plan.serving == "a100"
    [ev] = [e for e in plan.events if e["kind"] == "transition"]
    assert ev["direction"] == "down" and ev["from"] == "h100-block"
    assert p.rungs["h100-block"].role == "draining"  # in-flight work finishes (drain_s)
    plan = p.step({"cpu": 1, "a100": 1, "h100-block": 1}, [], now=1905.0)
    assert asked(plan) == ["a100"] and p.rungs["h100-block"].role == "released"
    assert any(e["kind"] == "released" and "window closed" in e["reason"]
               for e in plan.events)


def test_state_round_trips_the_queue_through_a_restart():
    p = AutoscalePlanner(QUEUED, OPTS)
    p.step({}, [], now=0.0)
    q = AutoscalePlanner(QUEUED, OPTS)
    q.restore(p.dump())
    assert q.rungs["h100-flex"].status == "queued" and q.rungs["h100-flex"].queued_since == 0.0
    plan = q.step({}, [], now=1.0)
    assert "h100-flex" in asked(plan)
