"""Selector invariants over random ladders, constraints and observation sequences."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from ray_ladder import Constraints, Decision, Ladder, Selector


@dataclass
class Case:
    ladder: Ladder
    constraints: Constraints | None
    steps: list[tuple[float, dict[str, bool]]]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    n = draw(st.integers(1, 5))
    qualities = sorted(draw(st.lists(st.sampled_from([0.2, 0.5, 0.8, 1.0]), min_size=n,
                                     max_size=n)), reverse=True)
    rungs: list[dict[str, object]] = []
    for i in range(n):
        tags = {}
        for key, values in (("jurisdiction", ["eu", "us"]), ("site", ["onprem", "cloud"])):
            value = draw(st.sampled_from([None, *values]))
            if value is not None:
                tags[key] = value
        rungs.append({"name": f"c{i}", "resources": {f"ladder/c{i}": 1},
                      "quality": qualities[i], "tags": tags,
                      "cost_per_hour": draw(st.sampled_from([0.0, 1.0, 5.0, 20.0]))})
    for kind in ("cache", "shed"):
        if draw(st.booleans()):
            rungs.append({"name": kind, "kind": kind, "quality": 0.0,
                          "cost_per_hour": draw(st.sampled_from([0.0, 2.0]))})
    policy: dict[str, object] = {"promotion_hysteresis": draw(st.integers(1, 4))}
    max_degraded = draw(st.sampled_from([None, 0.5, 1.0, 3.0, 10.0]))
    if max_degraded is not None:
        policy["max_degraded_seconds"] = max_degraded
    ladder = Ladder.from_dict({"name": "prop", "policy": policy, "rungs": rungs})
    constraints = draw(st.one_of(st.none(), st.builds(
        Constraints,
        jurisdiction=st.sampled_from([None, "eu", "us"]),
        max_cost_per_hour=st.sampled_from([None, 1.0, 5.0]),
        min_quality=st.sampled_from([None, 0.5, 0.8]),
        sites=st.sampled_from([None, ("onprem",), ("onprem", "cloud")]),
    )))
    names = [str(r["name"]) for r in rungs]
    # An observation may omit a rung (unobtainable) or claim cache/shed unobtainable
    # (ignored: they always are).
    observation = st.dictionaries(st.sampled_from(names), st.booleans())
    gaps = st.sampled_from([0.0, 0.25, 1.0, 2.0, 7.0])
    steps = draw(st.lists(st.tuples(gaps, observation), min_size=1, max_size=40))
    t = 0.0
    timed = []
    for gap, obs in steps:
        t += gap
        timed.append((t, obs))
    return Case(ladder, constraints, timed)


@dataclass
class Step:
    """The test's own view of one observation, next to the selector's decision."""

    now: float
    decision: Decision
    previous: str | None
    first: bool
    obtainable: dict[str, bool]
    streak: dict[str, int]
    best_obtainable: str | None
    eligible: list[str] = field(default_factory=list)


def walk(case: Case) -> Iterator[Step]:
    eligible_rungs = case.ladder.eligible(case.constraints)
    names = [r.name for r in eligible_rungs]
    always = {r.name for r in eligible_rungs if r.kind != "compute"}
    streak = dict.fromkeys(names, 0)
    selector = Selector(case.ladder, case.constraints)
    previous: str | None = None
    for i, (now, obs) in enumerate(case.steps):
        ok = {n: n in always or obs.get(n, False) for n in names}
        for n in names:
            streak[n] = streak[n] + 1 if ok[n] else 0
        best = next((n for n in names if ok[n]), None)
        decision = selector.observe(obs, now)
        yield Step(now, decision, previous, i == 0, ok, dict(streak), best, names)
        previous = decision.rung


# Each invariant is a check on one step; one hypothesis test runs them all on the same
# random walks (a test per invariant would draw the same walks six times over).


def never_unobtainable_or_ineligible(case: Case, s: Step) -> None:
    rung = s.decision.rung
    if rung is None:
        assert s.best_obtainable is None, "None while an eligible rung was obtainable"
        return
    assert rung in s.eligible, f"ineligible rung {rung}"
    assert s.obtainable[rung], f"unobtainable rung {rung}"
    assert case.constraints is None or case.constraints.allows(case.ladder.rung(rung))


def immediate_descent(case: Case, s: Step) -> None:
    # The current rung lost (or nothing selected): the best obtainable rung, at once.
    if s.previous is None or not s.obtainable[s.previous]:
        assert s.decision.rung == s.best_obtainable, "did not move at once"


def no_climb_before_the_streak(case: Case, s: Step) -> None:
    if s.previous is None or not s.obtainable[s.previous]:
        return
    rung = s.decision.rung
    assert rung is not None
    assert s.eligible.index(rung) <= s.eligible.index(s.previous), "fell while obtainable"
    if rung != s.previous:
        assert s.streak[rung] >= case.ladder.policy.promotion_hysteresis, "climbed early"


def climb_when_the_streak_completes(case: Case, s: Step) -> None:
    if s.previous is None or not s.obtainable[s.previous]:
        return
    above = s.eligible[: s.eligible.index(s.previous)]
    complete = [n for n in above if s.streak[n] >= case.ladder.policy.promotion_hysteresis]
    assert s.decision.rung == (complete[0] if complete else s.previous), "missed a climb"


def decision_fields_consistent(case: Case, s: Step) -> None:
    d = s.decision
    assert d.previous == s.previous
    assert d.changed == (d.rung != s.previous)
    assert d.time == s.now
    if not d.changed:
        assert (d.direction, d.reason) == (None, "unchanged")
    elif s.first:
        assert d.direction is None
    elif d.rung is None:
        assert d.direction == "down"
    elif s.previous is None:
        assert d.direction == "up"
    else:
        down = s.eligible.index(d.rung) > s.eligible.index(s.previous)
        assert d.direction == ("down" if down else "up")
    event = d.event("prop")
    assert (event is None) == (not d.changed)
    if event is not None:
        line = event.to_json()
        assert "\n" not in line
        assert json.loads(line)["to"] == d.rung
        assert event.cause == d.cause


def cause_follows_the_move(case: Case, s: Step) -> None:
    d = s.decision
    if not d.changed:
        want = "other"
    elif d.rung is None:
        want = "exhausted"
    elif s.previous is None:
        want = "first" if s.first else "returned"
    else:
        want = "promoted" if s.obtainable[s.previous] else "lost"
    assert d.cause == want


STEP_CHECKS = (never_unobtainable_or_ineligible, immediate_descent, no_climb_before_the_streak,
               climb_when_the_streak_completes, decision_fields_consistent,
               cause_follows_the_move)


@settings(max_examples=100, deadline=None)
@given(cases())
def test_selector_invariants(case: Case) -> None:
    limit = case.ladder.policy.max_degraded_seconds
    start: float | None = None
    alerts = 0
    for s in walk(case):
        for check in STEP_CHECKS:
            check(case, s)
        # Degraded time and one alert per episode.
        d = s.decision
        if bool(s.eligible) and d.rung == s.eligible[0]:
            assert d.degraded_s == 0 and not d.alert
            start, alerts = None, 0
            continue
        if start is None:
            start = s.now
        assert d.degraded_s == s.now - start
        alerts += d.alert
        # Exactly one alert, at the first observation above the limit, never before.
        assert alerts == int(limit is not None and d.degraded_s > limit)


@settings(max_examples=40, deadline=None)
@given(cases())
def test_hysteresis_one_always_takes_the_best_obtainable_rung(case: Case) -> None:
    sel = Selector(case.ladder, case.constraints, promotion_hysteresis=1)
    names = sel.eligible
    for now, obs in case.steps:
        best = next((n for n in names
                     if case.ladder.rung(n).kind != "compute" or obs.get(n, False)), None)
        assert sel.observe(obs, now).rung == best
