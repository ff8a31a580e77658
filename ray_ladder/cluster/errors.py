"""The one list of errors that mean "the rung is gone", for tasks and Serve alike.

An attempt or request that fails with one of these did not fail by its own code: its node,
worker, actor, replica or object went away, or Ray could not place it. The caller tries
again elsewhere; any other error is the function's own answer and goes to the caller.

The list names classes by module and name, so checking an error imports nothing (the task
orchestrator never imports Serve); ``tests/cluster/test_ray_private.py`` resolves every name
against the installed Ray.
"""

from __future__ import annotations

#: module -> class names whose instances (and subclasses') mean the rung is gone.
RUNG_GONE: dict[str, tuple[str, ...]] = {
    "ray.exceptions": (
        "NodeDiedError",
        "WorkerCrashedError",
        "LocalRayletDiedError",
        "RaySystemError",
        "TaskUnschedulableError",
        "ActorUnschedulableError",
        "RayActorError",  # ActorDiedError, ActorUnavailableError
        "ObjectLostError",  # OwnerDiedError and friends
        "OutOfMemoryError",
        "TaskCancelledError",  # cancelled by Ray, not by the ladder (which knows its own)
    ),
    "ray_ladder.core.exceptions": ("RungUnavailableError",),  # a rung says so itself
    "ray.serve.exceptions": (
        "DeploymentUnavailableError",
        "ReplicaUnavailableError",
        "BackPressureError",
        "RequestCancelledError",
    ),
}

def gone_class(err: BaseException) -> type[BaseException] | None:
    """The class in :data:`RUNG_GONE` that ``err`` is an instance of, or ``None``.

    Example:
        >>> gone_class(ValueError("x")) is None
        True
    """
    for cls in type(err).__mro__:
        if cls.__name__ in RUNG_GONE.get(cls.__module__, ()):
            return cls
    return None


def is_rung_gone(err: BaseException) -> bool:
    """Whether ``err`` means the rung (node, worker, actor, replica) went away.

    Example:
        >>> is_rung_gone(RuntimeError("model bug"))
        False
    """
    return gone_class(err) is not None
