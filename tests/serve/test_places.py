"""The router's own queue for a full rung (serve/places.py), without Ray."""

from __future__ import annotations

import asyncio

import pytest

from ray_ladder.serve.places import Places


def _run(coro):
    return asyncio.run(coro)


def test_places_go_in_arrival_order_the_moment_one_frees() -> None:
    async def go() -> list[int]:
        places = Places()
        places.set_capacity("h100", 2)
        assert [await places.take("h100") for _ in range(2)] == [True, True]
        order: list[int] = []

        async def wait(i: int) -> None:
            await places.take("h100")
            order.append(i)

        waiters = [asyncio.ensure_future(wait(i)) for i in range(3)]
        await asyncio.sleep(0)
        assert order == [] and places.waiting("h100") == 3
        places.give_back("h100")
        await asyncio.sleep(0)
        assert order == [0] and places.in_use("h100") == 2
        places.give_back("h100")
        places.give_back("h100")
        await asyncio.gather(*waiters)
        return order

    assert _run(go()) == [0, 1, 2]


def test_a_rung_with_no_known_place_is_not_gated() -> None:
    async def go() -> tuple[bool, bool]:
        places = Places()
        cold = await places.take("l4")
        places.set_capacity("h100", 1)
        await places.take("h100")
        waiter = asyncio.ensure_future(places.take("h100"))
        await asyncio.sleep(0)
        places.set_capacity("h100", 0)  # its replica is gone: waiters go on, ungated
        return cold, await waiter

    assert _run(go()) == (False, False)


def test_more_replicas_let_waiters_in_and_a_cancelled_waiter_leaves_the_queue() -> None:
    async def go() -> tuple[int, int]:
        places = Places()
        places.set_capacity("h100", 1)
        await places.take("h100")
        gone = asyncio.ensure_future(places.take("h100"))
        stays = asyncio.ensure_future(places.take("h100"))
        await asyncio.sleep(0)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        places.set_capacity("h100", 2)
        assert await stays is True
        return places.in_use("h100"), places.waiting("h100")

    assert _run(go()) == (2, 0)
