"""The teams simulator (simulate/teams/): hand-made demand traces with exact figures for
the fleet policy, first-come-first-served and the Kueue-like policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_ladder.cli import main
from ray_ladder.core.fleet import Fleet
from ray_ladder.simulate.teams import (
    DemandTrace,
    generate_bursts,
    load_demand,
    parse_demand,
    simulate_teams,
)

H100 = {"resources": {"ladder/h100": 1}}
A = {"name": "a", "quota": {"h100": 2}, "cohort": "c"}
B = {"name": "b", "quota": {"h100": 2}, "cohort": "c", "reclaim_grace_s": 5}


def fleet(*teams: dict, **rungs: dict) -> Fleet:
    return Fleet.from_dict({"fleet": "f", "rungs": {"h100": H100, **rungs},
                            "teams": list(teams or (A, B))})


# b borrows a's idle quota; a's demand arrives at 10; b is done at 30.
BURST = DemandTrace.from_rows([(0, "b", "h100", 4), (10, "a", "h100", 2),
                               (30, "b", "h100", 0)], duration_s=40)


def run(f: Fleet, trace: DemandTrace, **kw: object):
    report = simulate_teams(f, trace, tick_s=1, checkpoint_s=4, **kw)  # type: ignore[arg-type]
    return {p.policy: p.teams for p in report.policies}


def test_fcfs_makes_the_lender_wait_for_the_borrower_to_finish() -> None:
    a, b = run(fleet(), BURST)["fcfs"]["a"], run(fleet(), BURST)["fcfs"]["b"]
    assert (a.wait_p50_s, a.wait_p99_s, a.waits) == (20.0, 20.0, 2)
    assert a.share_error_max_units == 2.0 and a.share_error_mean_units == 1.0  # 20 of 40 s
    assert b.work_lost_unit_s == 0.0 and b.reclaimed_units == 0


def test_kueue_like_serves_the_lender_at_once_and_loses_the_borrowers_work() -> None:
    teams = run(fleet(), BURST)["kueue"]
    assert teams["a"].wait_max_s == 0.0 and teams["a"].share_error_max_units == 0.0
    # two units evicted at 10 s, placed at 0 s, checkpoints every 4 s: 2 s each lost
    assert teams["b"].work_lost_unit_s == 4.0 and teams["b"].reclaimed_units == 2
    assert teams["b"].wait_max_s == 20.0  # requeued until its demand ends at 30 s


def test_the_fleet_policy_loses_nothing_and_the_lender_waits_the_grace() -> None:
    teams = run(fleet(), BURST)["fleet"]
    assert (teams["a"].wait_p50_s, teams["a"].wait_max_s) == (5.0, 5.0)  # b's grace
    assert teams["b"].work_lost_unit_s == 0.0 and teams["b"].reclaimed_units == 2
    assert teams["a"].share_error_max_units == 2.0
    assert teams["a"].share_error_mean_units == 0.25  # 2 units short for 5 of 40 s
    # b's work left the noticed units at the notice (10 s) and waits until 30 s
    assert teams["b"].wait_max_s == 20.0 and teams["b"].unserved_unit_s == 40.0


CLOUD = {"cloud": {"resources": {"ladder/a100": 1}, "cloud": True, "cost_per_hour": 3600}}
# b borrows; a arrives at 10; b is done at 20; a at 40
SPILL = DemandTrace.from_rows([(0, "b", "h100", 4), (10, "a", "h100", 2),
                               (20, "b", "h100", 0), (40, "a", "h100", 0)], duration_s=50)


def test_fcfs_buys_cloud_for_the_lender_and_keeps_it_while_on_prem_is_free() -> None:
    a = run(fleet(A, B, **CLOUD), SPILL)["fcfs"]["a"]
    assert a.cloud_node_h == pytest.approx(60 / 3600)  # 2 units from 10 to 40 s
    assert a.cloud_node_h_while_onprem_free == pytest.approx(40 / 3600)  # 20 to 40 s
    assert a.wait_max_s == 30.0 and a.cost == pytest.approx(60.0)


def test_the_fleet_policy_buys_cloud_only_past_the_entitlement_and_climbs_home() -> None:
    teams = run(fleet(A, B, **CLOUD), SPILL)["fleet"]
    assert teams["a"].cloud_node_h == 0.0  # entitled on-prem: it waits the grace
    assert teams["b"].cloud_node_h == pytest.approx(20 / 3600)  # moved at the notice
    assert teams["b"].cloud_node_h_while_onprem_free == 0.0
    assert teams["b"].unserved_unit_s == 0.0  # its work ran on the cloud meanwhile


def test_kueue_like_evicts_to_the_cloud_and_the_work_since_the_checkpoint_is_lost() -> None:
    b = run(fleet(A, B, **CLOUD), SPILL)["kueue"]["b"]
    assert b.work_lost_unit_s == 4.0 and b.cloud_node_h == pytest.approx(20 / 3600)


def test_a_free_unit_on_prem_and_a_climb_home_in_the_fleet_policy() -> None:
    trace = DemandTrace.from_rows([(0, "b", "h100", 4), (10, "a", "h100", 2),
                                   (25, "a", "h100", 0), (30, "b", "h100", 0)],
                                  duration_s=30)
    teams = run(fleet(A, B, **CLOUD), trace)
    assert teams["fleet"]["b"].cloud_node_h == pytest.approx(30 / 3600)  # 10 to 25 s
    assert teams["fleet"]["b"].cloud_node_h_while_onprem_free == 0.0
    # Kueue-like: b's evicted work stays in the cloud after a leaves at 25 s
    assert teams["kueue"]["b"].cloud_node_h_while_onprem_free == pytest.approx(10 / 3600)


def test_a_budget_stops_the_fleet_policy_within_a_round_and_not_fcfs() -> None:
    a = {**A, "budget": {"max_cost": 1.0, "window_s": 3600}}
    f = Fleet.from_dict({"fleet": "f", "rungs": {"h100": {**H100, "cost_per_hour": 3600}},
                         "teams": [a, B]})
    trace = DemandTrace.from_rows([(0, "a", "h100", 1)], duration_s=10)
    teams = run(f, trace)
    # the arbiter sees the spend one round later: 2 unit-seconds at 1 per unit-second
    assert teams["fleet"]["a"].cost == pytest.approx(2.0)
    assert teams["fleet"]["a"].budget_overrun == pytest.approx(1.0)
    assert teams["fcfs"]["a"].budget_overrun == pytest.approx(9.0)
    assert teams["kueue"]["a"].budget_overrun == pytest.approx(9.0)
    assert teams["fcfs"]["b"].budget_overrun is None


def test_kueue_like_borrows_within_limits_and_never_unowned_units() -> None:
    lone = {"name": "z", "quota": {"h100": 1}}
    trace = DemandTrace.from_rows([(0, "b", "h100", 9), (0, "z", "h100", 3)], duration_s=2)
    report = simulate_teams(fleet(A, {**B, "borrowing_limit": {"h100": 1}}, lone), trace,
                            capacity={"h100": 8}, tick_s=1, policies=["kueue", "fcfs"])
    assert report.capacity == {"h100": 8}
    # b: 2 own + 1 borrowed (its limit); z: 1 own, no cohort; 3 unowned units stay idle
    kueue, fcfs = report.policy("kueue").teams, report.policy("fcfs").teams
    assert (kueue["b"].unserved_unit_s, kueue["z"].unserved_unit_s) == (12.0, 4.0)  # 2 ticks
    # fcfs: all 8 units to the oldest demand (a tie at 0 s goes by name: b), none to z
    assert (fcfs["b"].unserved_unit_s, fcfs["z"].unserved_unit_s) == (2.0, 6.0)


def test_demand_csv_round_trips_and_errors_name_the_row(tmp_path: Path) -> None:
    path = tmp_path / "demand.csv"
    path.write_text(BURST.to_csv())
    assert load_demand(path, duration_s=40).rows == BURST.rows
    assert parse_demand("# c\n0,a,h100,2\n5,a,h100,0\n").duration_s == 5.0
    with pytest.raises(ValueError, match="row 2: expected 'time_s,team,rung,units'"):
        parse_demand("time_s,team,rung,units\n0,a,h100,2\n5,a,h100,two\n")
    with pytest.raises(ValueError, match="row 1: team 'x' is not in fleet"):
        simulate_teams(fleet(), parse_demand("0,x,h100,1\n"))
    with pytest.raises(ValueError, match="not an on-prem shared rung"):
        simulate_teams(fleet(A, B, **CLOUD), parse_demand("0,a,cloud,1\n"))


def test_generated_bursts_are_deterministic_and_borrow_past_the_quota() -> None:
    f = fleet()
    one, two = generate_bursts(f, 86400, seed=3), generate_bursts(f, 86400, seed=3)
    assert one == two and one != generate_bursts(f, 86400, seed=4)
    units = {r.units for r in one.rows if r.team == "a"}
    assert units <= {0, 1, 3} and 3 in units  # base 1 (half of 2), burst +2 (its quota)
    assert all(r.time_s % 60 == 0 for r in one.rows) and one.duration_s == 86400


def test_cli_simulate_teams_prints_a_table_and_writes_json(tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text(json.dumps(
        {"fleet": "f", "control_period_s": 1, "rungs": {"h100": H100}, "teams": [A, B]}))
    (tmp_path / "demand.csv").write_text(BURST.to_csv())
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, [
        "simulate-teams", str(tmp_path / "fleet.yaml"), "--trace",
        str(tmp_path / "demand.csv"), "--checkpoint", "4", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "fcfs" in result.output and "kueue" in result.output
    doc = json.loads(out.read_text())
    assert doc["policies"]["fcfs"]["teams"]["a"]["wait_p99_s"] == 20.0
    assert doc["policies"]["kueue"]["total"]["work_lost_unit_s"] == 4.0
