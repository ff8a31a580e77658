"""The arbiter's pure rules (core/arbiter.py): entitlement, grants, reclaim by notice,
budgets, without Ray."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ray_ladder.core.arbiter import Holdings, decide, entitlements, water_fill
from ray_ladder.core.fleet import Fleet


def fleet(*teams: dict, cost: float = 0.0) -> Fleet:
    return Fleet.from_dict({"fleet": "f", "rungs": {"h100": {"resources": {"ladder/h100": 1},
                                                             "cost_per_hour": cost}},
                            "teams": list(teams)})


A = {"name": "a", "quota": {"h100": 2}, "cohort": "c"}
B = {"name": "b", "quota": {"h100": 2}, "cohort": "c"}


def test_a_team_is_entitled_to_its_demand_up_to_its_quota_first() -> None:
    assert entitlements(fleet(A, B), "h100", 4, {"a": 1, "b": 1}) == {"a": 1, "b": 1}


def test_idle_quota_is_lent_within_the_cohort() -> None:
    assert entitlements(fleet(A, B), "h100", 4, {"b": 4}) == {"a": 0, "b": 4}


def test_a_team_without_a_cohort_neither_lends_nor_borrows_owned_units() -> None:
    lone = {"name": "a", "quota": {"h100": 2}}
    assert entitlements(fleet(lone, B), "h100", 4, {"b": 4}) == {"a": 0, "b": 2}
    assert entitlements(fleet(lone, B), "h100", 5, {"a": 5}) == {"a": 3, "b": 0}  # 1 unowned


def test_limits_bound_lending_and_borrowing() -> None:
    a = {**A, "lending_limit": {"h100": 1}}
    assert entitlements(fleet(a, B), "h100", 4, {"b": 4}) == {"a": 0, "b": 3}
    b = {**B, "borrowing_limit": {"h100": 1}}
    assert entitlements(fleet(A, b), "h100", 4, {"b": 4}) == {"a": 0, "b": 3}


def test_lent_units_are_shared_by_weight() -> None:
    c = {"name": "c", "cohort": "c", "weight": 3.0}
    d = {"name": "d", "cohort": "c", "weight": 1.0}
    out = entitlements(fleet(A, c, d), "h100", 10, {"c": 10, "d": 10})
    assert out == {"a": 0, "c": 8, "d": 2}  # 2 lent by a, 8 unowned: 10 by 3:1 is 7.5:2.5


def test_with_fewer_units_than_quotas_ask_the_owned_demand_is_shared_by_weight() -> None:
    assert entitlements(fleet(A, {**B, "weight": 3.0}), "h100", 2,
                        {"a": 2, "b": 2}) == {"a": 0, "b": 2}


def test_a_reclaim_is_a_notice_then_the_units_move_at_the_deadline() -> None:
    f = fleet(A, {**B, "reclaim_grace_s": 10.0})
    state = decide(f, Holdings(), {"h100": 4}, {"b": {"h100": 4}}, 0.0).state
    assert state.units("b", "h100") == 4
    out = decide(f, state, {"h100": 4}, {"a": {"h100": 2}, "b": {"h100": 4}}, 1.0)
    [notice] = out.notices
    assert (notice.borrower, notice.owed_to, notice.units, notice.deadline) == ("b", "a", 2, 11.0)
    assert "nominal quota" in notice.reason
    assert out.state.units("b", "h100") == 4 and out.state.going("b", "h100") == notice
    still = decide(f, out.state, {"h100": 4}, {"a": {"h100": 2}, "b": {"h100": 4}}, 5.0)
    assert still.notices == () and still.state.units("b", "h100") == 4  # the grace runs
    moved = decide(f, still.state, {"h100": 4}, {"a": {"h100": 2}, "b": {"h100": 4}}, 11.0)
    assert moved.transferred == (notice,)
    assert (moved.state.units("a", "h100"), moved.state.units("b", "h100")) == (2, 2)
    assert moved.state.reclaims == ()


def test_a_borrower_that_moves_early_frees_the_units_before_the_deadline() -> None:
    f = fleet(A, B)
    state = decide(f, Holdings(), {"h100": 4}, {"b": {"h100": 4}}, 0.0).state
    state = decide(f, state, {"h100": 4}, {"a": {"h100": 2}, "b": {"h100": 4}}, 1.0).state
    out = decide(f, state, {"h100": 4}, {"a": {"h100": 2}, "b": {"h100": 2}}, 2.0)
    assert out.state.units("a", "h100") == 2 and out.state.reclaims == ()


def test_budget_spent_makes_the_team_demote_and_release_priced_units() -> None:
    f = fleet({**A, "budget": {"max_cost": 10.0, "window_s": 7200}}, B, cost=10.0)
    state = decide(f, Holdings(), {"h100": 4}, {"a": {"h100": 1}}, 0.0).state
    out = decide(f, state, {"h100": 4}, {"a": {"h100": 1}}, 3600.0)  # 1 unit-hour = 10
    assert out.state.spent["a"] == 10.0
    after = decide(f, out.state, {"h100": 4}, {"a": {"h100": 1}}, 3601.0)
    assert after.budget["a"] == "demote" and after.state.units("a", "h100") == 0
    fresh = decide(f, after.state, {"h100": 4}, {"a": {"h100": 1}}, 7300.0)
    assert fresh.budget["a"] == "ok"


# --- properties -------------------------------------------------------------------------------

TEAMS = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 12),
                           st.sampled_from([1.0, 2.0, 3.0]), st.booleans()),
                 min_size=1, max_size=5)


def _fleet(spec) -> Fleet:
    return fleet(*({"name": f"t{i}", "quota": {"h100": q}, "weight": w,
                    **({"cohort": "c"} if c else {})} for i, (q, _, w, c) in enumerate(spec)))


@settings(max_examples=300, deadline=None)
@given(TEAMS, st.integers(0, 30))
def test_entitlements_fit_capacity_demand_and_nominal(spec, capacity) -> None:
    f = _fleet(spec)
    demand = {f"t{i}": d for i, (_, d, _, _) in enumerate(spec)}
    out = entitlements(f, "h100", capacity, demand)
    assert sum(out.values()) <= capacity
    own = {f"t{i}": min(d, q) for i, (q, d, _, _) in enumerate(spec)}
    for name, units in out.items():
        assert 0 <= units <= demand[name]
        if sum(own.values()) <= capacity:
            assert units >= own[name]  # a team's nominal quota is its own


def _fluid(wants: dict[str, float], weights: dict[str, float], units: float) -> dict[str, float]:
    """The exact (real-valued) weighted water-filling, by removing saturated teams."""
    out = {n: 0.0 for n in wants}
    active = {n for n in wants if wants[n] > 0}
    left = float(units)
    while active and left > 1e-12:
        level = left / sum(weights[n] for n in active)
        full = {n for n in active if wants[n] - out[n] <= level * weights[n]}
        if not full:
            for n in active:
                out[n] += level * weights[n]
            break
        for n in full:
            left -= wants[n] - out[n]
            out[n] = wants[n]
        active -= full
    return out


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 20), min_size=1),
       st.integers(0, 60), st.data())
def test_water_fill_is_within_one_unit_of_the_exact_weighted_share(wants, units, data) -> None:
    weights = {n: data.draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])) for n in wants}
    got = water_fill(wants, weights, units)
    total = min(units, sum(wants.values()))
    exact = _fluid({n: float(w) for n, w in wants.items()}, weights, total)
    assert sum(got.values()) == total
    for n in wants:
        assert 0 <= got[n] <= wants[n] and abs(got[n] - exact[n]) < 1.0


@settings(max_examples=150, deadline=None)
@given(TEAMS, st.integers(0, 20), st.lists(st.lists(st.integers(0, 12), min_size=5,
                                                     max_size=5), min_size=1, max_size=6))
def test_rounds_never_grant_past_capacity_and_a_demand_gets_its_entitlement_in_time(
        spec, capacity, demands) -> None:
    f = fleet(*({"name": f"t{i}", "quota": {"h100": q}, "weight": w, "reclaim_grace_s": 5.0,
                 **({"cohort": "c"} if c else {})} for i, (q, _, w, c) in enumerate(spec)))
    state, now = Holdings(), 0.0
    for row in demands:
        demand = {f"t{i}": {"h100": row[i]} for i in range(len(spec))}
        for _ in range(3):  # each demand holds for a grace and a round
            out = decide(f, state, {"h100": capacity}, demand, now)
            state, now = out.state, now + 3.0
            assert sum(state.units(t.name, "h100") for t in f.teams) <= capacity
            for t in f.teams:
                assert state.units(t.name, "h100") <= demand[t.name]["h100"]
        for t in f.teams:  # after a grace period no team is short of its entitlement
            assert state.units(t.name, "h100") >= out.entitled[t.name]["h100"]


def test_water_fill_gives_whole_units_by_weight() -> None:
    assert water_fill({"a": 5, "b": 5}, {"a": 1.0, "b": 1.0}, 5) in (
        {"a": 3, "b": 2}, {"a": 2, "b": 3})
    assert water_fill({"a": 0, "b": 5}, {"a": 1.0, "b": 1.0}, 3) == {"a": 0, "b": 3}
    assert water_fill({}, {}, 3) == {}


def test_shared_capacity_counts_each_node_shape_as_its_nodes_would() -> None:
    from ray_ladder.core.arbiter import shared_capacity
    from ray_ladder.core.placement import NodeState

    f = Fleet.from_dict({"fleet": "f", "rungs": {
        "h100": {"resources": {"ladder/h100": 1}},
        "pair": {"resources": {"ladder/h100": 2, "CPU": 8}}}, "teams": [{"name": "a"}]})
    nodes = [NodeState(f"n{i}", i % 5 != 0, {"ladder/h100": 1 + i % 3, "CPU": 8 * (i % 2)},
                       {}, draining=i % 7 == 0) for i in range(40)]
    live = [n for n in nodes if n.alive and not n.draining]
    assert shared_capacity(f, nodes) == {
        "h100": sum(int(n.total["ladder/h100"]) for n in live),
        "pair": sum(min(int(n.total["ladder/h100"]) // 2, int(n.total["CPU"]) // 8)
                    for n in live)}


def test_water_fill_gives_a_tied_last_unit_to_the_heavier_team() -> None:
    # exact shares 1/3, 4/3, 1/3: one unit left, three equal remainders; the rule's
    # tie-break (weight, then name) decides, not the rounding of a bisected level
    assert water_fill({"a": 20, "b": 20, "c": 20}, {"a": 0.5, "b": 2.0, "c": 0.5}, 2) == {
        "a": 0, "b": 2, "c": 0}
    assert water_fill({"a": 20, "b": 20, "c": 20}, {"a": 2.0, "b": 0.5, "c": 2.0}, 3) == {
        "a": 2, "b": 0, "c": 1}


def test_a_team_bound_to_the_eu_is_never_granted_a_non_eu_unit_by_borrowing() -> None:
    f = Fleet.from_dict({"fleet": "f", "rungs": {
        "h100-us": {"resources": {"ladder/h100-us": 1}, "jurisdiction": "us"},
        "h100-eu": {"resources": {"ladder/h100-eu": 1}, "jurisdiction": "eu"}},
        "teams": [{"name": "a", "quota": {"h100-us": 2, "h100-eu": 2}, "cohort": "c"},
                  {"name": "eu", "cohort": "c", "constraints": {"jurisdiction": "eu"}}]})
    state = Holdings()
    for now in range(3):  # a's idle quota on both rungs; eu wants 4 of each
        out = decide(f, state, {"h100-us": 2, "h100-eu": 2},
                     {"eu": {"h100-us": 4, "h100-eu": 4}}, float(now))
        state = out.state
    assert state.units("eu", "h100-us") == 0 and out.entitled["eu"]["h100-us"] == 0
    assert state.units("eu", "h100-eu") == 2  # the EU rung it may use, borrowed
