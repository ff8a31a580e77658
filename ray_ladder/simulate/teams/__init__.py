"""Teams sharing scarce rungs, replayed: the fleet's arbiter against first-come-first-
served (plain Ray) and a Kueue-like quota policy, on per-team demand traces (pure, no
Ray). See docs/teams.md, "Simulator".

    from ray_ladder.simulate.teams import generate_bursts, load_demand, simulate_teams
    report = simulate_teams(load_fleet("fleet.yaml"), load_demand("demand.csv"))
    report.policy("fcfs").teams["research"].wait_p99_s
"""

from __future__ import annotations

from ray_ladder.simulate.teams.demand import (
    DemandRow,
    DemandTrace,
    generate_bursts,
    load_demand,
    parse_demand,
)
from ray_ladder.simulate.teams.figures import TeamFigures, percentile
from ray_ladder.simulate.teams.policies import Fcfs, FleetPolicy, KueueLike, Placed
from ray_ladder.simulate.teams.replay import (
    POLICIES,
    TeamsPolicyReport,
    TeamsReport,
    default_capacity,
    simulate_teams,
)

__all__ = [
    "POLICIES",
    "DemandRow",
    "DemandTrace",
    "Fcfs",
    "FleetPolicy",
    "KueueLike",
    "Placed",
    "TeamFigures",
    "TeamsPolicyReport",
    "TeamsReport",
    "default_capacity",
    "generate_bursts",
    "load_demand",
    "parse_demand",
    "percentile",
    "simulate_teams",
]
