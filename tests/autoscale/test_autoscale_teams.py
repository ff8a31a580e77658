"""The hook's team rule, without Ray: a cloud rung is asked for only while the team can
get no on-prem shared rung of its ladder, and given back after the ladder climbs home."""

from __future__ import annotations

from typing import Any

from ray_ladder import Ladder
from ray_ladder.autoscale.plan import AutoscaleOptions, AutoscalePlanner, Plan
from ray_ladder.autoscale.teams import CloudSample, TeamGrants, cloud_figures
from ray_ladder.cluster.grants import team_entry, team_limits
from ray_ladder.core.arbiter import Holdings, decide
from ray_ladder.core.fleet import Fleet

LADDER = Ladder.from_yaml("""
name: b-work
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100-cloud, resources: {ladder/a100: 1}}
  - {name: cpu, resources: {ladder/cpu: 1}}
""")
OPTIONS = AutoscaleOptions(node_types={"h100": []}, promotion_hysteresis=2, drain_s=2.0)
CLOUD = {"ladder/a100": 1.0}
ON_PREM = {"h100": 2, "cpu": 1}  # h100 machines are on-prem (static), cpu on the head
FLEET = Fleet.from_dict({"fleet": "f", "rungs": {
    "h100": {"resources": {"ladder/h100": 1}},
    "a100-cloud": {"resources": {"ladder/a100": 1}, "cloud": True, "cost_per_hour": 4}},
    "teams": [{"name": "a", "quota": {"h100": 2}, "cohort": "c"},
              {"name": "b", "cohort": "c", "reclaim_grace_s": 5}]})


def _entry(held: int = 0, noticed: int = 0, entitled: int = 0, wanted: int = 2,
           budget: str = "ok") -> dict[str, Any]:
    return {"team": "b", "budget": budget, "shared": ["h100"], "cloud": ["a100-cloud"],
            "rungs": {"h100": {"held": held, "noticed": noticed, "deadline": None,
                               "entitled": entitled, "wanted": wanted}}}


def _step(planner: AutoscalePlanner, now: float, entry: dict[str, Any] | None,
          cloud_nodes: int = 0) -> Plan:
    team = TeamGrants.from_entry(entry) if entry is not None else None
    return planner.step({**ON_PREM, "a100-cloud": cloud_nodes}, [], now, on_head={"cpu"},
                        team=team)


def _planner() -> AutoscalePlanner:
    return AutoscalePlanner(LADDER, OPTIONS)


def test_on_prem_free_for_the_team_asks_for_no_cloud_node() -> None:
    planner = _planner()
    for t in range(5):
        plan = _step(planner, float(t), _entry(held=2, entitled=2))
        assert plan.serving == "h100" and plan.target == "h100"
        assert CLOUD not in plan.bundles


def test_on_prem_full_and_nothing_to_borrow_asks_for_the_cloud_rung() -> None:
    plan = _step(_planner(), 0.0, _entry(held=0, entitled=0))
    assert plan.target == "a100-cloud" and plan.bundles == [CLOUD]
    assert plan.serving == "cpu"  # h100 has machines, but none of its units is b's
    assert [e["kind"] for e in plan.events if e["rung"] == "a100-cloud"] == ["requested"]


def test_a_reclaim_notice_moves_the_work_off_at_once_and_buys_the_cloud_rung() -> None:
    planner = _planner()
    assert _step(planner, 0.0, _entry(held=2, entitled=2)).serving == "h100"
    plan = _step(planner, 1.0, _entry(held=2, noticed=2, entitled=0))
    assert plan.serving == "cpu" and plan.bundles == [CLOUD]  # no hysteresis on a fall
    plans = [_step(planner, t, _entry(held=2, noticed=2, entitled=0), cloud_nodes=1)
             for t in (5.0, 6.0)]  # the cloud node joined: a climb, after the hysteresis
    assert [p.serving for p in plans] == ["cpu", "a100-cloud"]
    assert all(p.bundles == [CLOUD] for p in plans)


def test_units_coming_back_by_quota_buy_no_cloud_node() -> None:
    # a lender whose quota a borrower still holds under a notice: entitled, not held yet
    plan = _step(_planner(), 0.0, _entry(held=0, entitled=2))
    assert plan.target == "h100" and plan.bundles == []
    assert plan.serving == "cpu"  # its work waits below for the grace


def test_on_prem_frees_the_cloud_request_goes_after_the_climb_home() -> None:
    planner = _planner()
    full = _entry(held=0, entitled=0)
    _step(planner, 0.0, full)
    _step(planner, 0.5, full, cloud_nodes=1)
    assert _step(planner, 1.0, full, cloud_nodes=1).serving == "a100-cloud"
    # a's demand went: b is entitled again, the units come next round
    plan = _step(planner, 2.0, _entry(held=0, entitled=2), cloud_nodes=1)
    assert plan.target == "h100" and plan.serving == "a100-cloud" and plan.bundles == [CLOUD]
    plans = [_step(planner, t, _entry(held=2, entitled=2), cloud_nodes=1)
             for t in (3.0, 4.0, 5.0, 6.0, 7.0)]
    assert [p.serving for p in plans] == ["a100-cloud", "h100", "h100", "h100", "h100"]
    assert [p.bundles == [CLOUD] for p in plans] == [True, True, True, False, False]
    assert planner.rungs["a100-cloud"].role == "released"
    assert [e["kind"] for e in plans[3].events if e["rung"] == "a100-cloud"] == ["released"]


