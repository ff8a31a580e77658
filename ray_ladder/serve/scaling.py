"""Autoscaling for rung deployments: Serve's policy, never below the rung's standby."""

# This module is cloudpickled by value into the Serve controller: keep it small and let it
# import only Ray Serve.
from __future__ import annotations

from typing import Any

from ray.serve.autoscaling_policy import replica_queue_length_autoscaling_policy


class StandbyPolicy:
    """Serve's default queue-length policy, floored at ``standby`` replicas.

    Rung deployments are deployed with ``min_replicas=0`` and ``initial_replicas=0`` so
    that ``serve.run`` returns even when a rung cannot be placed (its app is RUNNING at
    once); this policy then asks for the standby replicas, which Serve places when it
    can. Traffic above the floor scales the rung as Serve always does, and a rung with
    ``standby=0`` scales to zero when unused (Serve's ``downscale_delay_s``).

    Example:
        >>> AutoscalingPolicy(policy_function="ray_ladder.serve.scaling:StandbyPolicy",
        ...                   policy_kwargs={"standby": 1})  # doctest: +SKIP
    """

    def __init__(self, standby: int = 0) -> None:
        self.standby = int(standby)

    def __call__(self, ctx: Any) -> tuple[float, dict[str, Any]]:
        desired, state = replica_queue_length_autoscaling_policy(ctx)
        return max(desired, self.standby), state
