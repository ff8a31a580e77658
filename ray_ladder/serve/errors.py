"""Which errors of a rung call mean "this rung cannot answer now" (fall) vs a user error."""

from __future__ import annotations

from ray_ladder.cluster.errors import is_rung_gone


class RungFailed(Exception):
    """A rung could not answer a request (the router marks it down and falls).

    Attributes:
        reason: A short sentence for the request's attempt list.
        timeout: True when the rung said nothing (no error): ambiguous for a ping.
    """

    def __init__(self, reason: str, *, timeout: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timeout = timeout


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


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else "no detail"
