"""Which errors of a rung call mean "this rung cannot answer now" (fall) vs a user error."""

from __future__ import annotations

import re

from ray_ladder.cluster.errors import is_rung_gone
from ray_ladder.core.exceptions import AttemptCause


class RungFailed(Exception):
    """A rung could not answer a request (the router marks it down and falls).

    Attributes:
        reason: A short sentence for the request's attempt list.
        timeout: True when the rung said nothing (no error): ambiguous for a ping.
        cause: Why, as data (``timeout``, ``rung_down`` or ``failed``: an error).
        error: The error's class name when an error failed it.
        retry_after_s: How long the rung asked to be left alone (a backend's
            ``Retry-After``), if it said.
        suspect: The rung missed a deadline (no first piece in time, or silence with no
            target set): new requests avoid it at once, as if it had failed, though
            the rung may only be slow.
    """

    def __init__(self, reason: str, *, timeout: bool = False,
                 cause: AttemptCause | None = None, error: str | None = None,
                 retry_after_s: float | None = None, suspect: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timeout = timeout
        self.cause: AttemptCause = cause or ("timeout" if timeout else
                                             "failed" if error else "rung_down")
        self.error = error
        self.retry_after_s = retry_after_s
        self.suspect = suspect


class PieceLate(RungFailed):
    """A generation's next piece is later than its deadline and another rung can take
    the rest: it moves. A piece late for the inter-token target leaves the rung up (one
    slow piece); a first piece late, or a silence past the deadline that holds without
    a target (``serve/deadlines.py``), makes the rung ``suspect``."""

    def __init__(self, late_s: float, *, first: bool = False, suspect: bool = False,
                 what: str = "inter-token target") -> None:
        what = "first-token deadline" if first else what
        super().__init__(f"no {'first ' if first else ''}piece within the {late_s:g}s "
                         f"{what}", timeout=True, cause="late", suspect=suspect or first)
        self.first = first


class RungFull(Exception):
    """No replica of a live rung took the request by the request's deadline (arrival +
    ``pending_timeout_s``): the rung is full, not gone. The request left its queue (nothing
    ran there) and the walk goes on below; the rung is not marked down."""

    def __init__(self, rung: str) -> None:
        super().__init__(f"{rung} is full")
        self.rung = rung


def rung_failure(err: BaseException) -> RungFailed | None:
    """The :class:`RungFailed` that ``err`` means (its reason, ``cause="failed"`` and
    the error's class), or ``None`` when the rung's own code raised (a user error)."""
    reason = failure_reason(err)
    if reason is None:
        return None
    cause = getattr(err, "cause", None)
    gone = cause if cause is not None and is_rung_gone(cause) else err
    retry = getattr(gone, "retry_after_s", None)
    return RungFailed(reason, cause="failed", error=type(gone).__name__,
                      retry_after_s=float(retry) if isinstance(retry, (int, float)) else None)


def failure_reason(err: BaseException) -> str | None:
    """A reason when ``err`` means the rung (replica, node, actor) failed; ``None`` when
    the rung's own code raised (a user error, passed on to the caller).

    The errors that count are the one list in :mod:`ray_ladder.cluster.errors`.

    Example:
        >>> failure_reason(ActorDiedError())  # doctest: +SKIP
        'ActorDiedError: the replica or its node died'
    """
    from ray.exceptions import RayTaskError

    if isinstance(err, RayTaskError):
        # A user exception arrives as RayTaskError(cause); a dead actor the rung code
        # depended on arrives the same way and is the rung's failure too.
        cause = getattr(err, "cause", None)
        if cause is not None and is_rung_gone(cause):
            return f"{type(cause).__name__}: {_first_line(cause)}"
        return None
    if is_rung_gone(err):
        return f"{type(err).__name__}: {_first_line(err)}"
    return None


#: The longest message an HTTP error body quotes from a rung's exception.
MAX_MESSAGE_CHARS = 300
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def user_exception(err: BaseException) -> BaseException:
    """The rung's own exception inside ``err``: a user error reaches the router as a
    ``RayTaskError`` (one per actor hop) whose ``cause`` is what the rung's code raised.

    Example:
        >>> user_exception(ValueError("bad"))
        ValueError('bad')
    """
    from ray.exceptions import RayTaskError

    for _ in range(8):  # one RayTaskError per hop: router -> replica -> an actor it called
        cause = getattr(err, "cause", None) if isinstance(err, RayTaskError) else None
        if not isinstance(cause, BaseException):
            return err
        err = cause
    return err


def public_error(err: BaseException) -> tuple[str, str]:
    """What an HTTP error body may say of ``err``: the user exception's class and the
    first line of its message, without ANSI codes, at most :data:`MAX_MESSAGE_CHARS`.

    Never the traceback, pid, node IP, actor id or replica repr that ``str()`` of a
    ``RayTaskError`` carries: those go to the router's log only.

    Example:
        >>> public_error(ValueError("\x1b[31mno prompt\x1b[0m\\nmore"))
        ('ValueError', 'no prompt')
    """
    from ray.exceptions import RayTaskError

    cause = user_exception(err)
    if isinstance(cause, RayTaskError):  # its cause did not travel: say nothing of it
        return "RayTaskError", "the rung raised (its traceback is in the router's log)"
    return type(cause).__name__, _first_line(cause, MAX_MESSAGE_CHARS)


def _first_line(err: BaseException, limit: int = 200) -> str:
    lines = [line.strip() for line in _ANSI.sub("", str(err)).splitlines() if line.strip()]
    if not lines:
        return "no detail"
    return lines[0] if len(lines[0]) <= limit else lines[0][:limit - 3] + "..."
