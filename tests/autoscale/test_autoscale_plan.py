"""The autoscale planner (pure): stock-out, fallback, backoff, climb back, release."""

from __future__ import annotations

import pytest

from ray_ladder import Constraints, Ladder
from ray_ladder.autoscale.plan import AutoscaleOptions, AutoscalePlanner, LaunchFailure

LADDER = Ladder.from_yaml("""
name: gpu
policy: {promotion_hysteresis: 2}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, tags: {jurisdiction: us}}
  - {name: a100, resources: {ladder/a100: 1}, num_cpus: 1, quality: 0.9,
     label_selector: {ladder.accelerator: a100}, tags: {jurisdiction: eu}}
  - {name: cpu, num_cpus: 1, quality: 0.5, tags: {jurisdiction: eu}}
  - {name: shed, kind: shed, quality: 0}
""")

OPTS = AutoscaleOptions(retry_initial_s=10, retry_max_s=40, provision_timeout_s=100,
                        drain_s=5)


def refusal(node_type: str, t: float) -> LaunchFailure:
    return LaunchFailure(node_type, t, "InsufficientInstanceCapacity", "no capacity")


def requested(plan) -> list[str]:
    return [next(k.split("/")[1] for k in b if k.startswith("ladder/")) if any(
        k.startswith("ladder/") for k in b) else "cpu" for b in plan.bundles]


def test_first_step_asks_for_the_preferred_rung_only():
    p = AutoscalePlanner(LADDER, OPTS)
    plan = p.step({"cpu": 1}, [], now=100.0)
    assert plan.target == "h100"
    assert plan.serving == "cpu"
    # The preferred rung and the serving rung (the head hosts cpu) are requested.
    assert plan.bundles == [{"ladder/h100": 1.0}, {"CPU": 1.0}]
    assert p.rungs["h100"].status == "requested"
    assert [e["kind"] for e in plan.events if e["rung"] == "h100"] == ["requested"]


def test_refusal_moves_the_request_to_the_next_rung_at_once():
    p = AutoscalePlanner(LADDER, OPTS)
    p.step({"cpu": 1}, [], now=100.0)
    plan = p.step({"cpu": 1}, [refusal("h100", 100)], now=101.0)
    h100 = p.rungs["h100"]
    assert h100.status == "stocked_out" and h100.failures == 1
    assert h100.last_stockout == 100
    assert "InsufficientInstanceCapacity" in h100.last_stockout_reason
    assert h100.next_retry == 111.0
    assert plan.target == "a100"
    assert requested(plan) == ["a100", "cpu"]
    assert plan.label_selectors[0] == {"ladder.accelerator": "a100"}
    assert {e["kind"] for e in plan.events} >= {"stockout", "requested"}


def test_refusals_older_than_the_request_do_not_count():
    p = AutoscalePlanner(LADDER, OPTS)
    p.step({"cpu": 1}, [refusal("h100", 50)], now=100.0)
    plan = p.step({"cpu": 1}, [refusal("h100", 50)], now=101.0)
    assert p.rungs["h100"].status == "requested"
    assert plan.target == "h100"


def test_provision_timeout_without_refusal_counts_as_stockout():
    p = AutoscalePlanner(LADDER, OPTS)
    p.step({"cpu": 1}, [], now=0.0)
    plan = p.step({"cpu": 1}, [], now=99.0)
    assert plan.target == "h100"
    plan = p.step({"cpu": 1}, [], now=100.0)
    assert plan.target == "a100"
    assert "provision_timeout_s" in p.rungs["h100"].last_stockout_reason


def test_backoff_probes_and_grows_per_refusal():
    p = AutoscalePlanner(LADDER, OPTS)
    p.step({"cpu": 1}, [], now=0.0)
    p.step({"cpu": 1}, [refusal("h100", 0)], now=1.0)  # retry at 11
    p.step({"cpu": 1, "a100": 1}, [], now=5.0)
    plan = p.step({"cpu": 1, "a100": 1}, [], now=10.9)
    assert "h100" not in requested(plan)  # damped: no request while backing off
    plan = p.step({"cpu": 1, "a100": 1}, [], now=11.0)
    assert requested(plan)[0] == "h100" and p.rungs["h100"].status == "probing"
    assert "a100" in requested(plan)  # the serving rung keeps its node
    p.step({"cpu": 1, "a100": 1}, [refusal("h100", 11)], now=12.0)
    assert p.rungs["h100"].failures == 2 and p.rungs["h100"].next_retry == 32.0
    # Third refusal: 40 (capped at retry_max_s), not 40 = 10 * 2 ** 2.
    p.step({"cpu": 1, "a100": 1}, [], now=32.0)
    p.step({"cpu": 1, "a100": 1}, [refusal("h100", 32)], now=33.0)
    assert p.rungs["h100"].next_retry == 73.0


