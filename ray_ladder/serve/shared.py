"""A serving endpoint shared by several teams: the caller's API key picks the team, and the
request goes to that team's own ladder app (its grants, demand, replica caps and budget)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ray_ladder.serve import forward, http
from ray_ladder.serve.app import HEAD_NODE_RESOURCE, ROUTER_NAME, build_app
from ray_ladder.serve.bindings import relative_path
from ray_ladder.serve.keys import (
    KeyFileWatch,
    KeyRing,
    env_keys_path,
    not_served,
    unauthorized,
)
from ray_ladder.serve.llm.routes import route_of

logger = logging.getLogger("ray_ladder.serve")
FRONT_NAME = "SharedFront"


def _json(status: int, body: dict[str, Any], headers: Mapping[str, str]) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(body, status, headers=dict(headers))


class SharedFront:
    """Ingress of a shared endpoint: authenticates each request by its ``Authorization:
    Bearer`` key and passes it, key removed, to the router of the key's team.

    No key, or one the keys file does not list: 401 (OpenAI's error object on ``/v1/``,
    ``WWW-Authenticate: Bearer``); a key of a team this endpoint does not serve: 403.
    Streams stream (a streaming DeploymentHandle call). Built by
    :func:`build_shared_app` or :func:`shared_front_builder`; not bound by hand.

    Args:
        teams: Team -> the Serve app of its ladder (``build_app(team=...)``).
        keys: A :class:`KeyRing`, the keys file's path (re-read when it changes), or
            ``None``: the path in ``$RAY_LADDER_KEYS_FILE`` where the replica runs.
        router: The router deployment's name in each team's app.
    """

    def __init__(self, teams: Mapping[str, str], keys: KeyRing | str | None = None,
                 router: str = ROUTER_NAME) -> None:
        from ray import serve

        self._ring: KeyRing | None = None
        self._watch: KeyFileWatch | None = None
        if isinstance(keys, KeyRing):
            self._ring = keys
        else:
            self._watch = KeyFileWatch(keys if keys is not None else env_keys_path())
        ring = self.ring
        for team in sorted(set(teams) - ring.teams):
            logger.warning("team %s has no key in the keys file: nobody reaches its ladder",
                           team)
        self._handles = {team: serve.get_deployment_handle(router, app_name=app)
                         .options(stream=True) for team, app in teams.items()}

    @property
    def ring(self) -> KeyRing:
        """The keys in use."""
        if self._watch is not None:
            return self._watch.ring
        assert self._ring is not None
        return self._ring

    async def __call__(self, request: Any) -> Any:
        """Check the key, then answer from the key's team's ladder."""
        path = relative_path(request)
        openai_route = route_of(path) is not None
        check = self.ring.check(request.headers.get("authorization"))
        if check.team is None:
            return _json(*unauthorized(check.cause, openai_route))
        handle = self._handles.get(check.team)
        if handle is None:
            return _json(*not_served(check.team, openai_route))
        body = await request.body()  # its size is checked by the team's router (413)
        parts: Any = handle.forward.remote(forward.message_of(request, path, body))
        try:
            return await forward.response_of(parts)
        except Exception:
            logger.exception("the ladder app of team %s did not answer", check.team)
            message = f"the ladder of team {check.team!r} is not available; try later"
            body_ = ({"error": {"message": message, "type": "ladder_exhausted",
                                "param": None, "code": "exhausted"}} if openai_route
                     else {"error": message})
            return _json(503, body_, http.failed_headers(1.0))


def _front(teams: Mapping[str, str], keys: KeyRing | str | Path | None, router: str,
           options: Mapping[str, Any] | None) -> Any:
    from ray import serve

    settings: dict[str, Any] = {
        "name": FRONT_NAME, "num_replicas": 1, "max_ongoing_requests": 1000,
        "ray_actor_options": {"num_cpus": 0, "resources": {HEAD_NODE_RESOURCE: 0.001}},
        **dict(options or {})}
    given = str(keys) if isinstance(keys, Path) else keys
    return serve.deployment(**settings)(SharedFront).bind(dict(teams), given, router)


@dataclass
class SharedApp:
    """The Serve applications of a shared endpoint: one ladder app per team (reached only
    through the front: no route prefix) and the front. ``run()`` deploys them all.

    Attributes:
        name: The front's Serve app name; each team's app is ``<name>-<team>``.
        front: The front application.
        teams: Team -> ``(its app name, its application)``.
    """

    name: str
    front: Any
    teams: dict[str, tuple[str, Any]] = field(default_factory=dict)

    def run(self, route_prefix: str = "/") -> Any:
        """Deploy the teams' apps (not on HTTP) and the front at ``route_prefix`` in one
        go (``serve.run_many``: they start side by side); returns the front's handle."""
        from ray import serve

        targets = [serve.RunTarget(app, name=app_name, route_prefix=None)
                   for app_name, app in self.teams.values()]
        targets.append(serve.RunTarget(self.front, name=self.name, route_prefix=route_prefix))
        return serve.run_many(targets)[-1]


