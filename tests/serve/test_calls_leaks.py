"""A request the handle refuses to send gives its place and its count back: a leaked one
would make the router's estimate of the rung's queue grow for good, and every later
request spill past a healthy rung (``serve/calls.py``, ``serve/load.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ray_ladder.serve.calls import RungCaller
from ray_ladder.serve.load import LoadBook


class RefusingHandle:
    """A DeploymentHandle whose sends fail at once (Serve refusing a call)."""

    def options(self, **_: Any) -> RefusingHandle:
        return self

    def remote(self, *_: Any) -> Any:
        raise RuntimeError("the handle refused the call")


async def _drain(pieces: Any) -> None:
    async for _piece in pieces:
        pass


def _caller() -> RungCaller:
    book = LoadBook({"h100": 2}, answer_s=0.5, ttft_s=None, slow_after_s=10.0)
    caller = RungCaller({"h100": RefusingHandle()}, assign_timeout_s=0.25,
                        request_timeout_s=None, pending_timeout_s=5.0, book=book)
    caller.set_replicas({"h100": 1})  # two places, gated
    return caller


def test_a_refused_request_gives_back_its_place_and_its_count() -> None:
    async def run() -> RungCaller:
        caller = _caller()
        for _ in range(3):  # more than the rung's two places
            with pytest.raises(RuntimeError, match="refused"):
                # A leaked place would hold the third request in the queue: bounded.
                await asyncio.wait_for(caller.start("h100", {"q": 1}, warm=True).task, 5)
        return caller

    caller = asyncio.run(run())
    assert caller.book is not None
    assert caller.book.rungs["h100"].in_flight == 0
    assert caller.places.in_use("h100") == 0


def test_a_refused_stream_gives_back_its_place_and_its_count() -> None:
    async def run() -> RungCaller:
        caller = _caller()
        for _ in range(3):
            with pytest.raises(RuntimeError, match="refused"):
                await asyncio.wait_for(_drain(caller.stream("h100", {"q": 1}, warm=True,
                                                            give_up_s=None)), 5)
        return caller

    caller = asyncio.run(run())
    assert caller.book is not None
    assert caller.book.rungs["h100"].in_flight == 0
    assert caller.places.in_use("h100") == 0


@pytest.mark.parametrize("steps", range(6))
def test_a_request_cancelled_as_a_place_frees_gives_the_place_back(steps: int) -> None:
    """A request waiting for a place is cancelled (a hedge's loser, a request leaving a
    full rung's queue at its deadline, a client gone) around the moment a place is handed
    to it: whichever loop step the cancel lands on, the place goes back."""
    async def run() -> RungCaller:
        caller = _caller()
        held = [await caller.places.take("h100") for _ in range(2)]  # both places busy
        assert held == [True, True]
        pending = caller.start("h100", {"q": 1}, warm=True)
        while caller.places.waiting("h100") == 0:
            await asyncio.sleep(0)  # not a clock: one loop step until it queues
        caller.places.give_back("h100")  # a place frees: handed to the waiting request
        for _ in range(steps):
            await asyncio.sleep(0)
        pending.cancel()
        with pytest.raises((asyncio.CancelledError, RuntimeError)):
            await pending.task
        caller.places.give_back("h100")  # the other holder ends
        return caller

    caller = asyncio.run(run())
    assert caller.book is not None
    assert caller.book.rungs["h100"].in_flight == 0
    # As `GET /-/ladder` shows it under `load` (a leak: places_in_use stays up for good).
    assert caller.places.snapshot("h100") == {"places": 2, "places_in_use": 0,
                                              "waiting_for_place": 0}, "a place was leaked"
