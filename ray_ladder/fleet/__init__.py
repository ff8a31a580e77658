"""Teams that share a cluster's scarce rungs: the fleet arbiter (a restartable Ray actor)
and its handles. The decisions are pure (:mod:`ray_ladder.core.arbiter`); the grants are
read from Ray's KV (:mod:`ray_ladder.cluster.grants`). See docs/teams.md."""

from ray_ladder.fleet.arbiter import ARBITER_NAME, FleetArbiter, get_arbiter, start_arbiter

__all__ = ["ARBITER_NAME", "FleetArbiter", "get_arbiter", "start_arbiter"]
