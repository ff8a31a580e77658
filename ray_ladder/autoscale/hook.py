"""The autoscaler hook actor: one per ladder, named, detached and restartable."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from ray_ladder.autoscale import sources
from ray_ladder.autoscale.plan import MAX_EVENTS, AutoscaleOptions, AutoscalePlanner
from ray_ladder.autoscale.teams import TeamGrants
from ray_ladder.cluster.capacity import resolve_node_source
from ray_ladder.cluster.grants import GrantReader
from ray_ladder.cluster.hook_board import hook_step
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.spec import Ladder, as_ladder

logger = logging.getLogger(__name__)

HOOK_NAMESPACE = "ray_ladder"
#: Re-send an unchanged request this often (a restarted GCS or a peer's call may drop it).
RESEND_S = 30.0


def hook_name(ladder: str) -> str:
    """The Ray actor name of ``ladder``'s hook.

    Example:
        >>> hook_name("gpu")
        'ladder-autoscale-gpu'
    """
    return f"ladder-autoscale-{ladder}"


class AutoscaleHook:
    """Steers Ray's autoscaler down a ladder on stock-outs and back up when capacity returns.

    Run it as a Ray actor with :func:`start_hook` (one per ladder, on the head node). Every
    ``interval_s`` it reads the alive nodes and the autoscaler's failed launches, lets the
    :class:`~ray_ladder.autoscale.plan.AutoscalePlanner` decide, and hands the resulting
    node request to ``ray.autoscaler.sdk.request_resources``. Its state is published in
    Ray's KV (read by ``ray-ladder autoscale status`` and by a restarted hook).

    The Serve ladder's rung policy and every ``CapacityView`` (Serve router,
    ``@ladder_task``, Tune) follow the small roles entry it also publishes each step
    (:mod:`ray_ladder.cluster.roles`); other consumers can use :meth:`wait_for_change`
    (long poll) or :meth:`subscribe` (the hook calls ``handle.<method>.remote(state)`` on
    each change). Per rung, ``role`` says what to do:
    ``serving`` (send work), ``warming`` (a better rung's node joined: start replicas;
    traffic moves after the hysteresis), ``draining`` (traffic moved up: finish in-flight
    work, scale down), ``released`` (its node request is gone; Ray's idle timeout returns
    the node once nothing runs there).

    With ``team`` (the fleet team whose work the ladder runs, bound by the operator), each
    step also reads the team's grants (:mod:`ray_ladder.cluster.grants`): a shared on-prem
    rung serves only on units granted to the team, and a cloud rung is asked for only
    while the team can get no on-prem shared rung of the ladder
    (:mod:`ray_ladder.autoscale.teams`). Without a fleet (no grants entry) it is ignored.

    Example:
        >>> hook = start_hook(load_ladder("gpu.yaml"), {"retry_initial_s": 60})  # doctest: +SKIP
        >>> ray.get(hook.state.remote())["serving"]  # doctest: +SKIP
        'a100'
    """

    def __init__(self, ladder: Mapping[str, Any], options: Mapping[str, Any] | None = None,
                 constraints: Mapping[str, Any] | None = None, team: str | None = None
                 ) -> None:
        self.ladder = Ladder.from_dict(dict(ladder))
        self.team = team
        self._grants = GrantReader() if team is not None else None
        self.options = AutoscaleOptions.model_validate(dict(options or {}))
        self.constraints = Constraints.model_validate(dict(constraints)) if constraints else None
        self.planner = AutoscalePlanner(self.ladder, self.options, self.constraints)
        saved = sources.load_state(self.ladder.name) or {}
        if saved.get("planner") and not saved.get("stopped"):
            self.planner.restore(saved["planner"])
        self.restarts = int(saved.get("restarts", -1)) + 1 if not saved.get("stopped") else 0
        self.interval_s = self.options.interval_s or self.ladder.policy.probe_interval_s
        self._nodes = resolve_node_source(None, "AutoscaleHook", max_age_s=self.interval_s)
        self.version = int(saved.get("version", 0))
        self.events: list[dict[str, Any]] = list(saved.get("events", []))[-MAX_EVENTS:]
        self._fingerprint: Any = None
        self._sent: Any = None
        self._sent_at = 0.0
        self._state: dict[str, Any] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._subscribers: dict[str, tuple[Any, str]] = {}
        self._pending: dict[str, Any] = {}
        self._sub_lock = threading.Lock()
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._loop, name="ladder-autoscale", daemon=True)
        self._thread.start()

    # --- loop ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.step()
                self.last_error = None
            except Exception as err:  # keep steering; the CLI shows the error
                self.last_error = f"{type(err).__name__}: {err}"
                logger.exception("autoscale hook step failed")
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def step(self) -> dict[str, Any]:
        """One observation and request (the loop calls it every ``interval_s``)."""
        now = time.time()  # wall clock: the autoscaler's records use it
        present, on_head = sources.present_placements(self.ladder, self._nodes)
        plan = self.planner.step(present, sources.read_launch_failures(), now, on_head=on_head,
                                 team=self._team_grants(),
                                 spill=sources.read_spill(self.ladder.name, now))
        request = (plan.bundles, plan.label_selectors)
        if request != self._sent or now - self._sent_at >= RESEND_S:
            sources.submit_request(self.ladder.name, plan.bundles, plan.label_selectors, now)
            self._sent, self._sent_at = request, now
        self.events = (self.events + plan.events)[-MAX_EVENTS:]
        state = self.planner.state()
        fingerprint = (state["serving"], state["target"],
                       [(r["status"], r["role"], r["target_bundles"], r["failures"])
                        for r in state["rungs"].values()])
        changed = fingerprint != self._fingerprint
        if changed:
            self.version += 1
            self._fingerprint = fingerprint
        state.update(version=self.version, time=now, interval_s=self.interval_s,
                     restarts=self.restarts, request=plan.bundles, events=self.events,
                     options=self.options.model_dump(), last_error=self.last_error,
                     planner=self.planner.dump(), stopped=False)
        with self._cond:
            self._state = state
            self._cond.notify_all()
        sources.save_state(self.ladder.name, state)
        sources.save_roles(self.ladder.name, state)
        hook_step(self.ladder, plan.events, state)  # event store, role and rung metrics
        if changed:
            self._notify(state)
        return state

    def _team_grants(self) -> TeamGrants | None:
        """The team's grants now (the last entry read while the arbiter is down; ``None``
        without a team or a fleet)."""
        if self.team is None or self._grants is None:
            return None
        entry = self._grants.get(self.team)
        return TeamGrants.from_entry(entry) if entry is not None else None

    # --- consumers -----------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The latest state: ``serving``, ``target``, ``version`` and per-rung ``rungs``."""
        with self._cond:
            return dict(self._state)

    def wait_for_change(self, version: int, timeout_s: float = 30.0) -> dict[str, Any]:
        """Return the state once its ``version`` differs from ``version`` (or at timeout)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._state.get("version") == version or not self._state:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    break
                self._cond.wait(left)
            return dict(self._state)

    def subscribe(self, handle: Any, method: str = "on_autoscale", key: str | None = None
                  ) -> dict[str, Any]:
        """Call ``handle.<method>.remote(state)`` on each change; returns the state now."""
        key = key or str(getattr(handle, "_actor_id", id(handle)))
        state = self.state()
        with self._sub_lock:
            self._subscribers[key] = (handle, method)
            if state:
                self._call(key, handle, method, state)
        return state

    def unsubscribe(self, key: str) -> bool:
        """Stop notifying ``key``; returns whether it was subscribed."""
        self._pending.pop(key, None)
        return self._subscribers.pop(key, None) is not None

    def _notify(self, state: dict[str, Any]) -> None:
        with self._sub_lock:
            for key, (handle, method) in list(self._subscribers.items()):
                self._call(key, handle, method, state)

    def _call(self, key: str, handle: Any, method: str, state: dict[str, Any]) -> None:
        import ray

        previous = self._pending.get(key)
        if previous is not None:
            ready, _ = ray.wait([previous], timeout=0)
            if ready:
                try:
                    ray.get(ready[0])
                except ray.exceptions.RayActorError:  # subscriber gone: forget it
                    self._pending.pop(key, None)
                    self._subscribers.pop(key, None)
                    return
                except Exception:  # its handler failed: keep notifying
                    logger.warning("subscriber %s failed on a change", key, exc_info=True)
        try:
            self._pending[key] = getattr(handle, method).remote(state)
        except Exception:
            logger.warning("cannot notify subscriber %s", key, exc_info=True)

    def stop(self) -> None:
        """Stop steering and withdraw this ladder's node request."""
        self._stop.set()
        self._thread.join(timeout=10)
        sources.withdraw_request(self.ladder.name)
        with self._cond:
            self._state = {**self._state, "stopped": True}
            self._cond.notify_all()
        sources.save_state(self.ladder.name, self._state)
        sources.save_roles(self.ladder.name, self._state)  # consumers stop following


