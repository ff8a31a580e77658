"""Selector rules, one test each, on hand-written observation sequences."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import pytest

from ray_ladder import Constraints, Decision, Ladder, Selector, TransitionEvent

COMPUTE = ["h100", "a100", "l4", "cpu"]


def make_ladder(hysteresis: int = 1, max_degraded: float | None = None,
                tail: Iterable[str] = ("shed",)) -> Ladder:
    """h100 > a100 > l4 > cpu, then the given cache/shed rungs."""
    rungs: list[dict[str, object]] = [
        {"name": "h100", "resources": {"ladder/h100": 1}, "quality": 1.0, "cost_per_hour": 12.0,
         "tags": {"jurisdiction": "us"}},
        {"name": "a100", "resources": {"ladder/a100": 1}, "quality": 1.0, "cost_per_hour": 4.0,
         "tags": {"jurisdiction": "eu"}},
        {"name": "l4", "resources": {"ladder/l4": 1}, "quality": 0.8, "cost_per_hour": 0.8,
         "tags": {"jurisdiction": "eu"}},
        {"name": "cpu", "num_cpus": 1, "quality": 0.5, "cost_per_hour": 0.1,
         "tags": {"jurisdiction": "us"}},
    ]
    rungs += [{"name": k, "kind": k, "quality": 0.0} for k in tail]
    policy: dict[str, object] = {"promotion_hysteresis": hysteresis}
    if max_degraded is not None:
        policy["max_degraded_seconds"] = max_degraded
    return Ladder.from_dict({"name": "gpu", "policy": policy, "rungs": rungs})


def up(*names: str) -> dict[str, bool]:
    """An observation where exactly ``names`` (compute rungs) are obtainable."""
    return {n: n in names for n in COMPUTE}


ALL = up(*COMPUTE)


def run(sel: Selector, *observations: dict[str, bool], start: float = 0.0) -> list[Decision]:
    return [sel.observe(o, start + i) for i, o in enumerate(observations)]


# --- first observation -----------------------------------------------------------------


def test_first_observation_picks_the_best_obtainable_rung() -> None:
    sel = Selector(make_ladder(hysteresis=5))
    d = sel.observe(up("a100", "cpu"), now=0.0)
    assert (d.rung, d.previous, d.changed, d.direction) == ("a100", None, True, None)
    assert d.reason == "first observation"
    assert sel.current == "a100"


def test_first_observation_is_not_damped() -> None:
    d = Selector(make_ladder(hysteresis=5)).observe(ALL, now=0.0)
    assert d.rung == "h100"


def test_missing_rungs_count_as_unobtainable() -> None:
    sel = Selector(make_ladder())
    assert sel.observe({"l4": True}, 0).rung == "l4"
    assert sel.observe({}, 1).rung == "shed"


def test_cache_and_shed_are_always_obtainable() -> None:
    assert Selector(make_ladder(tail=("cache", "shed"))).observe({}, 0).rung == "cache"
    assert Selector(make_ladder(tail=("shed",))).observe({}, 0).rung == "shed"
    # Even when the caller says otherwise: they run no code that capacity could stop.
    sel = Selector(make_ladder(tail=("cache", "shed")))
    assert sel.observe({"cache": False, "shed": False}, 0).rung == "cache"


def test_unknown_names_in_an_observation_are_ignored() -> None:
    d = Selector(make_ladder()).observe({"tpu": True, "cpu": True}, 0)
    assert d.rung == "cpu"


# --- descent ---------------------------------------------------------------------------


def test_descent_is_immediate_whatever_the_hysteresis() -> None:
    sel = Selector(make_ladder(hysteresis=100))
    run(sel, ALL)
    d = sel.observe(up("a100", "l4", "cpu"), 1)
    assert (d.rung, d.previous, d.changed, d.direction) == ("a100", "h100", True, "down")
    assert d.reason == "h100 unobtainable"


def test_descent_skips_every_unobtainable_rung() -> None:
    sel = Selector(make_ladder(hysteresis=3))
    run(sel, ALL)
    assert sel.observe(up("cpu"), 1).rung == "cpu"
    assert sel.observe(up(), 2).rung == "shed"


def test_descent_may_land_above_the_lost_rung() -> None:
    # At a100 (h100 gone), h100 comes back but its streak (1) is short of 3; then a100
    # is lost: the best obtainable rung is h100, so the selector goes there at once.
    sel = Selector(make_ladder(hysteresis=3))
    run(sel, up("a100", "l4"), up("h100", "a100", "l4"))
    assert sel.current == "a100"
    d = sel.observe(up("h100", "l4"), 2)
    assert (d.rung, d.direction, d.reason) == ("h100", "up", "a100 unobtainable")


def test_rungs_below_do_not_move_the_selector() -> None:
    sel = Selector(make_ladder(hysteresis=1))
    run(sel, ALL)
    d = sel.observe(up("h100"), 1)
    assert (d.rung, d.changed, d.direction, d.reason) == ("h100", False, None, "unchanged")
    assert d.previous == "h100"


# --- climbing --------------------------------------------------------------------------


def test_default_hysteresis_climbs_at_the_first_sighting() -> None:
    sel = Selector(make_ladder())
    assert sel.hysteresis == 1
    run(sel, up("cpu"))
    d = sel.observe(ALL, 1)
    assert (d.rung, d.direction, d.reason) == ("h100", "up", "h100 obtainable for 1 observation(s)")


def test_no_climb_before_the_streak_completes() -> None:
    sel = Selector(make_ladder(hysteresis=3))
    ds = run(sel, up("a100"), ALL, ALL, ALL)
    assert [d.rung for d in ds] == ["a100", "a100", "a100", "h100"]
    assert [d.changed for d in ds] == [True, False, False, True]
    assert ds[-1].direction == "up"
    assert ds[-1].reason == "h100 obtainable for 3 observation(s)"


def test_a_flap_resets_the_streak() -> None:
    sel = Selector(make_ladder(hysteresis=3))
    a = up("a100")
    ds = run(sel, a, ALL, ALL, a, ALL, ALL, ALL)
    assert [d.rung for d in ds] == ["a100"] * 6 + ["h100"]
    assert sel.streak("h100") == 3


def test_climb_goes_to_the_best_rung_whose_streak_is_complete() -> None:
    sel = Selector(make_ladder(hysteresis=2))
    run(sel, up("cpu"), up("a100", "cpu"))
    # a100 has 2 in a row, h100 only 1: climb to a100, not to h100 and not to l4.
    d = sel.observe(up("h100", "a100", "l4", "cpu"), 2)
    assert (d.rung, d.direction) == ("a100", "up")
    d = sel.observe(ALL, 3)
    assert (d.rung, d.direction) == ("h100", "up")


def test_climb_skips_intermediate_rungs() -> None:
    sel = Selector(make_ladder(hysteresis=2))
    run(sel, up("cpu"), ALL)
    d = sel.observe(ALL, 2)
    assert (d.previous, d.rung) == ("cpu", "h100")


def test_streak_counts_sightings_before_the_fall() -> None:
    # a100 was seen obtainable while the ladder sat on h100; those sightings count.
    sel = Selector(make_ladder(hysteresis=3))
    run(sel, ALL, ALL)
    assert sel.observe(up("l4"), 2).rung == "l4"
    assert sel.streak("a100") == 0
    assert sel.observe(up("a100", "l4"), 3).rung == "l4"


def test_climb_from_shed_is_damped() -> None:
    sel = Selector(make_ladder(hysteresis=2))
    ds = run(sel, up(), up("cpu"), up("cpu"))
    assert [d.rung for d in ds] == ["shed", "shed", "cpu"]


def test_promotion_hysteresis_override() -> None:
    sel = Selector(make_ladder(hysteresis=5), promotion_hysteresis=2)
    assert sel.hysteresis == 2
    assert [d.rung for d in run(sel, up("cpu"), ALL, ALL)] == ["cpu", "cpu", "h100"]


@pytest.mark.parametrize("bad", [0, -1])
def test_promotion_hysteresis_below_one_is_rejected(bad: int) -> None:
    with pytest.raises(ValueError, match="promotion_hysteresis must be >= 1"):
        Selector(make_ladder(), promotion_hysteresis=bad)


# --- exhaustion ------------------------------------------------------------------------


def test_exhausted_ladder_selects_nothing() -> None:
    sel = Selector(make_ladder(hysteresis=3, tail=()))
    run(sel, ALL)
    d = sel.observe(up(), 1)
    assert (d.rung, d.previous, d.changed, d.direction) == (None, "h100", True, "down")
    assert d.reason == "h100 unobtainable; every eligible rung unobtainable"
    d = sel.observe(up(), 2)
    assert (d.rung, d.changed, d.direction, d.reason) == (None, False, None, "unchanged")


def test_from_nothing_the_best_obtainable_rung_is_taken_at_once() -> None:
    sel = Selector(make_ladder(hysteresis=3, tail=()))
    run(sel, ALL, up())
    d = sel.observe(up("l4", "cpu"), 2)
    assert (d.rung, d.previous, d.changed, d.direction) == ("l4", None, True, "up")
    assert d.reason == "capacity returned"


def test_first_observation_with_nothing_obtainable() -> None:
    sel = Selector(make_ladder(tail=()))
    d = sel.observe(up(), 0)
    assert (d.rung, d.previous, d.changed, d.direction) == (None, None, False, None)
    d = sel.observe(up("cpu"), 1)
    assert (d.rung, d.direction, d.reason) == ("cpu", "up", "capacity returned")


# --- constraints -----------------------------------------------------------------------


def test_ineligible_rungs_are_never_selected() -> None:
    sel = Selector(make_ladder(), Constraints(jurisdiction="eu"))
    assert sel.eligible == ["a100", "l4", "shed"]
    assert sel.observe(ALL, 0).rung == "a100"
    assert sel.observe(up("h100", "cpu"), 1).rung == "shed"


def test_cost_and_quality_constraints() -> None:
    ladder = make_ladder(tail=("cache", "shed"))
    assert Selector(ladder, Constraints(max_cost_per_hour=5.0)).observe(ALL, 0).rung == "a100"
    sel = Selector(ladder, Constraints(min_quality=0.8))
    assert sel.eligible == ["h100", "a100", "l4", "shed"]
    assert sel.observe(up("cpu"), 0).rung == "shed"


def test_degraded_is_measured_against_the_best_eligible_rung() -> None:
    sel = Selector(make_ladder(max_degraded=1), Constraints(jurisdiction="eu"))
    ds = run(sel, ALL, ALL, ALL)
    assert [d.rung for d in ds] == ["a100"] * 3
    assert all(d.degraded_s == 0 and not d.alert for d in ds)


# --- degraded time and the alert -------------------------------------------------------


def test_degraded_seconds_count_from_the_fall() -> None:
    sel = Selector(make_ladder(hysteresis=2))
    assert sel.observe(ALL, 100.0).degraded_s == 0
    assert sel.observe(up("l4"), 110.0).degraded_s == 0
    # Moving between degraded rungs keeps the episode going.
    assert sel.observe(up("cpu"), 115.0).degraded_s == 5
    assert sel.observe(ALL, 120.0).degraded_s == 10
    d = sel.observe(ALL, 130.0)
    assert (d.rung, d.degraded_s) == ("h100", 0)
    # A new fall starts a new episode.
    assert sel.observe(up("a100"), 140.0).degraded_s == 0
    assert sel.observe(up("a100"), 141.5).degraded_s == 1.5


def test_degraded_from_the_first_observation() -> None:
    sel = Selector(make_ladder())
    assert sel.observe(up("cpu"), 7.0).degraded_s == 0
    assert sel.observe(up("cpu"), 9.0).degraded_s == 2


def test_alert_once_per_episode_when_degraded_exceeds_the_limit() -> None:
    sel = Selector(make_ladder(hysteresis=1, max_degraded=10))
    sel.observe(ALL, 0)
    alerts = [sel.observe(up("l4"), t).alert for t in (1, 6, 11, 11.5, 12, 100)]
    # degraded_s: 0, 5, 10 (not above 10), 10.5 (alert), 11, 99
    assert alerts == [False, False, False, True, False, False]
    sel.observe(ALL, 101)  # back on the best rung: the episode ends
    alerts = [sel.observe(up("cpu"), t).alert for t in (102, 113, 114)]
    assert alerts == [False, True, False]


def test_exhaustion_counts_as_degraded() -> None:
    sel = Selector(make_ladder(max_degraded=5, tail=()))
    sel.observe(up(), 0)
    d = sel.observe(up(), 6)
    assert (d.rung, d.degraded_s, d.alert) == (None, 6, True)


def test_no_alert_without_max_degraded_seconds() -> None:
    sel = Selector(make_ladder())
    assert not any(d.alert for d in run(sel, up("cpu"), up("cpu"), up("cpu"), start=0)
                   + [sel.observe(up("cpu"), 1e9)])


# --- decisions and events --------------------------------------------------------------


def test_decision_is_frozen_and_carries_the_time() -> None:
    d = Selector(make_ladder()).observe(ALL, 42.5)
    assert d.time == 42.5
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.rung = "cpu"  # type: ignore[misc]


def test_decision_event_only_when_changed() -> None:
    sel = Selector(make_ladder())
    first = sel.observe(ALL, 0)
    assert first.event("gpu") == TransitionEvent(0, "gpu", None, "h100", None,
                                                 "first observation", cause="first")
    assert sel.observe(ALL, 1).event("gpu") is None
    fall = sel.observe(up("cpu"), 2).event("gpu")
    assert fall == TransitionEvent(2, "gpu", "h100", "cpu", "down", "h100 unobtainable",
                                   cause="lost")


def test_on_event_gets_every_change_and_every_alert() -> None:
    events: list[TransitionEvent] = []
    sel = Selector(make_ladder(hysteresis=2, max_degraded=3), on_event=events.append)
    run(sel, ALL, up("a100"), up("a100"), up("a100"), up("a100"), up("a100"), ALL, ALL)
    assert [(e.kind, e.from_rung, e.to_rung, e.direction, e.time) for e in events] == [
        ("transition", None, "h100", None, 0),
        ("transition", "h100", "a100", "down", 1),
        ("alert", "a100", "a100", None, 5),
        ("transition", "a100", "h100", "up", 7),
    ]
    assert all(e.ladder == "gpu" for e in events)
    assert "max_degraded_seconds 3.0" in events[2].reason
    assert [e.cause for e in events] == ["first", "lost", "other", "promoted"]


# --- causes: data set where the reason is written --------------------------------------


def test_each_transition_carries_its_cause() -> None:
    sel = Selector(make_ladder(hysteresis=2, tail=()))
    assert sel.observe(up("a100"), 0).cause == "first"
    assert sel.observe(up("a100"), 1).cause == "other"  # unchanged
    lost = sel.observe(up("l4"), 2)
    assert (lost.rung, lost.cause) == ("l4", "lost")
    not_yet = sel.observe(up("h100", "l4"), 3)
    assert (not_yet.rung, not_yet.changed, not_yet.cause) == ("l4", False, "other")
    promoted = sel.observe(up("h100", "l4"), 4)  # after the hysteresis (2)
    assert (promoted.rung, promoted.direction, promoted.cause) == ("h100", "up", "promoted")
    exhausted = sel.observe(up(), 5)
    assert (exhausted.rung, exhausted.cause) == (None, "exhausted")
    returned = sel.observe(up("cpu"), 6)
    assert (returned.rung, returned.direction, returned.cause) == ("cpu", "up", "returned")
    sel.reset()  # a new placement: its pick is a first one again
    assert sel.observe(up("cpu"), 7).cause == "first"


def test_a_fall_off_a_going_away_rung_is_a_preemption_notice() -> None:
    sel = Selector(make_ladder())
    sel.observe(ALL, 0)
    d = sel.observe(up("a100", "cpu"), 1, going={"h100"})
    assert (d.rung, d.reason, d.cause) == ("a100", "h100 unobtainable", "preemption_notice")
    event = d.event("gpu")
    assert event is not None and event.cause == "preemption_notice"
    # Only the rung it falls from counts; the words of ``why`` never do.
    d = sel.observe(up("cpu"), 2, why={"a100": "fell on preemption notice: words only"},
                    going={"h100"})
    assert (d.rung, d.cause) == ("cpu", "lost")


def test_selector_does_not_mutate_the_observation() -> None:
    obs = up("l4")
    frozen = dict(obs)
    Selector(make_ladder()).observe(obs, 0)
    assert obs == frozen


def test_selectors_are_independent() -> None:
    ladder = make_ladder(hysteresis=2)
    a, b = Selector(ladder), Selector(ladder)
    run(a, up("cpu"), ALL)
    assert b.observe(ALL, 0).rung == "h100"
    assert a.current == "cpu"


# --- the worked example of docs/selector.md --------------------------------------------

WORKED = [
    # t, obtainable compute rungs, rung, direction, changed, reason, degraded_s, alert
    (0, "h100 a100 l4 cpu", "h100", None, True, "first observation", 0, False),
    (5, "a100 l4 cpu", "a100", "down", True, "h100 unobtainable", 0, False),
    (10, "h100 a100 l4 cpu", "a100", None, False, "unchanged", 5, False),
    (15, "l4 cpu", "l4", "down", True, "a100 unobtainable", 10, False),
    (20, "h100 a100 l4 cpu", "l4", None, False, "unchanged", 15, True),
    (25, "h100 a100 l4 cpu", "h100", "up", True, "h100 obtainable for 2 observation(s)", 0,
     False),
    (30, "", "shed", "down", True, "h100 unobtainable", 0, False),
    (35, "cpu", "shed", None, False, "unchanged", 5, False),
    (40, "cpu", "cpu", "up", True, "cpu obtainable for 2 observation(s)", 10, False),
    (45, "l4", "l4", "up", True, "cpu unobtainable", 15, True),
    (50, "h100 a100 l4 cpu", "l4", None, False, "unchanged", 20, False),
    (55, "h100 a100 l4 cpu", "h100", "up", True, "h100 obtainable for 2 observation(s)", 0,
     False),
]


def test_worked_example_from_the_docs() -> None:
    sel = Selector(make_ladder(hysteresis=2, max_degraded=10))
    causes = []
    for t, obtainable, rung, direction, changed, reason, degraded, alert in WORKED:
        d = sel.observe(up(*obtainable.split()), t)
        got = (d.rung, d.direction, d.changed, d.reason, d.degraded_s, d.alert)
        assert got == (rung, direction, changed, reason, degraded, alert), f"t={t}"
        causes.append(d.cause)
    assert causes == ["first", "lost", "other", "lost", "other", "promoted", "lost",
                      "other", "promoted", "lost", "other", "promoted"]
