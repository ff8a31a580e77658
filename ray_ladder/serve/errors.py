"""Which errors of a rung call mean "this rung cannot answer now" (fall) vs a user error."""

from __future__ import annotations


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


def _capacity_errors() -> tuple[type[BaseException], ...]:
    import ray.exceptions as rex
    import ray.serve.exceptions as sex

    return (
        rex.RayActorError,  # ActorDiedError, ActorUnavailableError
        rex.WorkerCrashedError,
        rex.NodeDiedError,
        rex.LocalRayletDiedError,
        rex.ObjectLostError,  # OwnerDiedError and friends
        rex.OutOfMemoryError,
        rex.TaskCancelledError,
        rex.ActorUnschedulableError,
        sex.DeploymentUnavailableError,
        sex.ReplicaUnavailableError,
        sex.BackPressureError,
        sex.RequestCancelledError,
    )


_CAPACITY: tuple[type[BaseException], ...] | None = None


def failure_reason(err: BaseException) -> str | None:
    """A reason when ``err`` means the rung (replica, node, actor) failed; ``None`` when
    the rung's own code raised (a user error, passed on to the caller).

    Example:
        >>> failure_reason(ActorDiedError())  # doctest: +SKIP
        'ActorDiedError: the replica or its node died'
    """
    global _CAPACITY
    if _CAPACITY is None:
        _CAPACITY = _capacity_errors()
    from ray.exceptions import RayTaskError

    if isinstance(err, RayTaskError):
        # A user exception arrives as RayTaskError(cause); a dead actor the rung code
        # depended on arrives the same way and is the rung's failure too.
        cause = getattr(err, "cause", None)
        if isinstance(cause, _CAPACITY):
            return f"{type(cause).__name__}: {_first_line(cause)}"
        return None
    if isinstance(err, _CAPACITY):
        return f"{type(err).__name__}: {_first_line(err)}"
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else "no detail"