def start_hook(ladder: Ladder | str, options: AutoscaleOptions | Mapping[str, Any] | None = None,
               constraints: Constraints | None = None, *, detached: bool = True,
               namespace: str = HOOK_NAMESPACE, team: str | None = None) -> Any:
    """Start (or find) the hook actor of ``ladder`` on the head node; returns its handle.

    The actor is named ``ladder-autoscale-<ladder>`` in namespace ``ray_ladder``, detached
    (it outlives the driver), restarted by Ray if it dies (it resumes from the state it
    published), and takes no CPU. An existing hook is returned as it is.

    ``team`` binds the ladder to a fleet team (the operator's binding, as for Serve's
    ``build_app(team=)``): the hook buys the fleet's cloud rungs for it only while it can
    get no on-prem shared rung of the ladder by quota or borrowing (docs/teams.md).

    Example:
        >>> hook = start_hook("examples/ladders/gpu-serving.yaml")  # doctest: +SKIP
    """
    import ray

    lad = as_ladder(ladder)
    opts = options if isinstance(options, AutoscaleOptions) else \
        AutoscaleOptions.model_validate(dict(options or {}))
    actor = ray.remote(AutoscaleHook).options(  # type: ignore[attr-defined]
        name=hook_name(lad.name), namespace=namespace, get_if_exists=True,
        lifetime="detached" if detached else None, max_restarts=-1, max_task_retries=-1,
        num_cpus=0, max_concurrency=64,
        # The head never leaves the cluster (the autoscaler does not remove it).
        resources={"node:__internal_head__": 0.001},
    )
    return actor.remote(lad.model_dump(mode="json"), opts.model_dump(mode="json"),
                        constraints.model_dump(mode="json") if constraints else None, team)