def build_shared_app(ladder: Any, rungs: Mapping[str, Any], *,
                     teams: Sequence[str] | Mapping[str, Mapping[str, Any]],
                     keys: KeyRing | str | Path | None = None, name: str = "shared",
                     front_options: Mapping[str, Any] | None = None,
                     **app_options: Any) -> SharedApp:
    """One endpoint for several teams: ``build_shared_app(...).run(route_prefix="/llm")``.

    Each team gets the ladder app ``build_app(ladder, rungs, team=team, **app_options)``
    (its own router, rung deployments, demand and replica caps), and the front sends
    each request there by its key's team (``docs/teams.md``, "Shared endpoints").

    Args:
        ladder: The ladder (or its file's path), as for :func:`build_app`.
        rungs: Compute rung name -> class, as for :func:`build_app`.
        teams: The teams served; a mapping gives each one extra :func:`build_app`
            keywords over ``app_options`` (e.g. ``{"eu-team": {"constraints":
            {"jurisdiction": "eu"}}}``).
        keys: The keys file's path (read where the front runs, re-read when it changes),
            a :class:`KeyRing`, or ``None`` for ``$RAY_LADDER_KEYS_FILE`` there.
        name: The front's Serve app name (the teams' apps are ``<name>-<team>``).
        front_options: Extra Serve options of the front deployment.
        **app_options: :func:`build_app` keywords shared by every team's app.

    Raises:
        ValueError: no team, or ``team``/``name`` in ``app_options``.

    Example:
        >>> shared = build_shared_app("ladder.yaml", {"h100": Big, "cpu": Tiny},
        ...                           teams=["research", "product"],
        ...                           keys="/etc/ray-ladder/keys.yaml")  # doctest: +SKIP
        >>> shared.run(route_prefix="/")  # doctest: +SKIP
    """
    per_team = dict(teams) if isinstance(teams, Mapping) else {t: {} for t in teams}
    if not per_team:
        raise ValueError("teams: name at least one team")
    clash = {"team", "name"} & (set(app_options) | {k for o in per_team.values() for k in o})
    if clash:
        raise ValueError(f"{sorted(clash)}: set by build_shared_app (team: from the key; "
                         "the router keeps its name)")
    apps = {team: (f"{name}-{team}",
                   build_app(ladder, rungs, team=team, **{**app_options, **dict(extra)}))
            for team, extra in per_team.items()}
    front = _front({t: a for t, (a, _) in apps.items()}, keys, ROUTER_NAME, front_options)
    return SharedApp(name, front, apps)


class SharedFrontArgs(BaseModel):
    """Arguments of :func:`shared_front_builder` (a Serve config application's ``args``).

    Example:
        >>> SharedFrontArgs(teams={"a": "llm-a"}, keys="/etc/keys/keys.yaml").router
        'LadderRouter'
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    teams: dict[str, str] = Field(min_length=1, description="Team -> its ladder app's name.")
    keys: str | None = Field(None, description="Keys file path (default: "
                             "$RAY_LADDER_KEYS_FILE where the front runs).")
    router: str = Field(ROUTER_NAME, description="The router's name in the teams' apps.")
    front_options: dict[str, Any] = Field(default_factory=dict,
                                          description="Extra Serve options of the front.")


def shared_front_builder(args: dict[str, Any]) -> Any:
    """Serve application builder of a shared endpoint's front:
    ``import_path: ray_ladder.serve:shared_front_builder`` (docs/teams.md shows the
    whole config: one ``app_builder`` app per team with ``route_prefix: null``).

    Example:
        >>> app = shared_front_builder({"teams": {"a": "llm-a", "b": "llm-b"},
        ...                             "keys": "/etc/keys/keys.yaml"})  # doctest: +SKIP
    """
    parsed = args if isinstance(args, SharedFrontArgs) else SharedFrontArgs.model_validate(args)
    return _front(parsed.teams, parsed.keys, parsed.router, parsed.front_options)
