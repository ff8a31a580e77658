"""The fleet's team names where a team is bound (cluster/fleet_teams.py), and a stopped
part's demand entry (cluster/grants.py), with Ray's KV faked."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ray_ladder.cluster import fleet_teams, grants, ray_private
from ray_ladder.core.fleet import Fleet

FLEET = Fleet.from_dict({"fleet": "platform", "rungs": {"h100": {"resources": {"g": 1}}},
                         "teams": [{"name": "a"}, {"name": "b"}, {"name": "c"}]})


class FakeKv:
    """Ray's internal KV as a dict (one namespace is enough here)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.data: dict[str, bytes] = {}
        monkeypatch.setattr(ray_private, "kv_initialized", lambda: True)
        monkeypatch.setattr(ray_private, "kv_get", lambda k, namespace=None: self.data.get(k))
        monkeypatch.setattr(ray_private, "kv_put", self.put)
        monkeypatch.setattr(ray_private, "kv_del",
                            lambda k, namespace=None: self.data.pop(k, None))

    def put(self, key: str, value: Any, namespace: str | None = None) -> None:
        self.data[key] = value.encode() if isinstance(value, str) else bytes(value)


def test_a_name_the_running_fleet_does_not_have_is_a_value_error_naming_its_teams(
        monkeypatch: pytest.MonkeyPatch) -> None:
    FakeKv(monkeypatch)
    fleet_teams.publish_teams(FLEET)
    assert fleet_teams.check_bound_team("b") == "b"
    assert fleet_teams.check_bound_team(None) is None
    with pytest.raises(ValueError, match=r"team 'nosuchteam' is not in fleet 'platform''s "
                                         r"teams: a, b, c \(the fleet file's teams\[\]\)"):
        fleet_teams.check_bound_team("nosuchteam")
    with pytest.raises(ValueError, match="lowercase letters"):  # the name's form first
        fleet_teams.check_bound_team("Not A Name")


def test_without_a_running_fleet_only_the_names_form_is_checked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kv = FakeKv(monkeypatch)
    assert fleet_teams.check_bound_team("anyteam") == "anyteam"  # no arbiter ever ran
    fleet_teams.publish_teams(FLEET, now=1000.0)  # an arbiter gone long ago
    assert json.loads(kv.data[fleet_teams.TEAMS_KEY])["teams"] == ["a", "b", "c"]
    assert fleet_teams.check_bound_team("anyteam") == "anyteam"
    monkeypatch.setattr(ray_private, "kv_initialized", lambda: False)  # not connected
    fleet_teams.publish_teams(FLEET)
    assert fleet_teams.check_bound_team("anyteam") == "anyteam"


def test_a_stopped_part_removes_its_demand_entry_unless_another_wrote_it_since(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kv = FakeKv(monkeypatch)
    key = grants.DEMAND_PREFIX + "a/app"
    grants.report_demand("a", "app", {"h100": 1}, now=10.0)
    assert grants.withdraw_demand("a", "app", written_at=9.0) is False  # not ours any more
    assert key in kv.data
    assert grants.withdraw_demand("a", "app", written_at=10.0) is True
    assert key not in kv.data
    assert grants.withdraw_demand("a", "app", written_at=10.0) is False  # already gone
