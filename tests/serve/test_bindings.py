"""Constraints bound to a ladder app and its routes (pure)."""

from __future__ import annotations

import pytest

from ray_ladder import Constraints, Ladder
from ray_ladder.serve import http
from ray_ladder.serve.bindings import Bindings

LADDER = Ladder.from_dict({"name": "b", "rungs": [
    {"name": "h100", "resources": {"ladder/h100": 1}, "cost_per_hour": 10,
     "tags": {"jurisdiction": "us"}},
    {"name": "a100", "resources": {"ladder/a100": 1}, "cost_per_hour": 4,
     "tags": {"jurisdiction": "eu"}},
    {"name": "shed", "kind": "shed"}]})
EU = Constraints(jurisdiction="eu")


def test_routes_take_their_longest_bound_prefix_else_the_apps_binding() -> None:
    b = Bindings(LADDER, Constraints(max_cost_per_hour=20),
                 {"/eu": EU, "/eu/cheap": Constraints(max_cost_per_hour=5)})
    assert b.for_path("/v1/chat/completions") == Constraints(max_cost_per_hour=20)
    assert b.for_path("/eu/v1/chat/completions") == Constraints(jurisdiction="eu",
                                                                max_cost_per_hour=20)
    assert b.for_path("/eu/cheap").max_cost_per_hour == 5
    assert b.for_path("/europe") == Constraints(max_cost_per_hour=20)  # not under /eu


def test_headers_narrow_a_binding_and_widening_is_a_403() -> None:
    b = Bindings(LADDER, None, {"/eu": EU})
    assert b.from_headers({}, "/eu") == EU
    assert b.from_headers({"X-Ladder-Max-Cost": "5"}, "/eu") == Constraints(
        jurisdiction="eu", max_cost_per_hour=5.0)
    assert b.from_headers({"X-Ladder-Jurisdiction": "us"}, "/") == Constraints(
        jurisdiction="us")  # unbound route: the request's own
    with pytest.raises(http.HttpError) as refused:
        b.from_headers({"X-Ladder-Jurisdiction": "us"}, "/eu/v1/completions")
    assert refused.value.status == 403 and "bound to 'eu'" in refused.value.message


def test_bindings_are_checked_when_the_app_is_built() -> None:
    with pytest.raises(ValueError, match="path prefix"):
        Bindings(LADDER, None, {"eu": EU})
    with pytest.raises(ValueError):
        Bindings(LADDER, Constraints(jurisdiction="mars"))
    with pytest.raises(ValueError, match="bound to 'eu'"):
        Bindings(LADDER, EU, {"/us": Constraints(jurisdiction="us")})


def test_an_empty_sites_header_is_malformed() -> None:
    with pytest.raises(http.HttpError) as bad:
        http.constraints_from_headers({"X-Ladder-Sites": ",,,"}, LADDER)
    assert bad.value.status == 400
