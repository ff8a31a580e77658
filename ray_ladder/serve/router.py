"""The ladder router deployment: one rung per request, fall over at once, climb back damped."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any

from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.cluster.event_log import show_events_on_stderr
from ray_ladder.cluster.fleet_teams import check_bound_team
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.latency import LatencyTargets
from ray_ladder.core.spec import Ladder
from ray_ladder.serve import forward as forwarding
from ray_ladder.serve import http, json_route
from ray_ladder.serve import targets as target_rules
from ray_ladder.serve.bindings import Bindings, relative_path
from ray_ladder.serve.cache import AnswerCache
from ray_ladder.serve.calls import RungCaller
from ray_ladder.serve.health import MAX_COOLDOWN_S
from ray_ladder.serve.llm import routes as openai_routes
from ray_ladder.serve.llm.routes import route_of
from ray_ladder.serve.load import LoadBook
from ray_ladder.serve.metrics import LadderMetrics
from ray_ladder.serve.probe import Prober
from ray_ladder.serve.result import LadderResult
from ray_ladder.serve.state import RouterState
from ray_ladder.serve.walker import Walker

logger = logging.getLogger("ray_ladder.serve")


class LadderRouter:
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
        #: The router's wall clock (the one seam for time in the request walk).
        self._clock: Callable[[], float] = time.time
        policy = self.ladder.policy
        #: Path prefix -> latency targets (``serve/targets.py``); requests only narrow them.
        self.targets: dict[str, LatencyTargets] = options.get("targets") or {}
        base = self.targets.get("") or LatencyTargets()
        book = LoadBook(dict(options.get("slots") or {n: 5 for n in handles}),
                        answer_s=base.answer_s, ttft_s=base.ttft_s,
                        slow_after_s=base.slow_after_s,
                        on_slow=lambda *slow: self.walker.mark_slow(*slow))
        self._caller = RungCaller(
            handles, assign_timeout_s=float(options["assign_timeout_s"]),
            request_timeout_s=options.get("request_timeout_s"),
            pending_timeout_s=policy.pending_timeout_s, book=book, clock=self._clock)
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
                                  on_event=self._metrics.event,
                                  max_cooldown_s=options.get("max_cooldown_s") or MAX_COOLDOWN_S)
        cache_rung = next((r for r in self.ladder.rungs if r.kind == "cache"), None)
        self._cache: AnswerCache | None = None
        if cache_rung is not None:
            settings = cache_rung.cache
            self._cache = (AnswerCache(settings.max_entries, settings.ttl_s) if settings
                           else AnswerCache())
        # A rung the hook released is held back once a better one has a running replica.
        #: The fleet team the operator bound the app to (docs/teams.md); None: no fleet.
        # checked in build_app when it ran connected to Ray; else here, before any demand
        self.team: str | None = check_bound_team(options.get("team"))
        view = CapacityView(self.ladder, refresh_interval_s=policy.probe_interval_s,
                            ready=self._state.is_warm, team=self.team,
                            part=self._app() if self.team else None,
                            constraints=self.bindings.default)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._prober: Prober
        #: The request walk both routes drive (serve/walker.py over serve/walk.py).
        self.walker = Walker(self._state, self._caller, self._metrics, cache=self._cache,
                             probed=lambda: self._prober.probed, spawn=self._spawn,
                             clock=self._clock, llm_rungs=self.llm_rungs,
                             budget=lambda: view.last.budget if view.last else None,
                             book=book)
        self._prober = Prober(self._state, self._caller, view, self._metrics,
                              deployments, app=self._app, failed=self.walker.mark_failed,
                              spawn=self._spawn, clock=self._clock, team=self.team)
        try:
            await asyncio.wait_for(self._prober.probe(), timeout=30)
        except Exception:  # start anyway: the loop below keeps probing
            logger.exception("first ladder probe failed")
        self._loop_task = asyncio.get_running_loop().create_task(self._prober.loop())

    def __del__(self) -> None:
        """Serve calls this when it stops the replica (the app deleted or redeployed): stop
        probing, and take back the app's demand for its team's units (``Prober.close``)."""
        task = getattr(self, "_loop_task", None)
        if task is not None:
            task.cancel()
        prober = getattr(self, "_prober", None)
        if prober is not None:
            try:
                prober.close()
            except Exception:  # the GCS may be gone at shutdown: the entry then goes stale
                logger.debug("could not withdraw the app's demand", exc_info=True)

    def _app(self) -> str:
        if self._app_name is None:
            from ray import serve

            self._app_name = serve.get_replica_context().app_name
        return self._app_name

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def answer(self, payload: Any, constraints: Constraints | None,
                     targets: LatencyTargets | None = None) -> LadderResult:
        """Answer ``payload`` from the best rung that can (:meth:`Walker.answer`).

        Raises:
            LadderExhaustedError: shed, or every eligible rung is gone (every attempt).
        """
        return await self.walker.answer(payload, constraints, targets)

    def targets_for(self, request: Any) -> LatencyTargets:
        """The latency targets of an HTTP request: its route's, narrowed by its headers.

        Raises:
            http.HttpError: 400 for a malformed target header.
        """
        base = target_rules.for_path(self.targets, relative_path(request))
        return target_rules.request_targets(base, request.headers)

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
        return await self.walker.answer(payload, self.bindings.narrow(constraints),
                                        self.targets.get(""))

    def state(self) -> dict[str, Any]:
        """The ladder's state (what ``GET /-/ladder`` returns)."""
        out = self._state.snapshot(self._clock())
        out["metrics"] = self._metrics.snapshot()
        out["cache_entries"] = len(self._cache) if self._cache is not None else None
        out["probe_errors"] = self._prober.errors
        out["spill_wants_replicas"] = self._prober.spill_wanted
        book = self._caller.book  # each rung's load as the router's estimates see it
        places = self._caller.places  # and the router's own queue for each rung's places
        out["load"] = {} if book is None else {
            rung: {**book.snapshot(rung, self._clock()), **places.snapshot(rung)}
            for rung in book.rungs}
        out["last_probe_s"] = round(self._prober.last_s, 4)
        out["max_loop_lag_s"] = round(self._prober.max_lag_s, 4)  # since the last read
        self._prober.max_lag_s = 0.0
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

    async def __call__(self, request: Any) -> Any:
        """HTTP: ``/v1/...`` OpenAI-compatible routes, ``GET /-/ladder``, ``POST /``."""
        if route_of(request.url.path) is not None:
            return await openai_routes.handle(self, request, self._max_body_bytes)
        return await json_route.handle(self, request, self._max_body_bytes)

    async def forward(self, message: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """A request a shared endpoint's front authenticated (serve/shared.py), answered
        as :meth:`__call__` answers HTTP, in parts (a stream stays a stream)."""
        async for part in forwarding.answer_parts(self.__call__, message):
            yield part
