"""The core's shared rules: the selector's "best obtainable" query, holding a released
rung, and label expressions (each written once, used by tasks, Serve, Tune and the view)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ray_ladder import Constraints, Ladder, Selector
from ray_ladder.core.placement import held_back, label_expr_matches, label_matches

LADDER = Ladder.from_dict({
    "name": "q",
    "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}, "tags": {"jurisdiction": "us"}},
        {"name": "a100", "resources": {"ladder/a100": 1}, "tags": {"jurisdiction": "eu"}},
        {"name": "l4", "resources": {"ladder/l4": 1}, "tags": {"jurisdiction": "eu"}},
        {"name": "cache", "kind": "cache"},
        {"name": "shed", "kind": "shed"},
    ],
})
COMPUTE = ["h100", "a100", "l4"]


def test_best_obtainable_reads_obtainable_like_observe_and_moves_nothing() -> None:
    sel = Selector(LADDER)
    sel.observe({"h100": True}, now=0.0)
    assert sel.best_obtainable({"a100": True, "l4": True}) == "a100"
    assert sel.best_obtainable({}) == "cache"  # cache is always obtainable
    assert sel.best_obtainable({}, compute_only=True) is None
    assert sel.current == "h100" and sel.streak("h100") == 1  # a query, not an observation


def test_best_obtainable_at_or_below_a_rung_and_with_exclusions() -> None:
    sel = Selector(LADDER)
    everything = dict.fromkeys(COMPUTE, True)
    assert sel.best_obtainable(everything, at_or_below="a100") == "a100"
    assert sel.best_obtainable(everything, at_or_below="a100", exclude={"a100"}) == "l4"
    assert sel.best_obtainable(everything, at_or_below="cache", compute_only=True) is None


def test_best_obtainable_never_leaves_the_constraints() -> None:
    sel = Selector(LADDER, Constraints(jurisdiction="eu"))
    assert sel.best_obtainable({"h100": True, "l4": True}) == "l4"


@given(st.dictionaries(st.sampled_from(COMPUTE), st.booleans()))
def test_best_obtainable_is_what_a_first_observation_picks(obtainable: dict[str, bool]) -> None:
    assert Selector(LADDER).best_obtainable(obtainable) == \
        Selector(LADDER).observe(obtainable, now=0.0).rung


def test_reset_makes_the_next_observation_a_first_pick() -> None:
    sel = Selector(LADDER, promotion_hysteresis=3)
    sel.observe({"a100": True}, now=0.0)
    sel.observe({"h100": True, "a100": True}, now=1.0)
    sel.reset()
    assert sel.streak("h100") == 0 and sel.current is None
    assert sel.observe({"h100": True, "a100": True}, now=2.0).rung == "h100"  # no wait


def test_a_released_rung_is_held_only_while_a_better_one_can_take_the_work() -> None:
    up = dict.fromkeys(COMPUTE, True)
    assert held_back(COMPUTE, {"a100"}, up) == ["a100"]
    assert held_back(COMPUTE, {"a100"}, {**up, "h100": False}) == []
    assert held_back(COMPUTE, set(), up) == []
    # A better rung that is not ready yet (its replica still starts) holds nothing.
    assert held_back(COMPUTE, {"a100"}, up, ready=lambda r: r != "h100") == []


def test_holding_is_top_down_a_held_rung_is_no_better_rung_for_those_below() -> None:
    up = {"h100": False, "a100": True, "l4": True}
    assert held_back(COMPUTE, {"a100", "l4"}, up) == ["l4"]  # a100 has nothing above it
    assert held_back(["a100", "l4"], {"a100"}, up) == []  # an eu-only consumer keeps it


def test_label_expressions_ignore_spaces_everywhere() -> None:
    assert label_expr_matches(" in( a , b ) ", "b")
    assert label_expr_matches("! in(a,b)", "c")
    assert label_expr_matches("!a", None) and not label_expr_matches("a", None)
    assert label_matches({"zone": " eu "}, {"zone": "eu"})
    assert not label_matches({"zone": "eu", "gpu": "h100"}, {"zone": "eu"})
