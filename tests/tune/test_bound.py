"""A Tune run's bound constraints: a trial's own may only narrow them (pure)."""

from __future__ import annotations

import pytest

from ray_ladder import Constraints, Ladder
from ray_ladder.core.exceptions import ConstraintNotAllowedError
from ray_ladder.tune.trainable import LadderTrialSpec

LADDER = Ladder.from_dict({"name": "t", "rungs": [
    {"name": "h100", "resources": {"ladder/h100": 1}, "tags": {"jurisdiction": "us"},
     "cost_per_hour": 10},
    {"name": "a100", "resources": {"ladder/a100": 1}, "tags": {"jurisdiction": "eu"},
     "cost_per_hour": 4}]})


def test_every_trial_runs_under_the_run_binding() -> None:
    spec = LadderTrialSpec.build(LADDER, None, 1, bound={"jurisdiction": "eu"})
    assert spec.constraints_for({}) == Constraints(jurisdiction="eu")


def test_a_trial_may_narrow_the_binding_but_not_widen_it() -> None:
    def per_trial(config: dict) -> dict:
        return {"jurisdiction": config["where"]}

    spec = LadderTrialSpec.build(LADDER, per_trial, 1, bound={"max_cost_per_hour": 5})
    assert spec.constraints_for({"where": "eu"}) == Constraints(jurisdiction="eu",
                                                                max_cost_per_hour=5)
    eu_bound = LadderTrialSpec.build(LADDER, per_trial, 1, bound={"jurisdiction": "eu"})
    with pytest.raises(ConstraintNotAllowedError, match="bound to 'eu'"):
        eu_bound.constraints_for({"where": "us"})