def test_a_cloud_request_not_yet_met_is_withdrawn_when_on_prem_frees() -> None:
    planner = _planner()
    assert _step(planner, 0.0, _entry(held=0, entitled=0)).bundles == [CLOUD]
    plan = _step(planner, 1.0, _entry(held=0, entitled=1))
    assert plan.bundles == [] and planner.rungs["a100-cloud"].status == "idle"
    assert planner.state()["cloud_held"] == \
        "team b can get h100 on-prem: no cloud rung is asked for"


def test_no_demand_or_a_spent_budget_buys_no_cloud_node() -> None:
    assert _step(_planner(), 0.0, _entry(wanted=0)).bundles == []
    planner = _planner()
    assert _step(planner, 0.0, _entry(budget="demote")).bundles == []
    assert "budget is spent (demote)" in planner.state()["cloud_held"]


def test_without_a_fleet_the_hook_is_unchanged() -> None:
    plan = _step(_planner(), 0.0, None)
    assert plan.serving == "h100" and plan.bundles == []
    planner = AutoscalePlanner(LADDER, OPTIONS)
    plan = planner.step({"cpu": 1}, [], 0.0, on_head={"cpu"})  # h100 machines gone
    assert plan.target == "a100-cloud" and plan.bundles == [CLOUD]
    assert planner.state()["team"] is None


def test_the_arbiters_entry_drives_the_rule_end_to_end() -> None:
    """decide -> team_entry -> TeamGrants: b borrows, a reclaims, a's demand goes."""
    capacity = {"h100": 2}
    out = decide(FLEET, Holdings(), capacity, {"b": {"h100": 2}}, 0.0)
    grants = TeamGrants.from_entry(_published(out, {"b": {"h100": 2}}))
    assert grants.usable == {"h100"} and grants.blocked_cloud(LADDER.names) == {"a100-cloud"}
    demand = {"a": {"h100": 2}, "b": {"h100": 2}}
    out = decide(FLEET, out.state, capacity, demand, 1.0)
    grants = TeamGrants.from_entry(_published(out, demand))
    assert grants.usable == set() and grants.blocked_cloud(LADDER.names) == set()
    demand = {"b": {"h100": 2}}
    out = decide(FLEET, out.state, capacity, demand, 2.0)
    grants = TeamGrants.from_entry(_published(out, demand))
    assert grants.reachable == {"h100"} and grants.blocked_cloud(LADDER.names) == {"a100-cloud"}


def _published(out: Any, demand: dict[str, dict[str, int]]) -> dict[str, Any]:
    return team_entry("f", "b", out, FLEET.onprem_rungs, out.state.at, cloud=["a100-cloud"],
                      demand=demand)


def test_a_cloud_rung_is_not_denied_to_a_teams_view() -> None:
    out = decide(FLEET, Holdings(), {"h100": 2}, {"a": {"h100": 2}}, 0.0)
    entry = _published(out, {"a": {"h100": 2}})
    assert "a100-cloud" not in entry["rungs"] and entry["cloud"] == ["a100-cloud"]
    assert team_limits(entry)[0] == {"h100": "no h100 unit granted to team b"}


def test_an_entry_from_an_older_arbiter_counts_held_units_as_the_entitlement() -> None:
    old = {"team": "b", "rungs": {"h100": {"held": 1, "noticed": 0}}}
    grants = TeamGrants.from_entry(old)
    assert grants.reachable == {"h100"} and grants.wants and grants.cloud == set()
    assert TeamGrants.from_entry({"team": "b", "rungs": {"h100": {
        "held": 1, "noticed": 1}}}).reachable == set()


def test_cloud_figures_split_a_wrong_purchase_from_the_climb_home() -> None:
    samples = [CloudSample(0.0, 0, False), CloudSample(10.0, 1, False),  # bought: full
               CloudSample(20.0, 1, True), CloudSample(30.0, 2, True),   # frees; 1 more bought
               CloudSample(35.0, 1, True), CloudSample(40.0, 0, True), CloudSample(50.0, 0, True)]
    assert cloud_figures(samples) == {"cloud_node_s": 35.0,
                                      "cloud_node_s_while_onprem_free": 5.0,
                                      "cloud_node_s_climbing_home": 20.0}
    assert cloud_figures([CloudSample(0.0, 1, False), CloudSample(5.0, 1, False)]) == {
        "cloud_node_s": 5.0, "cloud_node_s_while_onprem_free": 0.0,
        "cloud_node_s_climbing_home": 0.0}
    assert cloud_figures([])["cloud_node_s"] == 0.0
