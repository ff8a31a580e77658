"""Demand that does not flicker (core/demand_hold.py): a drop in a part's report is held
for the fleet's hold window, so a steady workload's dips never withdraw a reclaim notice,
restart a lender's grace or hand a unit back, while a real drop still does after the
window; without Ray."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_ladder.core.arbiter import Holdings, Reclaim, Round, decide
from ray_ladder.core.demand_hold import DemandHold, grace_restarts, held_demand, hold_samples
from ray_ladder.core.fleet import Fleet


def fleet(quota: int = 2, grace: float = 20.0, period: float = 1.0,
          hold: float = 3.0) -> Fleet:
    return Fleet.from_dict({
        "fleet": "f", "control_period_s": period, "demand_hold_s": hold,
        "rungs": {"h100": {"resources": {"ladder/h100": 1}}},
        "teams": [{"name": "a", "quota": {"h100": quota}, "cohort": "c"},
                  {"name": "b", "cohort": "c", "reclaim_grace_s": grace}]})


# --- the hold --------------------------------------------------------------------------

def test_the_window_is_demand_hold_s_and_at_least_two_control_periods() -> None:
    assert fleet(period=1.0, hold=3.0).hold_window_s == 3.0
    assert fleet(period=2.5, hold=3.0).hold_window_s == 5.0
    assert fleet(period=0.2, hold=0.0).hold_window_s == pytest.approx(0.4)


def test_a_rise_counts_at_once_and_a_drop_only_once_it_lasted_the_window() -> None:
    hold = DemandHold()
    seen = []
    for now, units in [(0, 1), (1, 3), (2, 0), (3, 0), (4, 0), (5, 0), (6, 2)]:
        held, hold = held_demand({("a", "app"): {"h100": units}}, hold, float(now), 3.0)
        seen.append(held.get("a", {}).get("h100", 0))
    # 3 at t=1 is held through t=4 (the window), the drop counts at t=5, the rise at once
    assert seen == [1, 3, 3, 3, 3, 0, 2]


def test_each_part_is_held_on_its_own_and_a_team_wants_their_sum() -> None:
    hold = DemandHold()
    _, hold = held_demand({("a", "app"): {"h100": 2}, ("a", "task:t"): {"h100": 1}},
                          hold, 0.0, 3.0)
    held, hold = held_demand({("a", "app"): {"h100": 0}, ("a", "task:t"): {"h100": 1}},
                             hold, 1.0, 3.0)
    assert held == {"a": {"h100": 3}}


def test_a_part_whose_entry_is_gone_wants_nothing_at_once() -> None:
    hold = DemandHold()
    _, hold = held_demand({("a", "app"): {"h100": 2}, ("b", "x"): {"h100": 1}}, hold, 0.0, 3.0)
    held, hold = held_demand({("b", "x"): {"h100": 1}}, hold, 1.0, 3.0)  # a's app deleted
    assert held == {"b": {"h100": 1}}
    assert all(key[0] == "b" for key in hold.peaks)


def test_a_rung_a_part_stops_naming_is_a_drop_and_is_held() -> None:
    hold = DemandHold()
    _, hold = held_demand({("a", "app"): {"h100": 2}}, hold, 0.0, 3.0)
    assert held_demand({("a", "app"): {}}, hold, 1.0, 3.0)[0] == {"a": {"h100": 2}}


@given(st.lists(st.tuples(st.floats(0.01, 5.0), st.integers(0, 6)), min_size=1, max_size=40),
       st.floats(0.0, 10.0))
@settings(max_examples=300, deadline=None)
def test_the_held_value_is_the_largest_report_of_the_window(steps, window) -> None:
    samples: tuple = ()
    now, history = 0.0, []
    for dt, units in steps:
        now += dt
        history.append((now, units))
        samples = hold_samples(samples, now, units, window)
        assert samples[0][1] == max(u for t, u in history if t >= now - window)
        values = [u for _, u in samples]
        assert values == sorted(set(values), reverse=True)  # a max-queue: strictly falling


# --- grace restarts --------------------------------------------------------------------

def test_a_new_notice_after_a_withdrawn_one_restarts_the_grace() -> None:
    old = Reclaim("h100", "b", "a", 2, 21.0, "")
    withdrawn_round = Round(Holdings(), {}, {})
    restarted, pending = grace_restarts([old], withdrawn_round, 2.0, ())
    assert restarted == [] and pending == (old,)
    new = Reclaim("h100", "b", "a", 2, 23.0, "")
    restarted, pending = grace_restarts([], Round(Holdings(reclaims=(new,)), {}, {},
                                                  notices=(new,)), 3.0, pending)
    assert restarted == [new] and pending == ()


def test_a_transfer_at_the_deadline_or_a_notice_for_another_lender_is_no_restart() -> None:
    old = Reclaim("h100", "b", "a", 1, 5.0, "")
    restarted, pending = grace_restarts([old], Round(Holdings(), {}, {}), 5.0, ())
    assert restarted == [] and pending == ()  # the deadline passed: the units moved
    kept = Reclaim("h100", "b", "a", 1, 30.0, "")
    _, pending = grace_restarts([kept], Round(Holdings(), {}, {}), 2.0, ())
    other = Reclaim("h100", "b", "c", 1, 33.0, "")
    restarted, _ = grace_restarts([], Round(Holdings(reclaims=(other,)), {}, {},
                                            notices=(other,)), 3.0, pending)
    assert restarted == []


def test_without_the_hold_a_one_round_dip_restarts_the_lenders_grace() -> None:
    """The issue's failure, on the pure rules: the counter sees it."""
    f = fleet(grace=20.0)
    run = Run(f, window=0.0)
    run.round({"b": 2})
    run.round({"a": 2, "b": 2})
    assert run.notices_for("a") and run.restarts == 0
    run.round({"a": 0, "b": 2})  # one round's dip: the notice is withdrawn
    run.round({"a": 2, "b": 2})  # a new notice, a fresh grace
    assert run.restarts == 1