def test_climb_back_after_hysteresis_then_drain_then_release():
    p = AutoscalePlanner(LADDER, OPTS)
    p.step({"cpu": 1}, [], now=0.0)
    p.step({"cpu": 1}, [refusal("h100", 0)], now=1.0)
    for t in (2.0, 3.0):
        plan = p.step({"cpu": 1, "a100": 1}, [], now=t)
    assert plan.serving == "a100"  # climbed from cpu after 2 observations
    plan = p.step({"cpu": 1, "a100": 1}, [], now=11.0)  # probe
    plan = p.step({"cpu": 1, "a100": 1, "h100": 1}, [], now=12.0)  # node joined
    assert plan.serving == "a100" and p.rungs["h100"].role == "warming"
    assert any(e["kind"] == "node-joined" and e["rung"] == "h100" for e in plan.events)
    plan = p.step({"cpu": 1, "a100": 1, "h100": 1}, [], now=13.0)
    assert plan.serving == "h100"
    assert any(e["kind"] == "transition" and e["direction"] == "up" and e["rung"] == "h100"
               for e in plan.events)
    assert p.rungs["a100"].role == "draining" and "a100" in requested(plan)
    plan = p.step({"cpu": 1, "a100": 1, "h100": 1}, [], now=17.9)
    assert "a100" in requested(plan)
    plan = p.step({"cpu": 1, "a100": 1, "h100": 1}, [], now=18.0)
    assert requested(plan) == ["h100"]
    assert p.rungs["a100"].role == "released" and p.rungs["a100"].target_bundles == 0
    assert [e["kind"] for e in plan.events] == ["released"]
    plan = p.step({"cpu": 1, "h100": 1}, [], now=25.0)  # idle timeout returned the node
    assert p.rungs["a100"].status == "idle" and plan.events[0]["kind"] == "node-lost"


def test_losing_the_serving_node_falls_at_once_and_rerequests():
    p = AutoscalePlanner(LADDER, OPTS)
    p.step({"cpu": 1, "h100": 1}, [], now=0.0)
    plan = p.step({"cpu": 1}, [], now=1.0)
    assert plan.serving == "cpu" and plan.target == "h100"
    assert requested(plan)[0] == "h100" and p.rungs["h100"].status == "requested"


def test_everything_stocked_out_leaves_no_target():
    p = AutoscalePlanner(LADDER, AutoscaleOptions(node_types={"cpu": ["cpu-node"]}))
    p.step({}, [], now=0.0)
    p.step({}, [refusal("h100", 0)], now=1.0)
    p.step({}, [refusal("a100", 1)], now=2.0)
    plan = p.step({}, [refusal("cpu-node", 2)], now=3.0)
    assert plan.target is None and plan.serving == "shed"
    assert plan.bundles == []


def test_constraints_keep_ineligible_rungs_out_of_the_request():
    p = AutoscalePlanner(LADDER, OPTS, Constraints(jurisdiction="eu"))
    plan = p.step({"cpu": 1}, [], now=0.0)
    assert plan.target == "a100" and "h100" not in p.rungs


def test_spill_past_a_rung_the_operator_may_not_pay_for_asks_for_nothing():
    # Cost permitting: an h100 over the hook's cost bound is not a rung it keeps, so a
    # sustained spill past it (reported by a router that serves other requests there)
    # buys no h100 node; the spill past a100, which it may buy, does.
    dear = Ladder.from_yaml(LADDER_COSTS)
    p = AutoscalePlanner(dear, OPTS, Constraints(max_cost_per_hour=5.0))
    p.step({"a100": 1, "cpu": 1}, [], now=100.0)
    plan = p.step({"a100": 1, "cpu": 1}, [], now=101.0, spill={"h100": 4, "a100": 2})
    assert "h100" not in requested(plan) and requested(plan).count("a100") == 2


LADDER_COSTS = """
name: priced
rungs:
  - {name: h100, resources: {ladder/h100: 1}, cost_per_hour: 12}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9, cost_per_hour: 4}
  - {name: cpu, num_cpus: 1, quality: 0.5, cost_per_hour: 0.5}
"""


def test_restore_keeps_backoff_across_a_restart():
    p = AutoscalePlanner(LADDER, OPTS)
    p.step({"cpu": 1}, [], now=0.0)
    p.step({"cpu": 1}, [refusal("h100", 0)], now=1.0)
    q = AutoscalePlanner(LADDER, OPTS)
    q.restore(p.dump())
    plan = q.step({"cpu": 1, "a100": 1}, [refusal("h100", 0)], now=2.0)
    assert q.rungs["h100"].status == "stocked_out" and q.rungs["h100"].failures == 1
    assert plan.target == "a100"


