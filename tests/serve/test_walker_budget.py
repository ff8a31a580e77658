"""A team's spent budget in the request walk (Walker.next_step), over the fake rung
caller: queue waits on a priced rung then refuses with the window's Retry-After,
reject raises BudgetExhaustedError (429), a free rung still serves; no Ray."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ray_ladder import BudgetExhaustedError, Ladder, LadderExhaustedError
from ray_ladder.cluster.grants import BudgetHold
from ray_ladder.serve import http
from ray_ladder.serve.fake import FakeRungCaller
from ray_ladder.serve.llm.routes import exhausted_error
from ray_ladder.serve.metrics import LadderMetrics
from ray_ladder.serve.state import RouterState
from ray_ladder.serve.walker import Walker

LADDER = Ladder.from_yaml("""
name: budget-walk
policy: {pending_timeout_s: 0.3, retry_after_s: 4.5}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, cost_per_hour: 12}
  - {name: cpu, resources: {ladder/cpu: 1}, quality: 0.5}
  - {name: shed, kind: shed}
""")


def _walker(hold: BudgetHold | None, up: dict[str, bool]) -> Walker:
    state = RouterState(LADDER, down_cooldown_s=60.0)
    state.observe({n: 1 for n, ok in up.items() if ok}, up, now=0.0)
    caller = FakeRungCaller({"h100": None, "cpu": None})
    metrics = LadderMetrics(LADDER, enabled=False, app="budget")

    def probed() -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.05, future.set_result, None)
        return future

    return Walker(state, caller, metrics, cache=None, probed=probed,
                  spawn=lambda coro: asyncio.get_running_loop().create_task(coro),
                  budget=lambda: hold, clock=_clock)


_NOW = [1000.0]


def _clock() -> float:
    return _NOW[0]


def _answer(walker: Walker) -> Any:
    async def go() -> Any:
        return await walker.answer({"x": 1}, None)
    return asyncio.run(go())


def test_reject_refuses_a_priced_rung_with_the_team_and_the_window_end() -> None:
    walker = _walker(BudgetHold("b", "reject", 1060.0), {"h100": True, "cpu": True})
    with pytest.raises(BudgetExhaustedError) as info:
        _answer(walker)
    err = info.value
    assert (err.team, err.until, err.retry_after_s) == ("b", 1060.0, 60.0)
    assert [a.cause for a in err.attempts] == ["budget"]
    assert http.refusal_status(err) == 429 and http.unavailable(err, 0)[1]["Retry-After"] == "60"
    openai = exhausted_error(err, 0.0)
    assert openai.status == 429 and openai.body()["error"]["type"] == "insufficient_quota"
    assert openai.headers["Retry-After"] == "60"


def test_queue_waits_until_the_request_deadline_then_the_normal_refusal() -> None:
    _NOW[0] = 1000.0
    walker = _walker(BudgetHold("b", "queue", 1100.0), {"h100": True, "cpu": True})

    async def go() -> Any:
        task = asyncio.create_task(walker.answer({"x": 1}, None))
        await asyncio.sleep(0.2)
        assert not task.done()  # it waits: it neither falls to cpu nor fails
        _NOW[0] = 1000.5  # past pending_timeout_s (0.3)
        return await task

    with pytest.raises(LadderExhaustedError) as info:
        asyncio.run(go())
    err = info.value
    assert not isinstance(err, BudgetExhaustedError) and http.refusal_status(err) == 503
    assert err.retry_after_s == pytest.approx(99.5)  # to the window's end
    assert err.attempts[-1].cause == "budget"


def test_queue_serves_once_the_window_ends_while_it_waits() -> None:
    _NOW[0] = 1000.0
    hold: list[BudgetHold | None] = [BudgetHold("b", "queue", 1000.2)]
    walker = _walker(None, {"h100": True, "cpu": True})
    walker._budget = lambda: hold[0]

    async def go() -> Any:
        task = asyncio.create_task(walker.answer({"x": 1}, None))
        await asyncio.sleep(0.1)
        hold[0] = None  # the arbiter's next round: a new window
        return await task

    assert asyncio.run(go()).rung == "h100"


@pytest.mark.parametrize("action", ["queue", "reject"])
def test_a_free_rung_still_serves_and_demote_is_the_views(action: str) -> None:
    _NOW[0] = 1000.0
    walker = _walker(BudgetHold("b", action, 1060.0), {"h100": False, "cpu": True})
    assert _answer(walker).rung == "cpu"  # cost 0: not the budget's business
    walker = _walker(BudgetHold("b", "demote", 1060.0), {"h100": True, "cpu": True})
    assert _answer(walker).rung == "h100"  # the capacity view takes the rungs, not the walk
