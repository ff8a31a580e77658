"""How long a generation may keep silent on a rung before it goes on elsewhere (pure).

A rung that accepts a request and then says nothing (a hung backend, a first token that
never comes, an answer that stops mid-way) must not cost the client its whole timeout
while another rung could answer. Every generation, streamed or whole, runs under two
deadlines on each rung it reaches:

* the **first-token deadline**: the request's first-token target (``ttft_s``) when one
  holds, else :data:`SILENCE_S`, or :data:`MEASURED_FACTOR` x the rung's own measured
  first-piece time where that is longer (a big model on a busy rung is not silent, it is
  slow). A rung that misses it is *suspect*: the generation goes on at once on another
  rung and new requests avoid the rung as if it had failed (its cooldown, then a ping).
* the **inter-token deadline**: the request's ``inter_token_s`` target when one holds (a
  piece late for it moves the generation, at most ``late_moves`` times, only to a rung
  expected to start within the first-token deadline, and leaves the rung up: one slow
  piece is not a dead rung), else :data:`SILENCE_S` between two pieces, which makes the
  rung suspect like a missed first token.

Either deadline moves a generation only where another rung could take it: the last rung
standing is waited for (its HTTP timeout still bounds it).

Example:
    >>> from ray_ladder.core.latency import LatencyTargets
    >>> d = deadlines(LatencyTargets(ttft_s=2.0, inter_token_s=1.0), measured_first_s=0.1)
    >>> d.first_s, d.late_s, d.late_moves, d.silence
    (2.0, 1.0, 1, False)
    >>> d = deadlines(None, measured_first_s=4.0)
    >>> d.first_s, d.late_s, d.silence
    (16.0, 10.0, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from ray_ladder.core.latency import LatencyTargets

#: Seconds of silence (before the first piece, or between two pieces) after which a rung
#: is suspect when the request sets no target.
SILENCE_S = 10.0
#: A rung's first-token deadline without a target is at least this many times its own
#: measured time to a first piece.
MEASURED_FACTOR = 4.0
#: Moves a silence (no target) may make of one generation: every rung it reaches may be
#: the next to hang.
SILENCE_MOVES = 3


@dataclass(frozen=True, slots=True)
class Deadlines:
    """One generation's deadlines on a rung.

    Attributes:
        first_s: Seconds from a replica taking the request to its first piece.
        late_s: Seconds between two pieces.
        late_moves: Moves a late piece may make (the first-token deadline is not
            counted: a rung that never started cannot be waited on).
        bar_s: The most a rung a late stream moves to may take to its first piece.
        silence: ``late_s`` is the silence default, not a target: a late piece makes
            the rung suspect.
    """

    first_s: float
    late_s: float
    late_moves: int
    bar_s: float
    silence: bool


def deadlines(targets: LatencyTargets | None, measured_first_s: float = 0.0) -> Deadlines:
    """The deadlines of a generation under ``targets`` on a rung whose first piece has
    taken ``measured_first_s`` (with its usual spread; 0 when not timed yet)."""
    ttft = targets.ttft_s if targets is not None else None
    first = ttft if ttft is not None else max(SILENCE_S, MEASURED_FACTOR * measured_first_s)
    gap = targets.inter_token_s if targets is not None else None
    if gap is None:
        return Deadlines(first, SILENCE_S, SILENCE_MOVES, first, silence=True)
    moves = targets.late_moves if targets is not None else 0
    return Deadlines(first, gap, moves, ttft if ttft is not None else gap, silence=False)


@dataclass(frozen=True, slots=True)
class PieceDeadlines:
    """What the rung caller holds one stream's pieces to on one rung: ``first_s`` for
    its first, ``late_s`` between two (``may_move()``: a rung that would not be slower
    can take the rest), and whether a late piece is ``silence`` (the rung is suspect)."""

    first_s: float | None
    late_s: float | None
    silence: bool
    may_move: Callable[[], bool]
    #: No deadline: pieces are waited for (the HTTP timeouts still hold).
    NONE: ClassVar[PieceDeadlines]


PieceDeadlines.NONE = PieceDeadlines(None, None, False, lambda: False)
