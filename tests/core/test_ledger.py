"""The team ledger (pure): a team's units shared out among its parts (issue 44 item 1)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ray_ladder.core.arbiter import Holdings, decide
from ray_ladder.core.demand_hold import DemandHold, held_demand
from ray_ladder.core.fleet import Fleet
from ray_ladder.core.ledger import Claim, PartGrant, allot, part_entry, share_out

CLAIMS = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 5), st.integers(0, 4)),
                  min_size=0, max_size=5)


def _claims(rows) -> tuple[list[Claim], dict[str, int]]:
    claims = [Claim(f"p{i}", units, float(since)) for i, (units, since, _) in enumerate(rows)]
    return claims, {f"p{i}": before for i, (_, _, before) in enumerate(rows)}


@settings(max_examples=400, deadline=None)
@given(CLAIMS, st.integers(0, 8), st.integers(0, 8))
def test_shares_fit_the_grant_and_the_notice_falls_on_the_latest_placed(rows, held,
                                                                        noticed) -> None:
    claims, before = _claims(rows)
    noticed = min(noticed, held)
    out = allot(held, noticed, claims, before)
    assert set(out) == {c.part for c in claims}
    assert sum(g.held for g in out.values()) == min(held, sum(c.units for c in claims))
    for c in claims:
        assert 0 <= out[c.part].noticed <= out[c.part].held <= c.units
    # exactly the notice's units move (as many as the parts hold)
    assert sum(g.noticed for g in out.values()) == min(noticed, sum(g.held for g in
                                                                    out.values()))
    # the notice falls on the most recently placed: a part with units noticed has every
    # part placed after it noticed whole
    order = sorted(claims, key=lambda c: (c.since, c.part))
    for i, c in enumerate(order):
        if out[c.part].noticed:
            assert all(out[d.part].noticed == out[d.part].held for d in order[i + 1:])


@settings(max_examples=300, deadline=None)
@given(CLAIMS, st.integers(0, 8))
def test_a_part_keeps_what_it_held_while_the_team_holds_enough(rows, held) -> None:
    claims, before = _claims(rows)
    kept = {c.part: min(c.units, before[c.part]) for c in claims}
    out = allot(held, 0, claims, before)
    if sum(kept.values()) <= held:  # no part takes a unit from another without a notice
        assert all(out[p].held >= units for p, units in kept.items())


def test_the_issue_case_a_one_unit_notice_moves_the_latest_part_only() -> None:
    """b's Serve app (placed first) and Tune run each hold one of b's two h100 units; a
    notice on one unit falls on the Tune run, and after the deadline (b holds one) the app
    keeps its unit and the run holds none: one unit physically free."""
    claims = [Claim("app-b", 1, since=1.0), Claim("tune:b", 1, since=4.0)]
    noticed = allot(2, 1, claims, {"app-b": 1, "tune:b": 1})
    assert noticed == {"app-b": PartGrant(1, 0), "tune:b": PartGrant(1, 1)}
    after = allot(1, 0, claims, {p: g.held for p, g in noticed.items()})
    assert after == {"app-b": PartGrant(1, 0), "tune:b": PartGrant(0, 0)}


def test_a_part_reads_its_share_and_an_old_entry_unchanged() -> None:
    entry = {"team": "b", "rungs": {"h100": {"held": 2, "noticed": 1, "deadline": 9.0,
                                             "parts": {"x": {"held": 2, "noticed": 1}}}}}
    mine = part_entry(entry, "x")["rungs"]["h100"]
    assert (mine["held"], mine["noticed"], mine["deadline"], mine["team_held"]) == (2, 1, 9.0, 2)
    assert part_entry(entry, "y")["rungs"]["h100"]["held"] == 0
    old = {"team": "b", "rungs": {"h100": {"held": 2, "noticed": 0}}}
    assert part_entry(old, "x") == old and part_entry(entry, None) is entry


ROUND_S = 0.5
GRACE_S = 4.0
HOLD_S = 1.5
#: Rounds a demand stands: a grace, the hold window and a few rounds.
STEADY = int((GRACE_S + HOLD_S) / ROUND_S) + 4

TEAMS = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3), st.booleans()),
                 min_size=1, max_size=3)


def _fleet(teams) -> Fleet:
    return Fleet.from_dict({"fleet": "f", "control_period_s": ROUND_S,
                            "demand_hold_s": HOLD_S,
                            "rungs": {"h100": {"resources": {"ladder/h100": 1}}},
                            "teams": [{"name": f"t{i}", "quota": {"h100": q},
                                       "reclaim_grace_s": GRACE_S,
                                       **({"cohort": "c"} if c else {})}
                                      for i, (q, _, c) in enumerate(teams)]})


@settings(max_examples=120, deadline=None)
@given(TEAMS, st.integers(0, 6), st.data())
def test_rounds_keep_each_team_within_its_grant_and_give_entitlements_in_use(
        teams, capacity, data) -> None:
    """Random teams of 1-3 parts and random demand steps, through the arbiter's rounds
    (held demand -> decide -> the ledgers). Each part runs what it wants up to the share
    it read last round. At every round the parts of a team run on no more units than the
    team was granted (nor the fleet on more than its capacity), a notice's units are
    exactly the parts' noticed units; once a demand has stood a grace and the hold
    window, every team runs its entitlement, not only holds it on paper."""
    f = _fleet(teams)
    parts = [(f"t{i}", f"p{j}") for i, (_, n, _) in enumerate(teams) for j in range(n)]
    steps = data.draw(st.lists(st.lists(st.integers(0, 3), min_size=len(parts),
                                        max_size=len(parts)), min_size=1, max_size=4))
    state, hold, now = Holdings(), DemandHold(), 0.0
    shares: dict = {}
    read: dict = {}  # what each part read last round: (team, part) -> share
    for wants_row in steps:
        wants = dict(zip(parts, wants_row, strict=True))
        for _ in range(STEADY):
            use = {p: min(wants[p], read.get(p, 0)) for p in parts}
            for t in f.teams:  # the team's parts run within its grant, the fleet within capacity
                assert sum(u for (team, _), u in use.items() if team == t.name) \
                    <= state.units(t.name, "h100")
            assert sum(use.values()) <= capacity
            reports = {p: {"h100": w} for p, w in wants.items()}
            demand, hold = held_demand(reports, hold, now, HOLD_S)
            out = decide(f, state, {"h100": capacity}, demand, now)
            shares = share_out(out.state, ["h100"], hold.claims(),
                               {t: {r: {p: g.held for p, g in ps.items()}
                                    for r, ps in rs.items()} for t, rs in shares.items()})
            for t in f.teams:
                mine = shares.get(t.name, {}).get("h100", {})
                noticed = sum(r.units for r in out.state.reclaims if r.borrower == t.name)
                assert sum(g.held for g in mine.values()) <= out.state.units(t.name, "h100")
                assert sum(g.noticed for g in mine.values()) == noticed
            read = {(t, p): g.held for t, rs in shares.items()
                    for p, g in rs.get("h100", {}).items()}
            state, now = out.state, now + ROUND_S
        use = {p: min(wants[p], read.get(p, 0)) for p in parts}
        for t in f.teams:  # after a grace: the entitlement in use, not only on paper
            running = sum(u for (team, _), u in use.items() if team == t.name)
            assert running == out.entitled[t.name]["h100"], (t.name, running, out.entitled)
