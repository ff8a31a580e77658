"""Build the Serve application of a ladder: one deployment per compute rung + the router."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ray_ladder.cluster.fleet_teams import check_bound_team
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.context import RungContext
from ray_ladder.core.latency import LatencyTargets
from ray_ladder.core.placement import standby_replicas
from ray_ladder.core.spec import Ladder, as_ladder
from ray_ladder.serve.bindings import Bindings
from ray_ladder.serve.deployed import bind_rung, serve_target
from ray_ladder.serve.llm.openai_server import is_openai_server
from ray_ladder.serve.llm.protocol import is_llm_class
from ray_ladder.serve.replica import replica_class
from ray_ladder.serve.targets import route_target_table

#: Pins the router to the head node on any Ray cluster (Ray gives only the head this
#: resource; Ray Train pins its state actor the same way), so it never dies with a rung.
HEAD_NODE_RESOURCE = "node:__internal_head__"
ROUTER_NAME = "LadderRouter"
#: Serve's wait before it adds the replicas a rung's policy asks for (Serve's default: 30 s).
RUNG_UPSCALE_DELAY_S = 3.0
_POLICY = "ray_ladder.serve.scaling:StandbyPolicy"


def _resolve(name: str, target: Any) -> Any:
    """A ``rungs`` value as given: a class, a Serve deployment or application, or the
    ``"module:attr"`` import path of one of them."""
    if isinstance(target, str) and ":" in target:
        module, _, attr = target.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:
            raise ValueError(f"rung {name!r}: cannot import {target!r}: {err}") from None
    return target


def _resolve_class(name: str, target: Any) -> type:
    value = _resolve(name, target)
    served = serve_target(value)
    if served is not None:
        return served.user_class
    if isinstance(value, type):
        return value
    if isinstance(target, str) and ":" in target:
        raise ValueError(f"rung {name!r}: {target!r} is a {type(value).__name__}, not a class, "
                         "a Serve deployment or an application")
    raise ValueError(f"rung {name!r}: expected a class, a Serve deployment or application, "
                     f"or 'module:Class', got {target!r}")


def _bind_rung(ladder: Ladder, rung_name: str, target: Any, init_kwargs: dict[str, Any],
               extra_options: Mapping[str, Any] | None,
               team: str | None = None) -> tuple[Any, int]:
    """One compute rung's deployment, bound: a plain class in its replica wrapper, or the
    user's own deployment with the rung's placement and scaling (``serve/deployed.py``);
    and the ``max_ongoing_requests`` of each of its replicas (the router's load book)."""
    from ray import serve

    context = RungContext.of(ladder, rung_name)
    options = _merge(rung_deployment_options(ladder, rung_name, team), extra_options)
    served = serve_target(_resolve(rung_name, target))
    if served is not None:
        slots = options.get("max_ongoing_requests") or served.deployment.max_ongoing_requests
        return bind_rung(served, context, options, init_kwargs), int(slots)
    cls = _resolve_class(rung_name, target)
    deployment = serve.deployment(**options)(replica_class(cls))
    return deployment.bind(cls, context, init_kwargs), int(deployment.max_ongoing_requests)


def _check_rung_names(ladder: Ladder, given: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The ladder's compute rungs, once every one has a ``rungs`` value and no argument
    (``given``: its name -> its mapping) names another rung."""
    compute = [r.name for r in ladder.rungs if r.is_compute]
    missing = [n for n in compute if n not in given["rungs"]]
    if missing:
        raise ValueError(f"no class for compute rung(s) {missing} of ladder {ladder.name!r}; "
                         f"give one for each of {compute}")
    for label, mapping in given.items():
        unknown = sorted(set(mapping) - set(compute))
        if unknown:
            raise ValueError(f"{label} names {unknown}, not compute rungs of ladder "
                             f"{ladder.name!r}; compute rungs: {compute}")
    return compute


def _is_llm_rung(name: str, target: Any) -> bool:
    cls = _resolve_class(name, target)
    return is_llm_class(cls) or (serve_target(_resolve(name, target)) is not None
                                 and is_openai_server(cls))


def _constraints(value: Constraints | Mapping[str, Any] | None) -> Constraints | None:
    if value is None or isinstance(value, Constraints):
        return value
    return Constraints.model_validate(dict(value))


def _merge(base: dict[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(base)
    for key, value in (extra or {}).items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def rung_deployment_options(ladder: Ladder, rung_name: str,
                            team: str | None = None) -> dict[str, Any]:
    """Serve options of one rung deployment: its placement and its standby floor.

    Replicas ask for the rung's placement (``resources``, ``num_gpus``, ``num_cpus``,
    ``accelerator_type``, ``label_selector``). Autoscaling starts at 0 replicas so that
    deploying never waits on a rung that cannot be placed; :class:`StandbyPolicy` then
    keeps ``standby_replicas`` warm (1 on the top rung, 0 below by default) and follows
    the ladder's autoscaler hook where one runs (``ladder`` and ``rung`` name its KV
    entry). The policy applies the 1 -> 0 ``downscale_delay_s`` itself, so that the hook
    can cut it short: Serve's own ``downscale_to_zero_delay_s`` is 0. ``upscale_delay_s``
    is ``RUNG_UPSCALE_DELAY_S`` instead of Serve's 30 s: requests that spill past a full
    rung are demand the router publishes only once they lasted 5 s (serve/load.py), and
    Serve's delay comes on top of that.

    Serve's controller notices a replica that died with its node at its next health
    check, and only then starts the replacement: ``health_check_period_s`` is
    ``max(1, 2 x probe_interval_s)`` instead of Serve's 10 s, so the replacement is
    waiting for capacity when the node comes back (the climb back then costs one
    replica start, not a health period too). ``deployment_options`` can set it back.

    Example:
        >>> rung_deployment_options(ladder, "h100")["ray_actor_options"]  # doctest: +SKIP
        {'resources': {'ladder/h100': 1.0}}
    """
    rung = ladder.rung(rung_name)
    standby = standby_replicas(ladder, rung)
    return {
        "name": rung.name,
        "ray_actor_options": rung.placement(),
        "health_check_period_s": max(1.0, 2 * ladder.policy.probe_interval_s),
        "autoscaling_config": {
            "min_replicas": 0,
            "initial_replicas": 0,
            "max_replicas": max(1, standby),
            "downscale_to_zero_delay_s": 0.0,
            "upscale_delay_s": RUNG_UPSCALE_DELAY_S,
            "policy": {"policy_function": _POLICY,
                       "policy_kwargs": {"standby": standby, "ladder": ladder.name,
                                         "rung": rung.name,
                                         **({"team": team} if team is not None else {})}},
        },
    }


def build_app(
    ladder: Ladder | str | Path,
    rungs: Mapping[str, Any],
    *,
    init_kwargs: Mapping[str, dict[str, Any]] | None = None,
    max_body_bytes: int = 1_000_000,
    name: str | None = None,
    assign_timeout_s: float = 0.25,
    request_timeout_s: float | None = None,
    down_cooldown_s: float | None = None,
    max_cooldown_s: float | None = None,
    router_label_selector: Mapping[str, str] | None = None,
    router_options: Mapping[str, Any] | None = None,
    deployment_options: Mapping[str, Mapping[str, Any]] | None = None,
    constraints: Constraints | Mapping[str, Any] | None = None,
    routes: Mapping[str, Constraints | Mapping[str, Any]] | None = None,
    team: str | None = None,
    targets: LatencyTargets | Mapping[str, Any] | None = None,
    route_targets: Mapping[str, LatencyTargets | Mapping[str, Any]] | None = None,
) -> Any:
    """The Serve application of ``ladder``: ``serve.run(build_app(...))``.

    Each compute rung becomes a deployment named after the rung, whose replicas ask for
    the rung's placement and build ``rungs[name](RungContext, **init_kwargs[name])``.
    The ingress is :class:`~ray_ladder.serve.LadderRouter`, pinned to the head node.

    Args:
        ladder: A :class:`~ray_ladder.Ladder` or the path of its YAML/JSON file.
        rungs: Compute rung name -> its class (or ``"module:Class"``); every compute rung
            needs one. The class takes ``(rung: RungContext, **init_kwargs)`` and its
            ``__call__(payload)`` (sync or async) returns a JSON-serializable answer.
            A value may also be a Serve deployment (``@serve.deployment`` class: its own
            options kept, built like a class) or application (``Model.bind(...)``,
            Ray Serve LLM's ``build_llm_deployment(config)``: built from its own
            arguments); the ladder sets its name, placement and scaling (docs/serve.md).
        init_kwargs: Rung name -> extra keyword arguments of its class.
        max_body_bytes: Larger HTTP bodies get 413.
        name: The router deployment's name (default ``"LadderRouter"``).
        assign_timeout_s: How long a request may wait for a warm rung's replica to take
            it before the rung counts as failed (a dead replica shows this way). Cold
            rungs get ``policy.pending_timeout_s``.
        request_timeout_s: Limit on a rung's answer once taken (``None``: no limit).
        down_cooldown_s: How long a failed rung stays down (default: 2 probe intervals,
            at least 1 s).
        max_cooldown_s: The longest a rung that keeps failing stays down (its cooldown
            doubles up to it) and the most a backend's ``Retry-After`` holds it (default
            30 s).
        router_label_selector: Pin the router with node labels instead of the head.
        router_options: Extra Serve options of the router deployment.
        deployment_options: Rung name -> extra Serve options of its deployment (merged,
            e.g. ``{"h100": {"max_ongoing_requests": 32}}``).
        constraints: Constraints bound to every request of the app (residency, cost,
            quality): a request's own may only narrow them (403 otherwise), the cache
            never crosses them.
        routes: Path prefix inside the app -> constraints bound to the requests under it
            (``{"/eu": {"jurisdiction": "eu"}}``: ``/eu/v1/chat/completions`` and
            ``POST /eu`` run EU-only while ``/`` stays global); narrowed by ``constraints``.
        team: The fleet team the app belongs to (the operator's binding; docs/teams.md):
            its shared rungs follow the team's grants from the fleet arbiter. While an
            arbiter runs, a name its fleet does not have is a ``ValueError`` (checked
            here when connected to Ray, else when the router starts).
        targets: Latency targets of the app's requests: the fields given replace the
            ladder's ``policy.targets`` (docs/serve.md, "Targets, spill and slow rungs").
        route_targets: Path prefix inside the app -> targets of the requests under it,
            replacing the app's fields given (``{"/batch": {"answer_s": 30}}``).
            A request may only narrow its targets (``X-Ladder-Target-S``, the OpenAI
            client's timeout).

    Raises:
        ValueError: a compute rung without class, a class for an unknown rung, or a
            class without ``__call__``.

    Example:
        >>> app = build_app("examples/ladders/gpu-serving.yaml",
        ...                 {"h100": BigModel, "a100": BigModel, "l4": SmallModel,
        ...                  "cpu": TinyModel})  # doctest: +SKIP
        >>> serve.run(app)  # doctest: +SKIP
    """
    from ray import serve

    from ray_ladder.serve.router import LadderRouter

    ladder = as_ladder(ladder)
    compute = _check_rung_names(ladder, {"rungs": rungs, "init_kwargs": init_kwargs or {},
                                         "deployment_options": deployment_options or {}})
    if max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be >= 1, got {max_body_bytes}")
    if assign_timeout_s <= 0:
        raise ValueError(f"assign_timeout_s must be > 0, got {assign_timeout_s}")
    check_bound_team(team)
    bindings = Bindings(ladder, _constraints(constraints),
                        {p: c for p, c in ((p, _constraints(v)) for p, v in
                                           (routes or {}).items()) if c is not None})

    built = {n: _bind_rung(ladder, n, rungs[n], dict((init_kwargs or {}).get(n, {})),
                           (deployment_options or {}).get(n), team) for n in compute}
    bound = {n: app for n, (app, _) in built.items()}

    actor_options: dict[str, Any] = {"num_cpus": 0}
    if router_label_selector is not None:
        actor_options["label_selector"] = dict(router_label_selector)
    else:
        actor_options["resources"] = {HEAD_NODE_RESOURCE: 0.001}
    router = _merge({"name": name or ROUTER_NAME, "num_replicas": 1,
                     "max_ongoing_requests": 1000, "ray_actor_options": actor_options},
                    router_options)
    settings = {
        "llm_rungs": [n for n in compute if _is_llm_rung(n, rungs[n])],
        "bindings": (bindings.default, bindings.routes),
        "max_body_bytes": max_body_bytes,
        "assign_timeout_s": assign_timeout_s,
        "request_timeout_s": request_timeout_s,
        "down_cooldown_s": down_cooldown_s,
        "max_cooldown_s": max_cooldown_s,
        "team": team,
        "slots": {n: slots for n, (_, slots) in built.items()},
        "targets": route_target_table(ladder, targets, route_targets),
    }
    return serve.deployment(**router)(LadderRouter).bind(
        ladder.model_dump_json(), bound, {n: n for n in compute}, settings)


class LadderAppArgs(BaseModel):
    """Arguments of :func:`app_builder` (the ``args:`` of a Serve config application).

    Example:
        >>> LadderAppArgs(ladder="ladder.yaml", rungs={"cpu": "my_models:Tiny"})
        ... # doctest: +ELLIPSIS
        LadderAppArgs(ladder='ladder.yaml', rungs={'cpu': 'my_models:Tiny'}, ...)
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ladder: str = Field(description="Path of the ladder YAML/JSON file.")
    rungs: dict[str, str] = Field(description="Compute rung name -> 'module:Class' (or the "
                                  "import path of a Serve deployment or application).")
    init_kwargs: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Rung name -> keyword arguments of its class.")
    max_body_bytes: int = Field(1_000_000, ge=1, description="Larger bodies get 413.")
    name: str | None = Field(None, description="Router deployment name.")
    assign_timeout_s: float = Field(0.25, gt=0, description="See build_app.")
    request_timeout_s: float | None = Field(None, gt=0, description="See build_app.")
    down_cooldown_s: float | None = Field(None, gt=0, description="See build_app.")
    max_cooldown_s: float | None = Field(None, gt=0, description="See build_app.")
    router_label_selector: dict[str, str] | None = Field(
        None, description="Pin the router with node labels instead of the head.")
    deployment_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Rung name -> extra Serve deployment options.")
    constraints: dict[str, Any] | None = Field(
        None, description="Constraints bound to every request (requests may only narrow).")
    routes: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Path prefix -> constraints bound to its requests.")
    team: str | None = Field(None, description="The fleet team the app belongs to.")
    targets: dict[str, Any] | None = Field(
        None, description="Latency targets replacing the ladder's (see build_app).")
    route_targets: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Path prefix -> its latency targets.")


def app_builder(args: dict[str, Any]) -> Any:
    """Serve application builder: ``import_path: ray_ladder.serve:app_builder``.

    ``args`` are :class:`LadderAppArgs` (``ladder`` path, ``rungs`` import paths, ...).
    A relative ladder path is read from the working directory of the process that
    builds the app (``serve run``'s, or the ``runtime_env`` working_dir).

    Example:
        >>> app = app_builder({"ladder": "examples/ladders/gpu-serving.yaml",
        ...                    "rungs": {"h100": "examples.serve_app:BigModel"}})
        ... # doctest: +SKIP
    """
    parsed = args if isinstance(args, LadderAppArgs) else LadderAppArgs.model_validate(args)
    return build_app(
        parsed.ladder,
        parsed.rungs,
        init_kwargs=parsed.init_kwargs,
        max_body_bytes=parsed.max_body_bytes,
        name=parsed.name,
        assign_timeout_s=parsed.assign_timeout_s,
        request_timeout_s=parsed.request_timeout_s,
        down_cooldown_s=parsed.down_cooldown_s,
        max_cooldown_s=parsed.max_cooldown_s,
        router_label_selector=parsed.router_label_selector,
        deployment_options=parsed.deployment_options,
        constraints=parsed.constraints,
        routes=parsed.routes,
        team=parsed.team,
        targets=parsed.targets,
        route_targets=parsed.route_targets,
    )
