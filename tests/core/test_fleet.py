"""The fleet file (core/fleet.py): teams, quotas, limits, budgets; errors name field and fix."""

from __future__ import annotations

import pytest

from ray_ladder.core.exceptions import ConfigError
from ray_ladder.core.fleet import Fleet, is_fleet_document, load_fleet

GOOD = """
fleet: platform
rungs:
  h100: {resources: {ladder/h100: 1}, cost_per_hour: 12, jurisdiction: eu}
  a100-cloud: {resources: {ladder/a100: 1}, cloud: true, cost_per_hour: 4}
teams:
  - name: research
    weight: 2
    cohort: onprem
    quota: {h100: 4}
    borrowing_limit: {h100: 2}
    lending_limit: {h100: 1}
    reclaim_grace_s: 10
    constraints: {jurisdiction: eu}
    budget: {max_cost: 500, window_s: 86400, on_exhausted: queue}
  - {name: product, quota: {h100: 2}, cohort: onprem}
"""


def test_a_full_fleet_file_reads_back_every_field() -> None:
    fleet = Fleet.from_yaml(GOOD)
    research = fleet.team("research")
    assert (research.weight, research.cohort, research.quota) == (2.0, "onprem", {"h100": 4})
    assert research.limit("borrowing", "h100") == 2 and research.limit("lending", "h100") == 1
    assert fleet.team("product").limit("borrowing", "h100") is None  # unset: no limit
    assert research.constraints is not None and research.constraints.jurisdiction == "eu"
    assert research.budget is not None and research.budget.on_exhausted == "queue"
    assert fleet.team("product").budget is None and fleet.onprem_rungs == ["h100"]
    assert fleet.team("product").reclaim_grace_s == 30.0


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        Fleet.from_yaml(text)
    assert str(info.value).startswith("invalid fleet file in <string>:")
    return str(info.value)


@pytest.mark.parametrize("edit,path,fix", [
    (("quota: {h100: 2}", "quota: {l4: 2}"), "teams[1].quota.l4", "add it under 'rungs:'"),
    (("quota: {h100: 2}", "quota: {a100-cloud: 2}"), "teams[1].quota.a100-cloud",
     "a cloud rung is bought"),
    (("name: product", "name: research"), "teams[1].name", "unique name"),
    (("on_exhausted: queue", "on_exhausted: refund"), "on_exhausted", "one of"),
    (("weight: 2", "wieght: 2"), "teams[0].wieght", "valid keys here: name, weight"),
    (("cloud: true", "clowd: true"), "rungs.a100-cloud.clowd", "valid keys here: resources"),
    (("quota: {h100: 2}", "quota: {h100: -1}"), "teams[1].quota.h100", "0 or more"),
])
def test_errors_name_the_field_and_the_fix(edit, path, fix) -> None:
    message = _error(GOOD.replace(*edit))
    assert path in message and fix in message


def test_a_fleet_document_is_told_from_a_ladder_file(tmp_path) -> None:
    assert is_fleet_document({"fleet": "x"}) and not is_fleet_document({"name": "x"})
    path = tmp_path / "fleet.yaml"
    path.write_text(GOOD, encoding="utf-8")
    assert load_fleet(path).fleet == "platform"
    path.write_bytes(b"\xff\xfe fleet")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_fleet(path)


def test_a_key_given_twice_is_an_error_not_last_wins() -> None:
    message = _error(GOOD.replace("weight: 2\n", "weight: 2\n    weight: 3\n"))
    assert "weight" in message
