"""Autoscaling for rung deployments: Serve's policy, floored by the standby and the hook."""

# This module is cloudpickled by value into the Serve controller: keep it small and let it
# import only Ray.
from __future__ import annotations

import json
from typing import Any

from ray.serve.autoscaling_policy import replica_queue_length_autoscaling_policy

from ray_ladder.core.ledger import part_entry

# Where the autoscaler hook publishes its roles: ray_ladder.cluster.roles holds the same
# values (a test keeps them equal); importing it here would tie the controller to ray_ladder.
HOOK_KV_NAMESPACE = "ray_ladder"
HOOK_ROLES_PREFIX = "autoscale/roles/"
HOOK_STALE_STEPS = 10
HOOK_STALE_MIN_S = 30.0
#: Re-read the hook's roles at most this often (the controller calls the policy ~10x/s).
HOOK_READ_EVERY_S = 1.0
#: Roles that send a rung's deployment to 0 replicas once no request is left for it.
_CUT_ROLES = ("released", "draining")
#: Where a ladder router publishes the cold rungs it primes: app -> {rung: wall time}.
PRIME_PREFIX = "serve/prime/"
#: A primed rung keeps at least one replica this long (then its traffic keeps it).
PRIME_HOLD_S = 60.0
#: Re-read the primes of a rung with no replica at most this often (Serve's controller
#: calls the policy every 0.1 s: one KV read per loop per cold rung).
PRIME_READ_EVERY_S = 0.1
#: Where a ladder router publishes the replicas its rungs need for their sustained spill:
#: app -> {"time": wall time, "ladder": name, "rungs": {rung: replicas}}
#: (ray_ladder/serve/load.py); the rung's scaling policy and the ladder's autoscaler hook
#: read it.
SPILL_PREFIX = "serve/spill/"
#: A spill entry older than this is stale (the router stopped publishing it).
SPILL_FRESH_S = 30.0
#: Where the fleet arbiter publishes a team's grants (ray_ladder.cluster.grants).
GRANTS_PREFIX = "fleet/grants/"


def publish_primes(app: str, primes: dict[str, float]) -> None:
    """The router's side: ``primes`` (rung -> wall time it asked for a replica) of ``app``.

    Serve's own cold start lags a long-lived handle: its cold-start push reports the
    handle's recorded queue samples, the zeros of its idle past, so the controller sees
    a queued request only at a later periodic push (2-7 s here, by ``look_back_period_s``).
    """
    from ray.experimental.internal_kv import _internal_kv_put

    _internal_kv_put(PRIME_PREFIX + app, json.dumps(primes), overwrite=True,
                     namespace=HOOK_KV_NAMESPACE)


def publish_spill(app: str, wanted: dict[str, int], now: float, ladder: str) -> None:
    """The router's side: rung -> replicas it needs for its sustained spill, of ``app``
    (whose ladder is ``ladder``)."""
    from ray.experimental.internal_kv import _internal_kv_put

    _internal_kv_put(SPILL_PREFIX + app, json.dumps({"time": now, "ladder": ladder,
                                                     "rungs": wanted}),
                     overwrite=True, namespace=HOOK_KV_NAMESPACE)