# --- the hold on the arbiter's rules ---------------------------------------------------

@dataclass
class Run:
    """Rounds of the arbiter's pure half, as the adapter runs them (fleet/arbiter.py)."""

    fleet: Fleet
    window: float | None = None
    state: Holdings = field(default_factory=Holdings)
    hold: DemandHold = field(default_factory=DemandHold)
    withdrawn: tuple[Reclaim, ...] = ()
    now: float = 0.0
    restarts: int = 0
    last: Round | None = None

    def round(self, wants: dict[str, int]) -> Round:
        self.now += self.fleet.control_period_s
        window = self.fleet.hold_window_s if self.window is None else self.window
        reports = {(team, "part"): {"h100": n} for team, n in wants.items()}
        demand, self.hold = held_demand(reports, self.hold, self.now, window)
        out = decide(self.fleet, self.state, {"h100": 2}, demand, self.now)
        restarted, self.withdrawn = grace_restarts(self.state.reclaims, out, self.now,
                                                   self.withdrawn)
        self.restarts += len(restarted)
        self.state, self.last = out.state, out
        return out

    def notices_for(self, lender: str) -> list[Reclaim]:
        return [r for r in self.state.reclaims if r.owed_to == lender]


def dips(max_rounds: int) -> st.SearchStrategy:
    """(steady rounds, dip rounds <= max_rounds, the dip's level) triples."""
    return st.lists(st.tuples(st.integers(1, 4), st.integers(1, max(1, max_rounds)),
                              st.integers(0, 1)), min_size=1, max_size=12)


@given(st.sampled_from([0.25, 0.5, 1.0, 2.0]), st.floats(0.0, 6.0), st.floats(0.5, 15.0),
       st.data())
@settings(max_examples=200, deadline=None)
def test_dips_shorter_than_the_window_never_restart_a_grace_nor_withdraw_a_reclaim(
        period, hold, grace, data) -> None:
    f = fleet(grace=grace, period=period, hold=hold)
    window = f.hold_window_s
    short = int(window // period)  # dip rounds k with k x period <= the window
    lender_dips = data.draw(dips(short))
    borrower_dips = data.draw(dips(short))
    run = Run(f)
    for _ in range(3):
        run.round({"b": 2})  # b borrows both of a's idle units
    assert run.state.units("b", "h100") == 2
    a_wants = list(_series(lender_dips, high=2))
    b_wants = list(_series(borrower_dips, high=2))
    rounds = max(len(a_wants), len(b_wants)) + int(grace / period) + 4
    a_wants += [2] * (rounds - len(a_wants))
    b_wants += [2] * (rounds - len(b_wants))
    a_wants[0] = 2  # a's work arrives steady: a's first report is its demand
    first_notice: float | None = None
    held_a = 0
    for a, b in zip(a_wants, b_wants, strict=True):
        before = run.state.reclaims
        run.round({"a": a, "b": b})
        if first_notice is None and run.notices_for("a"):
            first_notice = run.now
        for r in before:  # a notice in force stays, deadline and units, until it moves
            if r.deadline > run.now:
                assert r in run.state.reclaims, (r, run.state.reclaims)
        assert run.state.units("a", "h100") >= held_a  # a never loses a unit it got
        held_a = run.state.units("a", "h100")
        if first_notice is not None and run.now >= first_notice + grace:
            assert held_a == 2  # the whole quota, one grace after the notice
    assert run.restarts == 0
    assert first_notice is not None


@given(st.sampled_from([0.25, 0.5, 1.0]), st.floats(0.0, 5.0), st.integers(0, 1))
@settings(max_examples=100, deadline=None)
def test_a_drop_longer_than_the_window_gives_the_units_back_after_the_window(
        period, hold, low) -> None:
    f = fleet(grace=1.0, period=period, hold=hold)
    run = Run(f)
    for _ in range(int(5.0 / period) + 2):
        run.round({"a": 2, "b": 2})
    assert run.state.units("a", "h100") == 2
    last_high = run.now
    while last_high >= run.now + period - f.hold_window_s:  # the next round is within it
        run.round({"a": low, "b": 2})  # within the window: a keeps its units
        assert run.state.units("a", "h100") == 2
    run.round({"a": low, "b": 2})  # past the window: the drop counts
    assert run.state.units("a", "h100") == low
    assert run.state.units("b", "h100") == 2 - low  # the unit went to the borrower
    assert run.restarts == 0


def _series(pattern: list[tuple[int, int, int]], high: int) -> list[int]:
    out: list[int] = []
    for steady, dip, level in pattern:
        out += [high] * steady + [level] * dip
    return out
