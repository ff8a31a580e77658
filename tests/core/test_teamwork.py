"""What work bound to a fleet team asks the arbiter for, and its binding's check (pure)."""

from __future__ import annotations

import pytest

from ray_ladder.core.teamwork import check_fleet_team, check_team, under_notice, wanted_units

ELIGIBLE = ["h100", "a100", "l4"]


def test_on_the_best_rung_it_wants_what_it_holds() -> None:
    assert wanted_units({"h100": 3}, ELIGIBLE) == {"h100": 3, "a100": 0, "l4": 0}


def test_below_the_best_rung_it_also_wants_one_piece_there() -> None:
    assert wanted_units({"a100": 2, "l4": 1}, ELIGIBLE) == {"h100": 1, "a100": 2, "l4": 1}
    assert wanted_units({"h100": 1, "l4": 1}, ELIGIBLE) == {"h100": 2, "a100": 0, "l4": 1}
    # a Train gang: its whole gang on the best rung
    assert wanted_units({"a100": 4}, ELIGIBLE, best_units=4) == {"h100": 4, "a100": 4,
                                                                 "l4": 0}


def test_waiting_work_wants_the_best_rung() -> None:
    assert wanted_units({}, ELIGIBLE, waiting=2) == {"h100": 1, "a100": 0, "l4": 0}
    assert wanted_units({}, ELIGIBLE) == {"h100": 0, "a100": 0, "l4": 0}


def test_rungs_it_may_not_use_are_never_wanted() -> None:
    assert wanted_units({"a100": 1, "cpu": 5}, ["a100"]) == {"a100": 1}
    assert wanted_units({"a100": 1}, []) == {}


def test_a_notice_on_any_unit_of_the_rung_asks_for_a_checkpoint() -> None:
    entry = {"rungs": {"h100": {"held": 2, "noticed": 1}, "a100": {"held": 1}}}
    assert under_notice(entry, "h100")
    assert not under_notice(entry, "a100")
    assert not under_notice(entry, "l4") and not under_notice(None, "h100")
    assert not under_notice(entry, None)


def test_the_team_name_is_checked() -> None:
    assert check_team(None) is None and check_team("team-b.1") == "team-b.1"
    for bad in ("Team", "b!", "", " b", 1):
        with pytest.raises(ValueError, match="fleet team's name"):
            check_team(bad)


def test_a_bound_team_must_be_one_of_the_fleets_teams() -> None:
    assert check_fleet_team("a", "platform", ["a", "b"]) == "a"
    assert check_fleet_team(None, "platform", ["a"]) is None
    with pytest.raises(ValueError) as err:
        check_fleet_team("nosuchteam", "platform", ["c", "a", "b"])
    assert str(err.value).startswith(
        "team 'nosuchteam' is not in fleet 'platform''s teams: a, b, c (the fleet file's "
        "teams[])")
