"""Capacity types: every rule of a rung's `capacity` (good and bad files), and the window gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from ray_ladder import ConfigError, Constraints, Ladder, Selector, load_ladder
from ray_ladder.core.capacity_type import (
    DEFAULT_LEAVE_BEFORE_S,
    DEFAULT_MAX_WAIT_S,
    CapacitySpec,
    gate,
    usable_at,
)

DATA = Path(__file__).parents[1] / "data" / "capacity"
EXAMPLE = Path(__file__).parents[2] / "examples" / "ladders" / "capacity.yaml"
H = "rungs[0] (h100).capacity"

# file -> (field path, text the message must contain, text the fix must contain).
BAD_FILES: dict[str, tuple[str, str, str]] = {
    "type_unknown.yaml": (f"{H}.type", "'flex-start' or 'capacity-block' (got 'flex')",
                          "allowed values"),
    "unknown_key.yaml": (f"{H}.max_wait", "Extra inputs", "max_wait_s"),
    "reservation_missing.yaml": (f"{H}.reservation", "names the reservation", "reservation:"),
    "reservation_on_spot.yaml": (f"{H}.reservation", "not type spot", "type: reservation"),
    "reservation_unknown_cloud.yaml": (f"{H}.reservation", "got ['ibm']", "aws, gcp or azure"),
    "reservation_empty.yaml": (f"{H}.reservation", "must not be empty", "reservation id"),
    "max_wait_on_spot.yaml": (f"{H}.max_wait_s", "does not apply to type spot",
                              "type: flex-start"),
    "max_wait_zero.yaml": (f"{H}.max_wait_s", "greater than 0 (got 0)", "greater than 0"),
    "max_run_too_long.yaml": (f"{H}.max_run_s", "604800 (got 700000)", "604800"),
    "window_on_reservation.yaml": (f"{H}.start", "does not apply to type reservation",
                                   "type: capacity-block"),
    "block_without_end.yaml": (f"{H}.end", "needs its window's end", "ISO 8601"),
    "block_naive_time.yaml": (f"{H}.start", "timezone", "Z (UTC)"),
    "block_time_not_a_time.yaml": (f"{H}.start", "got 1772451000", "ISO 8601"),
    "block_ends_before_start.yaml": (f"{H}.end", "end (2026-03-02T11:30:00+00:00) <= start",
                                     "after start"),
    "block_leave_too_early.yaml": (f"{H}.leave_before_s",
                                   "leave_before_s (2400) >= the window (1800 s)",
                                   "below the window length"),
    "spot_tag_contradicts.yaml": (f"{H}.type", "reservation contradicts tags.spot ('true')",
                                  "remove tags.spot"),
    "on_shed_rung.yaml": ("rungs[1] (shed).capacity", "not a shed rung", "remove capacity"),
}


def test_every_bad_file_has_a_rule_test() -> None:
    assert {p.name for p in (DATA / "bad").iterdir()} == set(BAD_FILES)


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_file_error_names_the_field_and_the_fix(name: str) -> None:
    path, message, fix = BAD_FILES[name]
    file = DATA / "bad" / name
    with pytest.raises(ConfigError) as info:
        load_ladder(file)
    err = info.value
    assert len(err.issues) == 1, str(err)
    issue = err.issues[0]
    assert issue.path == path
    assert message in str(err)
    assert fix in issue.fix
    assert str(err).startswith(f"invalid ladder in {file}:")


@pytest.mark.parametrize("path", sorted((DATA / "good").iterdir()) + [EXAMPLE],
                         ids=lambda p: p.name)
def test_good_files_load_and_round_trip(path: Path) -> None:
    ladder = load_ladder(path)
    assert Ladder.from_yaml(ladder.to_yaml()) == ladder
    assert any(r.capacity is not None for r in ladder.rungs)


def test_the_example_holds_all_four_mechanisms() -> None:
    ladder = load_ladder(EXAMPLE)
    types = [r.capacity.type if r.capacity else None for r in ladder.rungs]
    assert types == ["reservation", "capacity-block", "flex-start", "spot", None, None, None]
    block = ladder.rung("h100-block").capacity
    assert block is not None and block.window() == (1772451000.0, 1773055800.0 - 2400)
    assert ladder.rung("h100-reserved").capacity.reservation_for("gcp") == "h100-reserved"  # type: ignore[union-attr]
    assert ladder.rung("h100-block").capacity.reservation_for("azure") is None  # type: ignore[union-attr]


def test_defaults_and_json_times() -> None:
    ladder = load_ladder(DATA / "good" / "block-defaults.json")
    block = ladder.rung("h100-block").capacity
    flex = ladder.rung("h100-flex").capacity
    assert block is not None and flex is not None
    assert block.leave_before == DEFAULT_LEAVE_BEFORE_S == 2400
    assert block.window() == (1772447400.0, 1772533800.0 - 2400)  # +01:00 honoured
    assert flex.queued and flex.wait_s == DEFAULT_MAX_WAIT_S == 7200
    assert ladder.rung("cpu").capacity is None


def test_one_name_for_every_cloud_and_a_spot_tag_that_agrees() -> None:
    ladder = load_ladder(DATA / "good" / "one-reservation-name.yaml")
    cap = ladder.rung("h100").capacity
    assert cap is not None
    assert [cap.reservation_for(c) for c in ("aws", "gcp", "azure")] == ["my-h100-reservation"] * 3


def test_describe_is_what_show_prints() -> None:
    ladder = load_ladder(EXAMPLE)
    text = [r.capacity.describe() for r in ladder.rungs if r.capacity]
    assert text[0] == ("reservation aws=cr-0123456789abcdef0, gcp=h100-reserved, "
                       "azure=.../h100-reserved")
    assert text[1] == ("capacity-block aws=cr-0fedcba9876543210, gcp=h100-calendar "
                       "2026-03-02T11:30:00Z..2026-03-09T11:30:00Z (leaves 40m early)")
    assert text[2:] == ["flex-start (max wait 2h, max run 7d)", "spot"]


# --- the window as obtainability ---------------------------------------------------------

BLOCK = CapacitySpec(type="capacity-block", reservation="cr-1", leave_before_s=100,
                     start="1970-01-01T01:00:00Z", end="1970-01-01T02:00:00Z")


@pytest.mark.parametrize(("now", "usable"), [(3599.9, False), (3600, True), (7099.9, True),
                                             (7100, False), (7200, False), (9999, False)])
def test_a_block_is_usable_from_start_until_leave_before_the_end(now: float, usable: bool) -> None:
    assert usable_at(BLOCK, now) is usable


@pytest.mark.parametrize("cap", [None, CapacitySpec(), CapacitySpec(type="spot"),
                                 CapacitySpec(type="flex-start"),
                                 CapacitySpec(type="reservation", reservation="r")])
def test_other_types_are_usable_at_any_time(cap: CapacitySpec | None) -> None:
    assert usable_at(cap, 0.0) and usable_at(cap, 1e10)


BLOCK_LADDER = Ladder.from_dict({
    "name": "blk", "policy": {"promotion_hysteresis": 2},
    "rungs": [{"name": "h100-block", "resources": {"ladder/h100-block": 1},
               "capacity": BLOCK.model_dump(mode="json", exclude_defaults=True)},
              {"name": "a100", "resources": {"ladder/a100": 1}, "quality": 0.9},
              {"name": "shed", "kind": "shed", "quality": 0}]})


def test_gate_only_ever_turns_a_closed_block_off() -> None:
    rungs = BLOCK_LADDER.rungs
    assert gate(rungs, {"h100-block": True, "a100": True}, 100) == {"h100-block": False,
                                                                    "a100": True}
    assert gate(rungs, {"h100-block": True, "a100": False}, 4000) == {"h100-block": True,
                                                                     "a100": False}
    assert gate(rungs, {"h100-block": False}, 4000) == {"h100-block": False}
    assert gate(rungs, {"a100": True}, 100) == {"a100": True}  # absent stays absent


def test_the_selector_climbs_into_the_window_and_leaves_before_it_ends() -> None:
    """The block's nodes are up the whole time; only the clock moves the ladder."""
    sel = Selector(BLOCK_LADDER, Constraints())
    seen = []
    for now in (3500, 3550, 3600, 3650, 3700, 7050, 7100, 7150):
        d = sel.observe(gate(BLOCK_LADDER.rungs, {"h100-block": True, "a100": True}, now), now)
        seen.append((now, d.rung, d.direction))
    assert seen == [(3500, "a100", None), (3550, "a100", None),
                    (3600, "a100", None),        # open: streak 1 of 2
                    (3650, "h100-block", "up"),  # hysteresis as always
                    (3700, "h100-block", None), (7050, "h100-block", None),
                    (7100, "a100", "down"),      # leave_before_s (100) before the end: at once
                    (7150, "a100", None)]