def get_hook(ladder: str, namespace: str = HOOK_NAMESPACE) -> Any:
    """The running hook actor of ladder ``ladder`` (``ValueError`` when there is none)."""
    import ray

    return ray.get_actor(hook_name(ladder), namespace=namespace)


def stop_hook(ladder: str, namespace: str = HOOK_NAMESPACE, timeout_s: float = 30.0) -> bool:
    """Stop ``ladder``'s hook, withdraw its request and kill the actor; False if none ran."""
    import ray

    try:
        handle = get_hook(ladder, namespace)
    except ValueError:
        return False
    try:
        ray.get(handle.stop.remote(), timeout=timeout_s)
    finally:
        ray.kill(handle, no_restart=True)
    return True


class HookWatcher:
    """Calls ``on_change(state)`` in a daemon thread each time a ladder's hook state changes.

    The plug for consumers that are not actors (a Serve router's replica, a driver, a task
    pool): it long-polls :meth:`AutoscaleHook.wait_for_change`, so a change arrives within
    one hook step. Per rung, ``state["rungs"][name]["role"]`` says what to do (see
    :class:`AutoscaleHook`). An exception in ``on_change`` is logged and watching goes on.

    Example:
        >>> w = HookWatcher("llm", lambda s: print(s["serving"])).start()  # doctest: +SKIP
        >>> w.stop()  # doctest: +SKIP
    """

    def __init__(self, ladder: str, on_change: Any, *, namespace: str = HOOK_NAMESPACE,
                 poll_timeout_s: float = 10.0) -> None:
        self.ladder, self.on_change = ladder, on_change
        self.namespace, self.poll_timeout_s = namespace, poll_timeout_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ladder-hook-watch",
                                        daemon=True)

    def start(self) -> HookWatcher:
        """Start watching (returns self)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (returns within one poll)."""
        self._stop.set()
        self._thread.join(timeout=self.poll_timeout_s + 5)

    def _run(self) -> None:
        import ray

        version = None
        while not self._stop.is_set():
            try:
                hook = get_hook(self.ladder, self.namespace)
                state = ray.get(hook.wait_for_change.remote(version, self.poll_timeout_s))
            except SystemExit:  # ray.shutdown() in this process: nothing left to watch
                return
            except Exception:  # hook restarting or not started yet: try again shortly
                self._stop.wait(1.0)
                continue
            if state and state.get("version") != version:
                version = state.get("version")
                try:
                    self.on_change(state)
                except Exception:
                    logger.exception("hook watcher callback failed")


def hook_state(ladder: str | None = None) -> dict[str, dict[str, Any]]:
    """Published hook states by ladder name (all ladders when ``ladder`` is None)."""
    from ray_ladder.cluster import ray_private

    if ladder is not None:
        state = sources.load_state(ladder)
        return {ladder: state} if state else {}
    out = {}
    for key in ray_private.kv_list(sources.STATE_PREFIX, namespace=sources.KV_NAMESPACE):
        name = (key.decode() if isinstance(key, bytes) else key)[len(sources.STATE_PREFIX):]
        state = sources.load_state(name)
        if state:
            out[name] = state
    return out