def test_options_are_strict():
    with pytest.raises(ValueError, match="retry_max_s"):
        AutoscaleOptions(retry_initial_s=10, retry_max_s=5)
    with pytest.raises(ValueError):
        AutoscaleOptions(retry_initial=10)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="unknown rung"):
        AutoscalePlanner(LADDER, AutoscaleOptions(node_types={"v100": ["x"]}))


def test_static_rungs_are_used_while_present_and_never_requested():
    p = AutoscalePlanner(LADDER, AutoscaleOptions(node_types={"h100": []}, drain_s=0))
    plan = p.step({"cpu": 1, "h100": 1}, [], now=0.0)
    assert plan.serving == "h100" and plan.target == "h100" and plan.bundles == []
    plan = p.step({"cpu": 1}, [], now=1.0)  # the on-prem machine is busy or down
    assert plan.serving == "cpu" and plan.target == "a100"
    assert requested(plan)[0] == "a100" and p.rungs["h100"].status == "idle"


def test_rungs_the_head_hosts_are_never_requested():
    # Asking for {"CPU": 1} could make the autoscaler launch an unrelated node type.
    p = AutoscalePlanner(LADDER, OPTS)
    plan = p.step({"cpu": 1}, [], now=0.0, on_head={"cpu"})
    assert plan.serving == "cpu" and plan.bundles == [{"ladder/h100": 1.0}]
    assert p.rungs["cpu"].status == "up" and p.rungs["cpu"].target_bundles == 0


def test_a_rung_the_head_hosts_is_never_released_so_its_standby_stays_warm():
    # "released" cuts a rung's standby replica (serve/scaling.py) so that its node can
    # go back; the head never goes back, and the fall to a cold cpu rung would wait for
    # a replica start (seen in the chaos soak as 503s for EU requests).
    p = AutoscalePlanner(LADDER, OPTS)
    p.step({"cpu": 1, "h100": 1}, [], now=0.0, on_head={"cpu"})
    plan = p.step({"cpu": 1, "h100": 1}, [], now=1.0, on_head={"cpu"})
    assert plan.serving == "h100"
    assert p.rungs["cpu"].role == "none"


@pytest.mark.parametrize("refusals", [10**4, 10**9])
def test_any_number_of_refusals_waits_retry_max_s_without_raising(refusals: int):
    # retry_multiplier ** (n - 1) overflowed after about 1,024 refusals (a week of one
    # rung stocked out), and from then on every hook step raised.
    assert OPTS.retry_delay_s(refusals) == OPTS.retry_max_s
    p = AutoscalePlanner(LADDER, OPTS)
    p.step({"cpu": 1}, [], now=0.0)
    p.rungs["h100"].failures = refusals - 1
    p.step({"cpu": 1}, [refusal("h100", 0)], now=1.0)
    h100 = p.rungs["h100"]
    assert h100.failures == refusals and h100.next_retry == 1.0 + OPTS.retry_max_s


@pytest.mark.parametrize(("saved", "restored"), [
    (10**9, 10**9), (10**400, 10**400), (3.0, 3), ("lots", 0), (None, 0), (-2, 0),
    (float("inf"), 0), (True, 0),
])
def test_a_persisted_refusal_count_of_any_size_or_shape_keeps_the_hook_steering(
        saved, restored):
    # The count survives hook restarts (Ray's KV); a huge or garbled one must not break
    # the steps after the restart.
    p = AutoscalePlanner(LADDER, OPTS)
    p.step({"cpu": 1}, [], now=0.0)
    dump = p.dump()
    dump["rungs"]["h100"]["failures"] = saved
    q = AutoscalePlanner(LADDER, OPTS)
    q.restore(dump)
    assert q.rungs["h100"].failures == restored
    plan = q.step({"cpu": 1}, [refusal("h100", 0)], now=1.0)
    h100 = q.rungs["h100"]
    assert h100.status == "stocked_out" and plan.target == "a100"
    assert h100.next_retry == 1.0 + OPTS.retry_delay_s(restored + 1)


def test_a_sustained_spill_asks_for_that_many_placements_of_a_rung_the_hook_keeps():
    p = AutoscalePlanner(LADDER, OPTS)
    p.step({"h100": 1, "cpu": 1}, [], now=100.0)
    plan = p.step({"h100": 1, "cpu": 1}, [], now=101.0, spill={"h100": 3, "a100": 2})
    assert requested(plan) == ["h100", "h100", "h100"]  # a100 is neither served nor aimed at
    [ev] = [e for e in plan.events if e["kind"] == "requested"]
    assert ev["rung"] == "h100" and "spill past it" in ev["reason"]
    again = p.step({"h100": 3, "cpu": 1}, [], now=102.0, spill={"h100": 3})
    assert requested(again) == ["h100"] * 3 and not again.events  # said once
    calm = p.step({"h100": 3, "cpu": 1}, [], now=103.0)
    assert requested(calm) == ["h100"]  # the spill is over: back to bundles_per_rung
