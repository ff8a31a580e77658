"""What a team-bound ladder app asks the fleet arbiter for (serve/demand.py), no Ray."""

from __future__ import annotations

from ray_ladder import Ladder
from ray_ladder.serve.demand import wanted_units
from ray_ladder.serve.state import RouterState

LADDER = Ladder.from_yaml("""
name: demand
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}, standby_replicas: 1}
  - {name: cpu, num_cpus: 1}
  - {name: shed, kind: shed}
""")


def _state(running: dict[str, int], placeable: dict[str, bool]) -> RouterState:
    state = RouterState(LADDER, down_cooldown_s=1.0)
    state.observe(running, placeable, now=0.0)
    return state


def test_an_app_on_its_top_rung_wants_its_replicas_and_the_standbys_above() -> None:
    state = _state({"h100": 3, "a100": 1, "cpu": 0}, {"h100": True, "a100": True, "cpu": True})
    assert state.current == "h100"
    assert wanted_units(state) == {"h100": 3, "a100": 1, "cpu": 0}


def test_an_app_that_fell_still_wants_the_rungs_above_it() -> None:
    state = _state({"h100": 0, "a100": 2, "cpu": 0}, {"h100": False, "a100": True, "cpu": True})
    assert state.current == "a100"
    assert wanted_units(state) == {"h100": 1, "a100": 2, "cpu": 0}  # it would climb back
