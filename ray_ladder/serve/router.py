"""The ladder router deployment: one rung per request, fall over at once, climb back damped."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.cluster.event_log import show_events_on_stderr
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.exceptions import Attempt, LadderExhaustedError
from ray_ladder.core.placement import standby_replicas
from ray_ladder.core.selector import Selector
from ray_ladder.core.spec import Ladder
from ray_ladder.serve import http, json_route
from ray_ladder.serve.bindings import Bindings
from ray_ladder.serve.cache import AnswerCache, payload_key
from ray_ladder.serve.calls import RungCaller
from ray_ladder.serve.core import RouterState
from ray_ladder.serve.errors import RungFailed
from ray_ladder.serve.hedge import Hedging
from ray_ladder.serve.llm import routes as openai_routes
from ray_ladder.serve.llm.routes import route_of
from ray_ladder.serve.metrics import LadderMetrics
from ray_ladder.serve.result import LadderResult
from ray_ladder.serve.retry import next_rung, running_replicas
from ray_ladder.serve.scaling import publish_primes

logger = logging.getLogger("ray_ladder.serve")


class LadderRouter(Hedging):
    """Ingress deployment of a ladder app: HTTP ``POST /``, ``GET /-/ladder`` and ``predict``.

    For each request it takes the rung the shared :class:`~ray_ladder.Selector` picked
    for the request's constraints and calls that rung's deployment. If the rung fails the
    request (replica or node died, actor unavailable, no replica took it within
    ``assign_timeout_s``), the rung is marked down, the selectors are fed that
    observation at once, and the same request goes to the rung they pick next. Every
    ``probe_interval_s`` a background task reads which rung deployments have RUNNING
    replicas (``serve.status()``) and which rungs an alive node can host
    (:class:`~ray_ladder.CapacityView`); requests never call the GCS.

    Built by :func:`ray_ladder.serve.build_app`; not meant to be bound by hand.

    Example:
        >>> handle = serve.run(build_app("ladder.yaml", {"h100": Big, "cpu": Tiny}))
        ... # doctest: +SKIP
        >>> handle.predict.remote({"prompt": "hi"}).result().rung  # doctest: +SKIP
        'h100'
    """

    async def __init__(  # type: ignore[misc]  # Serve awaits an async constructor
        self,
        ladder_json: str,
        handles: Mapping[str, Any],
        deployments: Mapping[str, str],
        options: Mapping[str, Any],
    ) -> None:
        self.ladder = Ladder.from_json(ladder_json)
        policy = self.ladder.policy
        self._caller = RungCaller(
            handles, assign_timeout_s=float(options["assign_timeout_s"]),
            request_timeout_s=options.get("request_timeout_s"),
            pending_timeout_s=policy.pending_timeout_s)
        self._deployments = dict(deployments)
        #: Compute rungs whose class generates text (the OpenAI routes use only these).
        self.llm_rungs: frozenset[str] = frozenset(options.get("llm_rungs", ()))
        default, routes = options.get("bindings") or (None, {})
        #: Constraints the operator bound to the app and its routes (requests only narrow).
        self.bindings = Bindings(self.ladder, default, routes)
        self._max_body_bytes = int(options["max_body_bytes"])
        cooldown = options.get("down_cooldown_s") or max(1.0, 2 * policy.probe_interval_s)
        self._app_name = options.get("app_name")
        show_events_on_stderr()
        self._metrics = LadderMetrics(self.ladder, enabled=options.get("metrics", True))
        self._state = RouterState(self.ladder, down_cooldown_s=cooldown,
                                  on_event=self._metrics.event)
        cache_rung = next((r for r in self.ladder.rungs if r.kind == "cache"), None)
        self._cache: AnswerCache | None = None
        if cache_rung is not None:
            settings = cache_rung.cache
            self._cache = (AnswerCache(settings.max_entries, settings.ttl_s) if settings
                           else AnswerCache())
        # A rung the hook released is held back once a better one has a running replica.
        self._view = CapacityView(self.ladder, refresh_interval_s=policy.probe_interval_s,
                                  ready=self._state.is_warm)
        self._pinging: set[str] = set()
        self._primed: dict[str, float] = {}  # cold rung -> when the router asked for it
        #: Done at the end of each probe (then replaced): requests waiting for a rung.
        self._probed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._probe_errors = 0
        self._probe_s = 0.0
        self._max_lag_s = 0.0
        try:
            await asyncio.wait_for(self._probe(), timeout=30)
        except Exception:  # start anyway: the loop below keeps probing
            logger.exception("first ladder probe failed")
        self._loop_task = asyncio.get_running_loop().create_task(self._probe_loop())

    def __del__(self) -> None:  # Serve calls this when it stops the replica: stop probing
        task = getattr(self, "_loop_task", None)
        if task is not None:
            task.cancel()

    # --- observations ------------------------------------------------------------------

    def _app(self) -> str:
        if self._app_name is None:
            from ray import serve

            self._app_name = serve.get_replica_context().app_name
        return self._app_name

    async def _probe(self) -> None:
        started = time.monotonic()
        snapshot = await asyncio.to_thread(self._view.refresh)
        # Held rungs stay hostable here: RouterState leaves them out per selector (a
        # constrained request may have no better rung than the released one).
        placeable = {r: ok or r in snapshot.held for r, ok in snapshot.obtainable.items()}
        now = time.time()
        running = None
        if self._state.needs_replica_counts(placeable, now):
            running = await asyncio.to_thread(running_replicas, self._app(), self._deployments)
            now = time.time()
        interval = self.ladder.policy.probe_interval_s
        alive = [r for r in self._deployments if self._caller.alive_within(r, interval)]
        self._probe_s = time.monotonic() - started
        going = snapshot.going_away  # a preemption notice: read from Ray's node table
        held = {r: why for r, why in snapshot.held.items() if r not in going}
        decision = self._state.observe(running, placeable, now, alive, held=held,
                                       going_away=going)
        for rung in self._state.lost:
            logger.warning("rung %s lost: %s", rung, self._state.why_unobtainable(rung, now))
        self._caller.signal_lost(self._state.lost)
        self._metrics.decision(decision)
        self._metrics.observed(self._state, now)  # `ray-ladder status`, gauges, replica-hours
        self._start_pings()
        probed, self._probed = self._probed, asyncio.get_running_loop().create_future()
        probed.set_result(None)

    async def _probe_loop(self) -> None:
        interval = self.ladder.policy.probe_interval_s
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            # Keep the cadence: a slow probe shortens the wait before the next one.
            due = max(due + interval, loop.time())
            await asyncio.sleep(due - loop.time())
            # How late the loop woke up: a blocked event loop delays every request.
            self._max_lag_s = max(self._max_lag_s, loop.time() - due)
            try:
                await self._probe()
            except RuntimeError as err:
                if "shutdown" in str(err):  # the replica is stopping
                    return
                self._probe_errors += 1
                logger.warning("ladder probe failed", exc_info=True)
            except Exception:  # keep the last observation; a later probe may work
                self._probe_errors += 1
                logger.warning("ladder probe failed", exc_info=True)

    async def _ping(self, rung: str, timeout_s: float) -> None:
        """Reach ``rung``: starts a cold replica, keeps a standby's handle warm."""
        try:
            await self._caller.ping(rung, timeout_s)
        except RungFailed as failed:
            if not failed.timeout:  # an error, not silence: the rung is gone
                self._failed(rung, failed.reason)
        except Exception:  # a user __init__ bug shows on real requests; keep probing
            logger.debug("ping of %s failed", rung, exc_info=True)
        finally:
            self._pinging.discard(rung)

    def _start_pings(self) -> None:
        policy = self.ladder.policy
        obtainable = self._state.obtainable(time.time())
        for rung in self._state.to_prime():
            if rung not in self._pinging:
                self._pinging.add(rung)
                self._spawn(self._ping(rung, policy.pending_timeout_s))
                self._primed[rung] = time.time()  # StandbyPolicy starts a replica now
                self._spawn(asyncio.to_thread(publish_primes, self._app(), dict(self._primed)))
        for rung in self._state.on_probation(time.time()):  # prove it answers again
            if rung not in self._pinging:
                self._pinging.add(rung)
                self._spawn(self._ping(rung, max(1.0, 4 * self._caller.assign_timeout_s)))
        idle = self._state.held_everywhere(time.time())  # pings would keep them busy
        for rung, ok in obtainable.items():
            # Only rungs kept warm: a cold rung's replica goes once unused, and a ping to
            # one the counts still show (they lag) would start a new one.
            if (ok and rung not in idle and self._state.is_warm(rung)
                    and standby_replicas(self.ladder, self.ladder.rung(rung)) > 0
                    and rung not in self._pinging
                    and not self._caller.alive_within(rung, policy.probe_interval_s)):
                self._pinging.add(rung)
                self._spawn(self._ping(rung, max(1.0, 4 * self._caller.assign_timeout_s)))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _failed(self, rung: str, reason: str) -> None:
        self._metrics.attempt_failed(rung, reason)
        now = time.time()
        if self._state.is_down(rung, now):
            return  # another request already reported it; the selectors moved then
        decision = self._state.mark_down(rung, reason, now)
        self._caller.signal_lost(self._state.lost)
        self._metrics.decision(decision)
        logger.warning("rung %s failed a request (%s); marked down", rung, reason)

    async def answer(self, payload: Any, constraints: Constraints | None) -> LadderResult:
        """Answer ``payload`` from the best rung that can; raise when none can.

        When a rung fails the request, it goes to the rung :func:`next_rung` names. When
        only the shed rung or nothing is left but a compute rung of the request can come
        back without new capacity (its node is alive; its replica restarts or its cooldown
        runs), the request waits for it, up to ``pending_timeout_s`` (as Serve queues a
        request for a replica), before it is shed or the ladder answers "exhausted".
        """
        selector = self._state.selector(constraints, time.time())
        key = payload_key(payload) if self._cache is not None else None
        attempts: list[Attempt] = []
        tried: set[str] = set()
        give_up_at = asyncio.get_running_loop().time() + self.ladder.policy.pending_timeout_s
        while True:
            name = next_rung(self._state, selector, tried)
            if name is None or self.ladder.rung(name).kind == "shed":
                if await self.wait_for_rung(selector, give_up_at):
                    tried.clear()  # what failed before may be back: ask again
                    continue
                if name is None:
                    break
            tried.add(name)
            rung = self.ladder.rung(name)
            if rung.kind == "compute":
                try:
                    value, by = await self._race(name, payload, selector, attempts, tried)
                except RungFailed:  # every rung raced failed and is marked down
                    self._metrics.resent(name)
                    continue
                if self._cache is not None:
                    self._cache.put(key, constraints, value, self.ladder.rung(by), time.time())
                self._metrics.request(by)
                return LadderResult(value, by, False, self._state.degraded_s(constraints))
            if rung.kind == "cache":
                hit = self._cache.get(key, constraints, time.time()) if self._cache else None
                if hit is not None:
                    self._metrics.request(name)
                    return LadderResult(hit.value, name, True,
                                        self._state.degraded_s(constraints), hit.producer.name)
                # A miss is per request, not a ladder move: go on to the rung below.
                attempts.append(Attempt(name, "no fresh cached answer for this request",
                                        time.time()))
                continue
            attempts.append(Attempt(name, "shed: no capacity for this request, try later",
                                    time.time()))
            break
        if not attempts:
            attempts.append(Attempt(None, "no eligible rung is obtainable", time.time()))
        self._metrics.request(self.shed_rung(attempts) or http.EXHAUSTED)
        raise LadderExhaustedError(self.ladder.name, attempts, self.ladder.policy.retry_after_s)

    async def wait_for_rung(self, selector: Selector, give_up_at: float) -> bool:
        """Wait for the next probe when ``selector`` has nothing to try now but a rung
        that can come back (:meth:`RouterState.can_come_back`); ``False`` (at once) when
        none can or ``give_up_at`` (event-loop time) has passed."""
        loop = asyncio.get_running_loop()
        left = give_up_at - loop.time()
        if left <= 0 or not self._state.can_come_back(selector):
            return False
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._probed), timeout=left)
        return True

    async def predict(self, payload: Any, jurisdiction: str | None = None,
                      max_cost_per_hour: float | None = None, min_quality: float | None = None,
                      sites: list[str] | tuple[str, ...] | None = None) -> LadderResult:
        """Handle interface: answer ``payload`` under keyword constraints.

        Raises:
            InvalidConstraintsError: a malformed or unknown constraint value
                (``ConstraintNotAllowedError``: more than the app's binding allows).
            LadderExhaustedError: shed, or every eligible rung is gone.
        """
        constraints = http.make_constraints(
            self.ladder, jurisdiction=jurisdiction, max_cost_per_hour=max_cost_per_hour,
            min_quality=min_quality, sites=sites)
        return await self.answer(payload, self.bindings.narrow(constraints))

    def state(self) -> dict[str, Any]:
        """The ladder's state (what ``GET /-/ladder`` returns)."""
        out = self._state.snapshot(time.time())
        out["metrics"] = self._metrics.snapshot()
        out["cache_entries"] = len(self._cache) if self._cache is not None else None
        out["probe_errors"] = self._probe_errors
        out["last_probe_s"] = round(self._probe_s, 4)
        out["max_loop_lag_s"] = round(self._max_lag_s, 4)  # since the last state read
        self._max_lag_s = 0.0
        return out

    # --- the parts the HTTP routes use (serve/json_route.py, serve/llm/) ---------------

    @property
    def router_state(self) -> RouterState:
        """The selectors and what they observe."""
        return self._state

    @property
    def caller(self) -> RungCaller:
        """Calls to the rung deployments."""
        return self._caller

    @property
    def cache(self) -> AnswerCache | None:
        """The cache rung's answers (``None`` without a cache rung)."""
        return self._cache

    def rung_failed(self, rung: str, reason: str) -> None:
        """A request saw ``rung`` fail: mark it down, move the selectors at once."""
        self._failed(rung, reason)

    def count_answer(self, rung: str) -> None:
        """Count one answer of ``rung`` in the ladder's metrics."""
        self._metrics.request(rung)

    def shed_rung(self, attempts: list[Attempt]) -> str | None:
        """The shed rung's name when it gave the answer, else ``None`` (exhausted)."""
        last = attempts[-1].rung if attempts else None
        shed = last is not None and last in self.ladder.names \
            and self.ladder.rung(last).kind == "shed"
        return last if shed else None

    async def __call__(self, request: Any) -> Any:
        """HTTP: ``/v1/...`` OpenAI-compatible routes, ``GET /-/ladder``, ``POST /``."""
        if route_of(request.url.path) is not None:
            return await openai_routes.handle(self, request, self._max_body_bytes)
        return await json_route.handle(self, request, self._max_body_bytes)
