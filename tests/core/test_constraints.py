"""Constraints: which rungs a request may use (residency, site, cost, quality)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from ray_ladder import Constraints, Ladder, Rung, load_ladder
from ray_ladder.core.exceptions import ConstraintNotAllowedError

EXAMPLES = Path(__file__).parents[2] / "examples" / "ladders"

LADDER = Ladder.from_dict(
    {
        "name": "mixed",
        "rungs": [
            {"name": "onprem", "resources": {"ladder/onprem": 1}, "quality": 1.0,
             "cost_per_hour": 2.0, "tags": {"site": "onprem", "jurisdiction": "eu"}},
            {"name": "eu-cloud", "resources": {"ladder/eu": 1}, "quality": 1.0,
             "cost_per_hour": 11.0, "tags": {"site": "eu-cloud", "jurisdiction": "eu"}},
            {"name": "us-cloud", "resources": {"ladder/us": 1}, "quality": 0.9,
             "cost_per_hour": 3.0, "tags": {"site": "us-cloud", "jurisdiction": "us"}},
            {"name": "untagged", "num_cpus": 1, "quality": 0.5, "cost_per_hour": 0.1},
            {"name": "cache", "kind": "cache", "quality": 0.3, "cost_per_hour": 0.5},
            {"name": "shed", "kind": "shed", "quality": 0.0, "cost_per_hour": 99.0},
        ],
    }
)


def names(constraints: Constraints | None) -> list[str]:
    return [r.name for r in LADDER.eligible(constraints)]


def test_empty_constraints() -> None:
    assert Constraints().empty
    assert not Constraints(min_quality=0.0).empty
    assert names(None) == names(Constraints()) == LADDER.names


def test_jurisdiction_keeps_only_rungs_tagged_with_it() -> None:
    # An untagged rung is not "anywhere": it fails a residency constraint.
    assert names(Constraints(jurisdiction="eu")) == ["onprem", "eu-cloud", "cache", "shed"]
    assert names(Constraints(jurisdiction="us")) == ["us-cloud", "cache", "shed"]


def test_sites_keep_only_rungs_at_those_sites() -> None:
    assert names(Constraints(sites=("onprem",))) == ["onprem", "cache", "shed"]
    assert names(Constraints(sites=("us-cloud", "onprem"))) == [
        "onprem", "us-cloud", "cache", "shed"]
    assert names(Constraints(sites=())) == ["cache", "shed"]


def test_max_cost_is_inclusive() -> None:
    assert names(Constraints(max_cost_per_hour=3.0)) == [
        "onprem", "us-cloud", "untagged", "cache", "shed"]
    # The cache is held to cost like any rung; shed never is.
    assert names(Constraints(max_cost_per_hour=0.1)) == ["untagged", "shed"]


def test_min_quality_is_inclusive() -> None:
    assert names(Constraints(min_quality=0.9)) == ["onprem", "eu-cloud", "us-cloud", "shed"]
    assert names(Constraints(min_quality=0.3)) == [
        "onprem", "eu-cloud", "us-cloud", "untagged", "cache", "shed"]


def test_shed_is_always_allowed() -> None:
    strict = Constraints(jurisdiction="xx", max_cost_per_hour=0.0, min_quality=1.0, sites=())
    assert names(strict) == ["shed"]


def test_cache_is_exempt_from_residency_and_site_only() -> None:
    cache = LADDER.rung("cache")
    assert Constraints(jurisdiction="us").allows(cache)
    assert Constraints(sites=("nowhere",)).allows(cache)
    assert not Constraints(max_cost_per_hour=0.4).allows(cache)
    assert not Constraints(min_quality=0.4).allows(cache)


def test_all_constraints_combine() -> None:
    c = Constraints(jurisdiction="eu", max_cost_per_hour=5.0, min_quality=0.3)
    assert names(c) == ["onprem", "cache", "shed"]


def test_hybrid_sovereign_example() -> None:
    ladder = load_ladder(EXAMPLES / "hybrid-sovereign.yaml")
    eu = [r.name for r in ladder.eligible(Constraints(jurisdiction="eu"))]
    assert eu == ladder.names  # every rung of that ladder is EU
    onprem = [r.name for r in ladder.eligible(Constraints(sites=("onprem",)))]
    assert onprem == ["onprem-h100", "onprem-cpu"]


def test_allows_on_a_plain_rung() -> None:
    rung = Rung(name="cpu", num_cpus=1, quality=0.2)
    assert not Constraints(min_quality=0.5).allows(rung)
    assert Constraints(min_quality=0.2).allows(rung)


def test_sites_accept_a_list_or_tuple() -> None:
    assert Constraints(sites=["a", "b"]).sites == ("a", "b")  # type: ignore[arg-type]
    assert Constraints.model_validate_json('{"sites": ["a"]}').sites == ("a",)
    with pytest.raises(ValidationError):
        Constraints(sites="onprem")  # type: ignore[arg-type]  # a str is not a list of sites


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_cost_per_hour": -1.0},
        {"min_quality": 1.5},
        {"min_quality": -0.1},
        {"jurisdiction": 1},
        {"region": "eu"},
    ],
)
def test_malformed_constraints_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Constraints(**kwargs)  # type: ignore[arg-type]


def test_constraints_are_frozen_and_keyable() -> None:
    c = Constraints(jurisdiction="eu", sites=("onprem",))
    with pytest.raises(ValidationError):
        c.jurisdiction = "us"  # type: ignore[misc]
    assert c.key() == ("eu", None, None, ("onprem",))
    same = Constraints(sites=["onprem"], jurisdiction="eu")  # type: ignore[arg-type]
    assert {c.key(): 1}[same.key()] == 1


constraints_st = st.builds(
    Constraints,
    jurisdiction=st.sampled_from([None, "eu", "us", "xx"]),
    max_cost_per_hour=st.sampled_from([None, 0.0, 0.1, 2.0, 3.0, 11.0, 100.0]),
    min_quality=st.sampled_from([None, 0.0, 0.3, 0.5, 0.9, 1.0]),
    sites=st.one_of(st.none(), st.lists(st.sampled_from(["onprem", "eu-cloud", "us-cloud"]))
                    .map(tuple)),
)


@settings(max_examples=150, deadline=None)
@given(constraints_st)
def test_eligible_is_an_ordered_filter_that_keeps_shed(c: Constraints) -> None:
    eligible = LADDER.eligible(c)
    assert eligible == [r for r in LADDER.rungs if c.allows(r)]
    assert eligible[-1].name == "shed"
    for rung in eligible:
        if rung.kind == "compute":
            assert c.jurisdiction is None or rung.tags.get("jurisdiction") == c.jurisdiction
            assert c.sites is None or rung.tags.get("site") in c.sites
        if rung.kind != "shed":
            assert c.max_cost_per_hour is None or rung.cost_per_hour <= c.max_cost_per_hour
            assert c.min_quality is None or rung.quality >= c.min_quality


# --- bound constraints: a request may only narrow ------------------------------------------

def test_a_request_narrows_the_bound_constraints_field_by_field() -> None:
    bound = Constraints(jurisdiction="eu", max_cost_per_hour=5.0, min_quality=0.5,
                        sites=("onprem", "eu-cloud"))
    assert bound.narrow(None) is bound and bound.narrow(Constraints()) is bound
    tighter = bound.narrow(Constraints(jurisdiction="eu", max_cost_per_hour=2.0,
                                       min_quality=0.8, sites=("onprem",)))
    assert tighter == Constraints(jurisdiction="eu", max_cost_per_hour=2.0, min_quality=0.8,
                                  sites=("onprem",))
    assert Constraints().narrow(Constraints(jurisdiction="us")).jurisdiction == "us"


@pytest.mark.parametrize(("asked", "named"), [
    (Constraints(jurisdiction="us"), "jurisdiction 'us': bound to 'eu'"),
    (Constraints(max_cost_per_hour=9.0), "max_cost_per_hour 9: bound to at most 5"),
    (Constraints(min_quality=0.1), "min_quality 0.1: bound to at least 0.5"),
    (Constraints(sites=("us-cloud",)), "sites ['us-cloud']"),
])
def test_asking_for_more_than_the_binding_is_a_clear_error(asked: Constraints,
                                                          named: str) -> None:
    bound = Constraints(jurisdiction="eu", max_cost_per_hour=5.0, min_quality=0.5,
                        sites=("onprem",))
    with pytest.raises(ConstraintNotAllowedError, match=re.escape(named)):
        bound.narrow(asked)


_opt_float = st.none() | st.floats(0, 10, allow_nan=False)
_constraints = st.builds(
    Constraints, jurisdiction=st.none() | st.sampled_from(["eu", "us"]),
    max_cost_per_hour=_opt_float, min_quality=st.none() | st.floats(0, 1),
    sites=st.none() | st.lists(st.sampled_from(["onprem", "eu-cloud", "us-cloud"]),
                               min_size=1, max_size=3, unique=True).map(tuple))
_rungs = st.builds(
    lambda j, s, c, q: Rung(name="r", num_cpus=1, cost_per_hour=c, quality=q,
                            tags={"jurisdiction": j, "site": s}),
    st.sampled_from(["eu", "us"]), st.sampled_from(["onprem", "eu-cloud", "us-cloud"]),
    st.floats(0, 10, allow_nan=False), st.floats(0, 1))


@given(_constraints, _constraints, _rungs)
def test_narrowing_never_allows_a_rung_the_binding_excludes(bound, asked, rung) -> None:
    try:
        effective = bound.narrow(asked)
    except ConstraintNotAllowedError:
        return
    assert not effective.allows(rung) or bound.allows(rung)
    assert not effective.allows(rung) or asked.allows(rung)
