"""The router's race (serve/hedge.py) with a fake caller: a copy goes to the next rung only
when the request's rung is slow to take it and answers nobody else, and each copy counts."""

from __future__ import annotations

import asyncio
from typing import Any

from ray_ladder import Ladder
from ray_ladder.serve.calls import Pending
from ray_ladder.serve.core import RouterState
from ray_ladder.serve.hedge import Hedging
from ray_ladder.serve.metrics import LadderMetrics

LADDER = Ladder.from_yaml("""
name: hedge
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}}
""")


class FakeCaller:
    """h100 never takes a request (its replica is gone, Serve does not know yet) unless
    ``h100_takes``; a100 takes and answers at once."""

    assign_timeout_s = 0.05

    def __init__(self, h100_takes: bool = False, h100_busy: bool = False) -> None:
        self.h100_takes, self.h100_busy = h100_takes, h100_busy
        self.sent: list[str] = []

    def start(self, rung: str, payload: Any, **_: Any) -> Pending:
        self.sent.append(rung)
        loop = asyncio.get_running_loop()
        assigned: asyncio.Future[None] = loop.create_future()
        if rung == "a100" or self.h100_takes:
            assigned.set_result(None)

            async def answer() -> str:
                return f"from {rung}"
        else:
            async def answer() -> str:
                await asyncio.sleep(3600)
                return "never"
        return Pending(rung, loop.create_task(answer()), assigned)

    def alive_within(self, rung: str, window_s: float) -> bool:
        return rung == "h100" and self.h100_busy


class Router(Hedging):
    def __init__(self, caller: FakeCaller) -> None:
        self._caller = caller  # type: ignore[assignment]
        self._state = RouterState(LADDER, down_cooldown_s=1.0)
        self._state.observe({"h100": 1, "a100": 1}, {"h100": True, "a100": True}, now=0)
        self._metrics = LadderMetrics(LADDER, enabled=False, app="hedge")
        self.background: list[asyncio.Task[Any]] = []

    def _failed(self, rung: str, reason: str) -> None:
        raise AssertionError(f"no rung fails here: {rung} {reason}")

    def _spawn(self, coro: Any) -> None:
        self.background.append(asyncio.get_running_loop().create_task(coro))

    async def ask(self) -> tuple[Any, str]:
        selector = self._state.selector(None, 0)
        try:
            return await self._race("h100", {"x": 1}, selector, [], {"h100"})
        finally:
            for task in self.background:
                task.cancel()


def test_a_request_its_rung_does_not_take_is_copied_once_and_counted() -> None:
    router = Router(FakeCaller())
    assert asyncio.run(router.ask()) == ("from a100", "a100")
    assert router._caller.sent == ["h100", "a100"]
    assert router._metrics.snapshot()["hedges"] == {"h100": 1}


def test_a_taken_request_is_never_copied() -> None:
    router = Router(FakeCaller(h100_takes=True))
    assert asyncio.run(router.ask()) == ("from h100", "h100")
    assert router._caller.sent == ["h100"]
    assert router._metrics.snapshot()["hedges"] == {}


def test_a_busy_rung_is_waited_for_not_hedged() -> None:
    caller = FakeCaller(h100_busy=True)
    router = Router(caller)

    async def ask_then_free() -> tuple[Any, str]:
        task = asyncio.get_running_loop().create_task(router.ask())
        await asyncio.sleep(3 * caller.assign_timeout_s)  # three windows: busy, no copy
        assert caller.sent == ["h100"]
        caller.h100_busy = False  # answers nobody any more: the next window copies
        return await task

    assert asyncio.run(ask_then_free()) == ("from a100", "a100")
    assert router._metrics.snapshot()["hedges"] == {"h100": 1}