class StandbyPolicy:
    """Serve's queue-length policy, floored at ``standby`` replicas and steered by the hook.

    Rung deployments are deployed with ``min_replicas=0`` and ``initial_replicas=0`` so
    that ``serve.run`` returns even when a rung cannot be placed (its app is RUNNING at
    once); this policy then asks for the standby replicas, which Serve places when it
    can. Traffic above the floor scales the rung as Serve always does.

    Where an autoscaler hook runs for ``ladder`` (``ray_ladder.autoscale``), the floor
    follows the rung's published role, re-read from Ray's KV at most once a second:

    * ``released`` or ``draining``, or status ``stocked_out``: floor 0, and the last
      replica goes as soon as no request is left for the rung. A standby replica would
      keep a released node busy (Ray's idle timeout could never return it), and a
      pending one on a stocked-out rung is demand the autoscaler retries undamped.
    * ``warming``: at least 1, so the better rung is warm before traffic moves to it.
      So does a rung the ladder's router *primed* in the last ``PRIME_HOLD_S``
      (:func:`publish_primes`: a preemption notice above it, or a climb onto it).
    * otherwise (or no hook, or a stopped or stale one): ``standby``.

    Requests that spill past a full rung under a latency target never reach its queue,
    so Serve's policy cannot see them: the router publishes the replicas a rung needs
    for its sustained spill (:func:`publish_spill`), and the floor rises to them (up to
    the deployment's ``max_replicas``, and a team's grant); replicas Ray cannot place
    are demand Ray's autoscaler sees.

    Serve applies ``downscale_delay_s`` to every policy's decision; for 1 -> 0 this
    policy applies it itself (rung deployments set ``downscale_to_zero_delay_s=0``), so
    that the hook can cut it short. Without a hook the timing is Serve's.

    Where the app is bound to a fleet ``team`` (docs/teams.md), the replicas of a shared
    rung are capped at the units the arbiter grants the team and does not reclaim (its
    published entry, re-read at most once a second): a reclaimed unit's replica goes
    once the router has moved its traffic (it treats the rung as going away), so the
    unit is free for its owner. Without an entry (no arbiter) there is no cap.

    Args:
        standby: Replicas kept warm.
        ladder: The ladder's name (the hook's KV key); ``None`` ignores any hook.
        rung: This deployment's rung.
        team: The fleet team the app is bound to (``None``: no fleet).

    Example:
        >>> AutoscalingPolicy(policy_function="ray_ladder.serve.scaling:StandbyPolicy",
        ...                   policy_kwargs={"standby": 1, "ladder": "llm",
        ...                                  "rung": "h100"})  # doctest: +SKIP
    """

    def __init__(self, standby: int = 0, ladder: str | None = None,
                 rung: str | None = None, team: str | None = None) -> None:
        self.standby = int(standby)
        self.ladder = ladder
        self.rung = rung
        self.team = team
        self._grants: dict[str, Any] | None = None
        self._grants_at: float | None = None
        self._roles: dict[str, Any] | None = None
        self._read_at: float | None = None
        self._idle_since: float | None = None
        self._primes: dict[str, Any] | None = None
        self._primes_at: float | None = None
        self._spill: dict[str, Any] | None = None
        self._spill_at: float | None = None

    def spill_floor(self, now: float, app: str | None) -> int:
        """Replicas this rung of ``app`` needs for its sustained spill (0: none, or the
        router's entry is stale)."""
        if app is None or self.rung is None:
            return 0
        if self._spill_at is None or not 0 <= now - self._spill_at < HOOK_READ_EVERY_S:
            self._spill_at = now
            self._spill = self._read_kv(SPILL_PREFIX + app)
        entry = self._spill or {}
        at, wanted = entry.get("time"), (entry.get("rungs") or {}).get(self.rung)
        if not isinstance(at, (int, float)) or not isinstance(wanted, int) \
                or not -5.0 <= now - at < SPILL_FRESH_S:
            return 0
        return wanted

    def primed(self, now: float, app: str | None, cold: bool) -> bool:
        """Whether the router primed this rung of ``app`` in the last ``PRIME_HOLD_S``."""
        if app is None or self.rung is None:
            return False
        every = PRIME_READ_EVERY_S if cold else HOOK_READ_EVERY_S
        if self._primes_at is None or not 0 <= now - self._primes_at < every:
            self._primes_at = now
            self._primes = self._read_kv(PRIME_PREFIX + app)
        at = (self._primes or {}).get(self.rung)
        return isinstance(at, (int, float)) and -5.0 <= now - at < PRIME_HOLD_S

    def grant(self, now: float, app: str | None = None) -> tuple[int, int] | None:
        """``(held, noticed)``: units of this rung the arbiter grants the team's part
        ``app`` (its share in the team ledger, ``core/ledger.py``; the whole team's without
        ``app``), and how many of them are under a reclaim notice; ``None`` (no team, no
        arbiter entry, or not a shared rung: no cap)."""
        if self.team is None or self.rung is None:
            return None
        if self._grants_at is None or not 0 <= now - self._grants_at < HOOK_READ_EVERY_S:
            self._grants_at = now
            self._grants = self._read_kv(GRANTS_PREFIX + self.team)
        entry = part_entry(self._grants, app) or {}
        grant = (entry.get("rungs") or {}).get(self.rung)
        if not isinstance(grant, dict):
            return None
        return int(grant.get("held", 0)), int(grant.get("noticed", 0))

    def granted(self, now: float, app: str | None = None) -> int | None:
        """Units of this rung the arbiter grants the team's part ``app`` and does not
        reclaim, or ``None`` (no team, no arbiter entry, or not a shared rung: no cap)."""
        grant = self.grant(now, app)
        return None if grant is None else max(0, grant[0] - grant[1])

    def _read_roles(self) -> dict[str, Any] | None:
        return self._read_kv(HOOK_ROLES_PREFIX + str(self.ladder))

    def _read_kv(self, key: str) -> dict[str, Any] | None:
        try:
            from ray.experimental.internal_kv import (
                _internal_kv_get,
                _internal_kv_initialized,
            )

            if not _internal_kv_initialized():
                return None
            raw = _internal_kv_get(key, namespace=HOOK_KV_NAMESPACE)
            value = None if raw is None else json.loads(raw)
            return value if isinstance(value, dict) else None
        except Exception:  # no hook state is today's behaviour, never a failed policy
            return None

    def hook_entry(self, now: float) -> dict[str, Any] | None:
        """This rung's ``{"role", "status"}`` from a running hook, or None.

        ``now`` is wall-clock time (the controller's ``ctx.current_time``).
        """
        if self.ladder is None or self.rung is None:
            return None
        if self._read_at is None or not 0 <= now - self._read_at < HOOK_READ_EVERY_S:
            self._read_at = now
            self._roles = self._read_roles()
        roles = self._roles
        if not roles or roles.get("stopped") or roles.get("time") is None:
            return None
        limit = max(HOOK_STALE_STEPS * float(roles.get("interval_s") or 0), HOOK_STALE_MIN_S)
        if now - float(roles["time"]) > limit:
            return None
        entry = (roles.get("rungs") or {}).get(self.rung)
        return entry if isinstance(entry, dict) else None

    def __call__(self, ctx: Any) -> tuple[float, dict[str, Any]]:
        desired, state = replica_queue_length_autoscaling_policy(ctx)
        now = getattr(ctx, "current_time", None)
        entry = self.hook_entry(float(now)) if now is not None else None
        role = entry.get("role") if entry else None
        if entry and (role in _CUT_ROLES or entry.get("status") == "stocked_out"):
            self._idle_since = None
            # Serve's policy keeps a replica that is still pending (none running yet):
            # here only requests for the rung keep it.
            return (desired if ctx.total_num_requests > 0 else 0), state
        grant = self.grant(float(now), getattr(ctx, "app_name", None)) \
            if now is not None else None
        if grant is not None and grant[0] <= 0:
            # No unit held: a reclaim's deadline passed (the router moved at its notice)
            # or none was granted. The replica goes now, whatever Serve's request average
            # over its look-back window says: its owner's replica waits for the unit.
            self._idle_since = None
            return 0, state
        cap = None if grant is None else max(0, grant[0] - grant[1])
        if cap is not None and cap <= 0:
            self._idle_since = None  # every unit noticed: only requests still there keep it
            return (min(desired, 1) if ctx.total_num_requests > 0 else 0), state
        primed = now is not None and self.primed(
            float(now), getattr(ctx, "app_name", None), ctx.current_num_replicas == 0)
        floor = max(self.standby, 1) if role == "warming" or primed else self.standby
        if now is not None:
            floor = max(floor, self.spill_floor(float(now), getattr(ctx, "app_name", None)))
        want = max(desired, floor) if cap is None else min(max(desired, floor), cap)
        if want > 0 or ctx.target_num_replicas < 1 or now is None:
            self._idle_since = None
            return want, state
        # 1 -> 0 with no request left: Serve's downscale_delay_s, held here (see above).
        if self._idle_since is None:
            self._idle_since = float(now)
        if float(now) - self._idle_since < float(ctx.config.downscale_delay_s):
            return 1, state
        return 0, state
