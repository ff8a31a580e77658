"""A stream on a rung whose nodes got a preemption notice moves at its next piece once
traffic has left the rung (``RungCaller.signal_leaving``, ``serve/calls.py``): what the
rung already sent is kept, what it has not made yet is made by the next rung. Over a
fake of Ray's streaming generator: the real one buffers what the replica sent, so a piece
already here is taken, never thrown away."""

from __future__ import annotations

import asyncio

import pytest

from ray_ladder.serve.calls import RungCaller
from ray_ladder.serve.errors import RungFailed


class Generator:
    """Pieces ``ready`` are here at once; the next one comes when ``more`` is set."""

    def __init__(self, ready: list[str]) -> None:
        self.ready = list(ready)
        self.more = asyncio.Event()

    def __aiter__(self) -> Generator:
        return self

    async def __anext__(self) -> str:
        if self.ready:
            return self.ready.pop(0)
        await self.more.wait()
        raise StopAsyncIteration


def _caller() -> RungCaller:
    return RungCaller({}, assign_timeout_s=0.25, request_timeout_s=None,
                      pending_timeout_s=5.0)


async def _take(caller: RungCaller, gen: Generator, elsewhere: bool,
                leave_after: int) -> tuple[list[str], BaseException | None]:
    """The pieces taken, and the error, with the rung left after ``leave_after`` pieces."""
    down: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    got: list[str] = []
    try:
        async for piece in caller._pieces("h100", gen, down, elsewhere=lambda: elsewhere):
            got.append(piece)
            if len(got) == leave_after:
                caller.signal_leaving(["h100"])
            if len(got) == 3 and not elsewhere:
                gen.more.set()  # nowhere to go: the engine finishes the answer
    except RungFailed as err:
        return got, err
    return got, None


def test_a_left_rung_s_stream_moves_once_what_it_sent_is_taken() -> None:
    got, err = asyncio.run(_take(_caller(), Generator(["a", "b", "c"]), True, 1))
    assert got == ["a", "b", "c"]  # the pieces already here are kept, none thrown away
    assert isinstance(err, RungFailed) and err.cause == "notice" and not err.timeout


def test_with_nowhere_else_to_go_it_stays_until_it_ends() -> None:
    got, err = asyncio.run(_take(_caller(), Generator(["a", "b", "c"]), False, 1))
    assert got == ["a", "b", "c"] and err is None


def test_a_stream_started_on_a_rung_already_left_moves_before_its_first_piece() -> None:
    async def run() -> BaseException | None:
        caller = _caller()
        caller.signal_leaving(["h100"])
        _, err = await _take(caller, Generator([]), True, 99)
        return err

    err = asyncio.run(run())
    assert isinstance(err, RungFailed) and err.cause == "notice"


@pytest.mark.parametrize("leaving", [[], ["a100"]])
def test_another_rung_s_notice_moves_nothing(leaving: list[str]) -> None:
    async def run() -> tuple[list[str], BaseException | None]:
        caller = _caller()
        caller.signal_leaving(leaving)
        gen = Generator(["a", "b", "c"])
        gen.more.set()  # the engine finishes the answer
        return await _take(caller, gen, True, 99)

    assert asyncio.run(run()) == (["a", "b", "c"], None)
