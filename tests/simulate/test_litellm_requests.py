"""LiteLLM's later requests: which still try a dead deployment first under its cooldown
rules, and what each try costs (a gone node: the timeout; a refused port: fast)."""

from __future__ import annotations

import json

import pytest

from ray_ladder import Ladder
from ray_ladder.simulate import Trace, simulate
from ray_ladder.simulate.baselines import LiteLLM
from ray_ladder.simulate.baselines.litellm_requests import DeadTry, backoff_s, dead_try

TICK = 100.0
H, A = "h100", "a100"
LADDER = Ladder.from_dict({"name": "l", "rungs": [
    {"name": H, "num_cpus": 1}, {"name": A, "num_cpus": 1, "quality": 0.8}]})


def bits(*values: int) -> Trace:
    return Trace.from_steps([(i * TICK, bool(v)) for i, v in enumerate(values)],
                            duration_s=len(values) * TICK, resolution_s=TICK)


def cost(**kw: object) -> DeadTry:
    args: dict[str, object] = {"gone": True, "try_s": 5.0, "rate": 1.0, "num_retries": 2,
                               "cooldown_s": 5.0, "allowed_fails": None, "forced": False}
    return dead_try(**{**args, **kw})  # type: ignore[arg-type]


def test_the_router_retries_with_backoff_before_the_fallback() -> None:
    # Sleeps of 0.5, 1 and 2 s (after every failed try, the last too) plus 0.375 s of
    # jitter each on average; none without retries.
    assert backoff_s(3, 2) == 4.625 and backoff_s(1, 0) == 0.0
    assert backoff_s(6, 5) == 0.5 + 1 + 2 + 4 + 8 + 8 + 6 * 0.375  # capped at 8 s


def test_which_requests_try_a_dead_deployment_first() -> None:
    # A gone node (a timeout, 408): never cooled below 1,000 failed calls a minute.
    assert cost() == DeadTry(1.0, 19.625, 19.625, "below_threshold")
    # A refused port (APIConnectionError): never cooled, whatever allowed_fails says.
    assert cost(gone=False, try_s=0.01, allowed_fails=3) == DeadTry(1.0, 4.655, 4.655,
                                                                   "connection_error")
    # 10 requests/s: 1,800 tries a minute. Uncooled until 1,000 of them failed (5/9 of
    # the minute), then one try a cooldown window (1 request in 50).
    hot = cost(rate=10.0)
    assert hot.rule == "threshold" and hot.first_s == 19.625
    assert hot.share == pytest.approx(5 / 9 + 4 / 9 * 0.02)
    assert hot.seconds == pytest.approx((5 / 9 * 19.625 + 4 / 9 * 0.02 * 5) / hot.share)
    # allowed_fails=3: the first request's 3 tries fail (with their sleeps), the next
    # request's first try is the 4th failure: cooled, and it falls back at once.
    assert cost(allowed_fails=3) == DeadTry(0.4, 12.3125, 19.625, "allowed_fails")
    assert cost(forced=True) == DeadTry(0.2, 5.0, 5.0, "forced")


def test_the_report_counts_the_requests_and_their_seconds() -> None:
    # h100 gone 2-4 (each request: 3 x 5 s + 4.625 s), starting 4-5 (refused: 3 x 0.01 s
    # + 4.625 s), up from 5. At 1 request/s, 3 of 10 ticks have every request try h100.
    traces: dict[str, Trace | str] = {H: bits(1, 1, 0, 0, 1, 1, 1, 1, 1, 1), A: "always"}
    r = simulate(LADDER, traces, tick_s=TICK, compare=[LiteLLM(start_s=100)])
    p = r.comparison[0]
    assert p.replay.served == [(0.0, 0), (2.0, -1), (2.19625, 1), (5.0, 0)]
    req = p.requests
    assert req is not None
    assert req["dead_first_share"] == pytest.approx(0.3)
    assert req["dead_first_per_hour"] == pytest.approx(1080.0)
    assert req["added_s_per_dead_first"] == pytest.approx((2 * 19.625 + 4.655) / 3)
    assert req["added_hours"] == pytest.approx((2 * 19.625 + 4.655) * 100 / 3600)
    assert req["gone"]["rule"] == "below_threshold"
    assert req["starting"]["rule"] == "connection_error"
    assert json.loads(r.to_json())["comparison"][0]["requests"]["dead_first_per_hour"] \
        == pytest.approx(1080.0)
    assert r.compared("litellm (start=100)").requests == req


def test_only_litellm_has_request_figures() -> None:
    traces: dict[str, Trace | str] = {H: bits(1, 0, 1, 1), A: "always"}
    r = simulate(LADDER, traces, tick_s=TICK, compare="all")
    assert [p.policy for p in r.comparison if p.requests] == ["litellm"]
