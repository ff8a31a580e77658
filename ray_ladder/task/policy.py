"""What a failed attempt means for its calls: a pure function of the failure and the call.

The orchestrator's lanes gather the facts of a failure (:class:`AttemptFailure`, plain
values, no Ray objects), ask this module, and only then act, the way tenacity's engine
decides ``DoAttempt``/``DoSleep`` from a call state before doing anything. Every rule of
the task ladder's retries lives here, each unit-tested without Ray
(``tests/task/test_policy.py``).

Actions:

* ``fall``: record the attempt and route the call at or below the next rung down;
* ``retry``: record the attempt and route the call again from where it may still go
  (the same rung when it is still obtainable: another node of it);
* ``split``: run each call of a failed batch alone, to learn which one failed (the
  attempt does not count against ``max_attempts``);
* ``raise``: the failure is the call's answer (the function's own error);
* ``wait``: keep the call queued (nothing below to fall to: queueing, not hanging);
* ``exhaust``: the call ends with ``LadderExhaustedError``;
* ``run``: route the call (see :func:`admit`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ray_ladder.core.exceptions import AttemptCause

Kind = Literal["fall", "retry", "split", "raise", "wait", "exhaust", "run"]

#: How long a node that killed an attempt is kept out (until the GCS confirms it dead).
NODE_DIED_SUSPECT_S = 60.0
#: A crashed worker says less about its node: keep the node out only briefly.
WORKER_CRASH_SUSPECT_S = 2.0
_NODE_ID = re.compile(r"node ID: ([0-9a-f]{56})")


@dataclass(frozen=True, slots=True)
class Action:
    """What to do with the calls of a failed attempt (or with one call).

    Attributes:
        kind: See the module docstring.
        reason: The sentence recorded in the call's attempts (empty for ``raise``/``run``).
        suspect_node: A node to count as dead at once (before the GCS says so).
        suspect_ttl_s: For how long.
        cause: Why, as data, recorded with ``reason`` (``Attempt.cause``).
        error: The error's class name when an error failed the attempt.

    Example:
        >>> Action("fall", "OutOfMemoryError: 8 GiB", cause="failed",
        ...        error="OutOfMemoryError").kind
        'fall'
    """

    kind: Kind
    reason: str = ""
    suspect_node: str | None = None
    suspect_ttl_s: float = 0.0
    cause: AttemptCause = "other"
    error: str | None = None


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    """The facts of one failed attempt, as the lane saw them.

    Attributes:
        error: The error's class name.
        message: ``str(error)``.
        cancelled: The ladder's own reason when it stopped the attempt itself.
        cancel_cause: The cause that goes with ``cancelled`` (``timeout``, ``busy``,
            ``unobtainable``).
        cancel_falls: The ladder stopped it to make its calls fall (a busy rung).
        fallback: The error matches the task's ``fallback_on``.
        rung_gone: The error is one of :data:`ray_ladder.cluster.errors.RUNG_GONE`.
        worker_crash: The error is a ``WorkerCrashedError``.
        stream_failed: The attempt had started and its result stream failed
            (``RayTaskError``: a value that does not serialize, for example).
        node: The node the attempt ran on, when it told.
        batch_size: Calls in the attempt.

    Example:
        >>> AttemptFailure("NodeDiedError", "node died", rung_gone=True).rung_gone
        True
    """

    error: str
    message: str = ""
    cancelled: str | None = None
    cancel_cause: AttemptCause = "other"
    cancel_falls: bool = False
    fallback: bool = False
    rung_gone: bool = False
    worker_crash: bool = False
    stream_failed: bool = False
    node: str | None = None
    batch_size: int = 1


def on_attempt_failure(failure: AttemptFailure) -> Action:
    """The action for every call of ``failure``'s attempt that has no answer yet.

    Rules, first match wins:

    1. the ladder stopped the attempt: ``fall`` if it did so to make the calls fall,
       else ``retry`` (its rung went away; the calls go where they may), with the
       cause it stopped it for;
    2. the error matches ``fallback_on``: ``fall`` (cause ``failed``, the error's class);
    3. the rung is gone (node, worker, actor, object): ``retry`` (cause ``failed``), and
       the node that ran it is suspect (briefly for a crashed worker);
    4. the stream failed after the attempt started: ``raise`` for one call (that is its
       answer), ``split`` for a batch (to learn which call it was);
    5. anything else: ``raise``.

    Example:
        >>> on_attempt_failure(AttemptFailure("ValueError", "bad")).kind
        'raise'
    """
    if failure.cancelled is not None:
        return Action("fall" if failure.cancel_falls else "retry", failure.cancelled,
                      cause=failure.cancel_cause)
    if failure.fallback:
        return Action("fall", f"{failure.error}: {failure.message}", cause="failed",
                      error=failure.error)
    if failure.rung_gone:
        node = failure.node or node_in(failure.message)
        where = f" on node {node[:8]}" if node else ""
        ttl = WORKER_CRASH_SUSPECT_S if failure.worker_crash else NODE_DIED_SUSPECT_S
        return Action("retry", f"{failure.error}{where}", node, ttl if node else 0.0,
                      cause="failed", error=failure.error)
    if failure.stream_failed:
        return Action("raise") if failure.batch_size == 1 else Action("split")
    return Action("raise")


def on_call_error(error: str, message: str, *, fallback: bool) -> Action:
    """One call of a batch raised: ``fall`` when ``fallback_on`` matches (cause
    ``failed``, the error's class), else ``raise``.

    Example:
        >>> on_call_error("MemoryError", "", fallback=True).reason
        'MemoryError: '
    """
    if not fallback:
        return Action("raise")
    return Action("fall", f"{error}: {message}", cause="failed", error=error)


def on_pending_timeout(pending_timeout_s: float, *, lower_obtainable: bool,
                       ahead: int | None = None) -> Action:
    """A call (queued, or its attempt not yet scheduled) waited ``pending_timeout_s``.

    It falls (cause ``timeout``) when a lower eligible rung is obtainable; otherwise it
    keeps waiting, since with nothing below, waiting is queueing, not hanging.

    Example:
        >>> on_pending_timeout(5.0, lower_obtainable=False).kind
        'wait'
    """
    if not lower_obtainable:
        return Action("wait")
    queue = f" ({ahead} attempt(s) ahead)" if ahead is not None else ""
    return Action("fall", f"not scheduled within {pending_timeout_s:g}s{queue}",
                  cause="timeout")


def admit(submitted: int, max_attempts: int, *, routable: bool) -> Action:
    """Before each attempt: ``run``, or ``exhaust`` when the attempts are used up (cause
    ``other``) or no eligible rung is obtainable at or below where the call may still go
    (cause ``no_rung``).

    Example:
        >>> admit(3, 3, routable=True).reason
        'max_attempts (3) reached'
    """
    if submitted >= max_attempts:
        return Action("exhaust", f"max_attempts ({max_attempts}) reached")
    if not routable:
        return Action("exhaust", "no eligible rung obtainable", cause="no_rung")
    return Action("run")


def node_in(message: str) -> str | None:
    """The node id a Ray error message names (``node ID: <56 hex>``), if any.

    Example:
        >>> node_in("lost") is None
        True
    """
    match = _NODE_ID.search(message)
    return match.group(1) if match else None
