"""An external backend rung gives every connection back, also when the router stops
reading a generation early (it had its tokens, or it moved the stream): a leak would
run the rung's pool dry after a few hundred requests (httpx's PoolTimeout), and its
health check with it. No Ray: the rung's own generator through the replica's pipeline,
against a real server on loopback."""

from __future__ import annotations

import asyncio

from ray_ladder.core.context import RungContext
from ray_ladder.serve.llm.backend import OpenAIBackendRung
from ray_ladder.serve.llm.replica import stream_pieces
from ray_ladder.testing.faults import FaultyBackend

#: More generations cut short than httpx's default pool holds (100 connections).
CUT_SHORT = 250


def test_generations_cut_short_leave_no_connection_behind() -> None:
    async def run(url: str) -> None:
        rung = OpenAIBackendRung(RungContext("fallback", 1, "x", params={
            "base_url": url, "model": "fb", "timeout_s": 5}))
        for i in range(CUT_SHORT):  # the replica stops reading at max_tokens
            request = {"messages": [{"role": "user", "content": str(1000 * i)}],
                       "max_tokens": 3}
            assert len([p async for p in stream_pieces(rung.generate, request)]) >= 1
        await asyncio.wait_for(rung.check_health(), 10)  # raises on a dry pool

    with FaultyBackend("fb", tokens_per_s=0) as backend:
        asyncio.run(run(backend.url))
