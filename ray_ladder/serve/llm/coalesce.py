"""Pieces that wait are sent together: an engine on a fast accelerator (or a tiny model on
a CPU) makes tokens faster than one call a token crosses from the rung's replica to the
router, so while one piece is in flight the next ones queue; they then go as one
:class:`~ray_ladder.serve.llm.protocol.Tokens` (its text, count and ids joined). When
nothing waits, a piece goes alone, at once: coalescing adds no latency, it only removes
calls under a backlog (docs/llm.md, "Real engines")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

from ray_ladder.serve.llm.protocol import Tokens

_END = object()


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


async def ready_batches(pieces: AsyncIterator[Any]) -> AsyncGenerator[list[Any], None]:
    """The pieces of ``pieces``, as lists of every piece ready when the consumer asks
    (never empty); an error raised by ``pieces`` comes after the pieces before it."""
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for piece in pieces:
                queue.put_nowait(piece)
            queue.put_nowait(_END)
        except Exception as err:  # the consumer raises it, after what came before
            queue.put_nowait(_Raised(err))

    task = asyncio.get_running_loop().create_task(pump())
    try:
        while True:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            done = batch[-1] is _END or isinstance(batch[-1], _Raised)
            items = batch[:-1] if done else batch
            if items:
                yield items
            if isinstance(batch[-1], _Raised):
                raise batch[-1].error
            if done:
                return
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        aclose = getattr(pieces, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


def joined(batch: Sequence[Any]) -> list[Any]:
    """``batch`` with each run of :class:`Tokens` joined into one; ``str`` pieces (one
    token each, a rung's own unit) are kept as they are. Tokens still waiting for their
    text (a partial character) at the end of a run stay apart, so the router can hold
    them (``StreamRecord.take``).

    Example:
        >>> [t.text if isinstance(t, Tokens) else t
        ...  for t in joined([Tokens("a", 1, (1,)), Tokens("b", 1, (2,)), "c"])]
        ['ab', 'c']
    """
    out: list[Any] = []
    run: list[Tokens] = []

    def flush() -> None:
        if not run:
            return
        last_text = max((i for i, t in enumerate(run) if t.text or t.finish_reason),
                        default=-1)
        head, tail = run[:last_text + 1], run[last_text + 1:]
        out.extend(p for p in (_join(head), _join(tail)) if p is not None)
        run.clear()

    for piece in batch:
        if isinstance(piece, Tokens):
            run.append(piece)
            continue
        flush()
        out.append(piece)
    flush()
    return out


def _join(run: Sequence[Tokens]) -> Tokens | None:
    if not run:
        return None
    if len(run) == 1:
        return run[0]
    count = sum(t.count for t in run)
    ids = tuple(i for t in run for i in t.ids)
    tokenizers = {t.tokenizer for t in run if t.ids}
    known = len(ids) == count and len(tokenizers) <= 1
    return Tokens("".join(t.text for t in run), count, ids if known else (),
                  next(iter(tokenizers)) if known and tokenizers else None,
                  next((t.finish_reason for t in reversed(run) if t.finish_reason), None),
                  next((t.prompt_tokens for t in run if t.prompt_tokens is not None), None))
