"""One client stream across rungs: when the rung producing it is lost mid-generation, the
stream continues on the best obtainable eligible rung from the text already sent."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray_ladder.cluster.event_log import log_event
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.events import TransitionEvent
from ray_ladder.core.latency import LatencyTargets
from ray_ladder.serve.deadlines import Deadlines, deadlines
from ray_ladder.serve.errors import PieceLate, RungFailed
from ray_ladder.serve.llm.protocol import GenerationRequest, Tokens, first_stop
from ray_ladder.serve.llm.responses import StreamRecord
from ray_ladder.serve.walk import FromCache, RequestView, Try, Wait, Walk

if TYPE_CHECKING:
    from ray_ladder.serve.walker import Walker


@dataclass(frozen=True, slots=True)
class Piece:
    """Text sent to the client, and the rung that produced it.

    ``switched_from`` is set on the first piece after the stream moved to this rung.
    """

    rung: str
    text: str
    switched_from: str | None = None
    reason: str | None = None


class StreamFailed(Exception):
    """A stream that already sent text cannot go on (every eligible rung is gone)."""


@dataclass
class _Move:
    """A stream that moved: the rung it left and why (set on the next piece sent)."""

    previous: str | None = None
    reason: str | None = None

    def piece(self, rung: str, text: str) -> Piece:
        piece = Piece(rung, text, self.previous, self.reason)
        self.previous = self.reason = None
        return piece


@dataclass
class _Lateness:
    """How late pieces may move one generation (``serve/deadlines.py``): its targets,
    the late moves it has left (set at its first rung) and the bar a rung it moves to
    must meet (its first piece within the first-token deadline)."""

    targets: LatencyTargets | None = None
    moves_left: int | None = None
    bar_s: float = 0.0

    def on(self, measured_first_s: float) -> Deadlines:
        """The deadlines on a rung whose first piece takes ``measured_first_s``."""
        found = deadlines(self.targets, measured_first_s)
        if self.moves_left is None:
            self.moves_left = found.late_moves
        self.bar_s = found.bar_s
        return found


class StreamDriver:
    """Runs one generation for the router over the request walk (:mod:`~ray_ladder.serve.walk`),
    moving it between rungs when one is lost.

    The rung of a new stream is the one the walk names (the request's selector's current
    rung). If that rung's replica does not take the stream within ``assign_timeout_s``
    while a compute rung the stream has not tried could, it starts there instead (nothing was
    generated; the ladder does not move for it; counted as a hedge). If the rung fails
    (node or replica gone, the probe saw it go), it is marked down, the selectors move at
    once, and the stream continues on the rung the walk names next with the text already
    sent as the new rung's ``continuation``. A generation (streamed or whole) that
    misses a deadline on its rung (``serve/deadlines.py``) moves the same way: no first
    piece within the first-token deadline (the rung is suspect: marked down), or a piece
    later than the inter-token target (at most ``late_moves`` times, only to a rung
    expected to send its first piece within the first-token target; the late rung is not
    marked down) or, with no target, than the silence deadline (suspect). The walk's
    wait, cache, shed and exhaustion steps are the JSON route's, counted the same way.

    Args:
        router: The request walk's parts.
    """

    def __init__(self, router: Walker) -> None:
        self.router = router
        self._late = _Lateness()

    async def run(self, request: GenerationRequest, constraints: Constraints | None,
                  record: StreamRecord, cache_key: Any = None, *,
                  targets: LatencyTargets | None = None,
                  stream: bool = True) -> AsyncIterator[Piece]:
        """The pieces of the answer, from as many rungs as it takes. With ``targets``
        the first piece of a ``stream`` (else the whole answer) is held to its target:
        a rung expected to miss it is passed over (``serve/walk.py``).

        Raises:
            LadderExhaustedError: before the first piece, when no eligible rung can start
                the stream (shed, or all gone): the caller answers 503 with Retry-After.
            StreamFailed: after some text was sent, when no rung can continue it.
        """
        router = self.router
        # Compute rungs whose class does not generate text never take a stream.
        never = frozenset(r.name for r in router.ladder.rungs
                          if r.is_compute and r.name not in router.llm_rungs)
        target_s = None if targets is None else \
            targets.ttft_s if stream else targets.answer_s
        walk, view = router.start_walk(constraints, never, target_s=target_s,
                                       kind="first" if stream else "answer")
        self._late = _Lateness(targets)
        move = _Move()
        while True:
            step = router.next_step(walk, view)
            if isinstance(step, Wait):
                await router.wait(step)
            elif isinstance(step, FromCache):
                hit = router.cached(walk, step.rung, cache_key, constraints)
                text = hit.value if hit is not None and isinstance(hit.value, str) else None
                if text is not None and text.startswith(record.text):
                    record.tokens[step.rung] = record.tokens.get(step.rung, 0) + 1
                    record.finish_reason, record.rung = "stop", step.rung
                    router.served(step.rung)
                    if text[len(record.text):]:
                        yield move.piece(step.rung, text[len(record.text):])
                    return
            elif isinstance(step, Try):
                rest = request.continuing(record.text, record.completion_tokens,
                                          *record.continued_ids())
                if rest.max_tokens <= 0:  # a move landed exactly on max_tokens
                    record.finish_reason = "length"
                    return
                pieces = self._generate(step.rung, request, rest, record, view, walk, move)
                try:
                    async with contextlib.aclosing(pieces):
                        async for piece in pieces:
                            walk.target_at = None  # the first token's target is met or gone
                            yield piece
                except RungFailed as failed:
                    done = record.completion_tokens >= request.max_tokens
                    self._lost(walk, step.rung, failed, record, move, moves=not done)
                    continue
                self._finished(step.rung, record, cache_key, constraints)
                return
            elif record.completion_tokens >= request.max_tokens:
                record.finish_reason = "length"  # its rung failed after the last piece:
                return  # nothing is left to continue
            elif record.text:
                router.refuse(walk)  # counted as exhausted: no rung could continue it
                raise StreamFailed(f"the stream lost its rung after "
                                   f"{record.completion_tokens} token(s) and no eligible "
                                   "rung could continue it")
            else:
                raise router.refuse(walk)

    async def _generate(self, name: str, request: GenerationRequest,
                        rest: GenerationRequest, record: StreamRecord, view: RequestView,
                        walk: Walk, move: _Move) -> AsyncGenerator[Piece, None]:
        """The pieces ``name`` generates for ``rest`` of the answer (raises RungFailed)."""
        caller = self.router.caller
        first_try = not record.text
        late = self._late.on(view.own_s(name, "first"))
        moves = self._late.moves_left or 0
        stream = caller.stream(
            name, rest.to_dict(), warm=self.router.router_state.is_warm(name),
            # Started elsewhere when slow to be taken: only where a replica runs.
            give_up_s=caller.assign_timeout_s if first_try
            and view.hedge_target(walk.excluded | {name}) is not None else None,
            elsewhere=lambda: view.has_other_compute(name, walk.excluded),
            late_s=late.late_s if moves > 0 else None,
            may_move=lambda: self._may_move(view, walk, name),
            first_s=late.first_s, silence=late.silence,
            leave_s=None if walk.leave_at is None or not first_try
            else max(0.0, walk.leave_at - self.router.now()))
        engine_finish = None
        async for raw in stream:
            piece = Tokens.of(raw)
            engine_finish = piece.finish_reason or engine_finish
            text = record.take(name, piece)
            if not text:
                continue
            cut = first_stop(record.text + text, request.stop, len(record.text))
            if cut is not None:
                text = (record.text + text)[len(record.text):cut]
                record.text += text
                record.finish_reason = "stop"
                if text:
                    yield move.piece(name, text)
                await stream.aclose()
                return
            record.text += text
            yield move.piece(name, text)
        record.finish(name)
        record.finish_reason = ("length" if record.completion_tokens >= request.max_tokens
                                else engine_finish or "stop")

    def _may_move(self, view: RequestView, walk: Walk, name: str) -> bool:
        """Whether a late stream on ``name`` has a rung to move to that would not be
        slower: one expected to send its first piece within the first-token target."""
        target = view.best_compute(walk.excluded | {name})
        return target is not None and \
            view.expected_s(target, "first", self.router.now()) <= self._late.bar_s

    def _lost(self, walk: Walk, name: str, failed: RungFailed, record: StreamRecord,
              move: _Move, moves: bool = True) -> None:
        """``name`` failed the stream: note it; a move the client sees once text was sent."""
        if isinstance(failed, PieceLate) and not failed.first:
            self._late.moves_left = (self._late.moves_left or 1) - 1
        record.drop_held()
        self.router.rung_failed(walk, name, failed)
        if failed.timeout and not record.text:
            self.router.hedged(name)  # it was slow to take the stream: started elsewhere
        # A move the client sees: none before any text, none once the budget is spent
        # (the rung failed after the last token), and none from a rung that failed
        # before sending this stream a piece: the move the client sees is still the one
        # from the rung that sent the last text (a100 lost, cpu's first try refused
        # because the probe saw it down a moment, cpu again: "from a100", not "from cpu").
        if record.text and moves and move.previous is None:
            record.switches.append({"from": name, "at_token": record.completion_tokens,
                                    "reason": failed.reason})
            move.previous, move.reason = name, failed.reason

    def _finished(self, rung: str, record: StreamRecord, cache_key: Any,
                  constraints: Constraints | None) -> None:
        router = self.router
        router.served(rung)
        record.rung = rung
        for switch in record.switches:
            switch.setdefault("to", rung)
        if record.switches:
            first = record.switches[0]
            log_event(TransitionEvent(router.now(), router.ladder.name, first["from"], rung,
                                      "down", f"stream continued: {first['reason']}",
                                      kind="call", cause="lost"))
        # Cache single-rung answers only: a mixed one has no one producer to check
        # residency against.
        if len(record.tokens) == 1:
            router.remember(cache_key, constraints, record.text, rung)
