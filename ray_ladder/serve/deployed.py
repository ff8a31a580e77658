"""Serve deployments and applications as rungs: the user's class stays the Serve class, the
ladder adds its methods, its placement and its scaling."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ray_ladder.core.context import RungContext
from ray_ladder.serve.llm.openai_server import OpenAIServerRung, is_openai_server
from ray_ladder.serve.llm.protocol import is_llm_class
from ray_ladder.serve.llm.replica import stream_pieces, whole_answer

#: Options the ladder sets on a rung's deployment whatever the user's deployment says.
LADDER_OWNED = ("name", "autoscaling_config", "num_replicas")


class ServeRungMixin:
    """What the router calls on every rung besides ``__call__``: ``ladder_ping``.

    Attributes:
        ladder_rung: The rung this deployment serves (set on the class by the ladder).
    """

    ladder_rung: RungContext

    def ladder_ping(self) -> str:
        """Answer at once (the router primes cold rungs with it)."""
        return self.ladder_rung.name


class GenerateMixin(ServeRungMixin):
    """An LLM rung's calls over the class's own ``generate`` (the LLM rung protocol)."""

    async def ladder_generate(self, request: dict[str, Any]
                              ) -> AsyncIterator[str | dict[str, Any]]:
        """The pieces of one generation (the router's streaming call)."""
        async for piece in stream_pieces(self.generate, request):  # type: ignore[attr-defined]
            yield piece

    async def __call__(self, payload: Any) -> dict[str, Any]:
        """The JSON route: the whole text (as a plain LLM rung answers it)."""
        return await whole_answer(self.generate, self.ladder_rung, payload)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ServeTarget:
    """A rung given as a Serve deployment or application.

    Attributes:
        deployment: The deployment that becomes the rung (an application's ingress).
        bound: True for an application: its class is built from its own bound
            arguments, not ``(RungContext, **init_kwargs)``.
    """

    deployment: Any
    bound: bool

    @property
    def user_class(self) -> type:
        """The deployment's class."""
        cls = self.deployment.func_or_class
        if not isinstance(cls, type):
            raise TypeError(f"deployment {self.deployment.name!r} wraps a function; a rung "
                            "needs a class")
        return cls


def serve_target(value: Any) -> ServeTarget | None:
    """The :class:`ServeTarget` of a ``rungs`` value, or ``None`` for a plain class."""
    from ray.serve import Application, Deployment

    if isinstance(value, Application):
        return ServeTarget(value._bound_deployment, bound=True)  # no public accessor
    if isinstance(value, Deployment):
        return ServeTarget(value, bound=False)
    return None


def rung_class(user_cls: type, rung: RungContext) -> type:
    """``user_cls`` with the ladder's methods added (a subclass, so everything Serve does
    with the class still happens: async ``__init__``, ``reconfigure``, ``check_health``).

    An LLM class (``generate``) gets ``ladder_generate`` and a JSON ``__call__``; an
    OpenAI server (``chat`` / ``completions``: Ray Serve LLM's ``LLMServer``) gets
    ``generate`` over them too; any other class needs its own ``__call__(payload)``.

    Raises:
        TypeError: a class that is none of these, or whose ``generate`` is not an async
            generator.
    """
    mixins: tuple[type, ...]
    if is_openai_server(user_cls):
        mixins = (GenerateMixin, OpenAIServerRung)
    elif is_llm_class(user_cls):
        if not inspect.isasyncgenfunction(user_cls.generate):  # type: ignore[attr-defined]
            raise TypeError(f"rung class {user_cls.__name__}: generate must be an async "
                            "generator (async def generate(self, request): ... yield piece)")
        mixins = (GenerateMixin,)
    elif "__call__" in _defined(user_cls):
        mixins = (ServeRungMixin,)
    else:
        raise TypeError(f"deployment class {user_cls.__name__} has no __call__(self, payload), "
                        "generate(request) or chat/completions: the router cannot call it")
    # Not importable by name, so cloudpickle ships the subclass by value to the replicas.
    return type(f"{user_cls.__name__}OnRung", (*mixins, user_cls),
                {"ladder_rung": rung, "__doc__": user_cls.__doc__})


def _defined(cls: type) -> set[str]:
    return {name for k in cls.__mro__ if k is not object for name in vars(k)}


def serve_options(deployment: Any, ladder_options: dict[str, Any]) -> dict[str, Any]:
    """The options of a user's deployment on its rung: the user's own (replica limits,
    ``user_config``, health checks, runtime_env...) with the ladder's name, scaling and
    placement over them.

    The rung's placement is merged into ``ray_actor_options`` (its ``resources`` into the
    user's) and, for a deployment with ``placement_group_bundles`` (Ray Serve LLM's
    engine), into the first bundle, where Serve places the replica actor. The user's
    ``autoscaling_config`` keeps its fields under the ladder's floor and policy; its
    ``max_replicas`` (or a fixed ``num_replicas``) stays the ceiling when it is higher.
    """
    out = dict(ladder_options)
    placement = dict(ladder_options.get("ray_actor_options") or {})
    actor = dict(deployment.ray_actor_options or {})
    resources = {**(actor.get("resources") or {}), **(placement.pop("resources", None) or {})}
    actor.update(placement)
    if resources:
        actor["resources"] = resources
    out["ray_actor_options"] = actor
    config, replica = deployment._deployment_config, deployment._replica_config  # no public view
    ceiling = deployment.num_replicas if isinstance(deployment.num_replicas, int) else 1
    user_scaling = config.autoscaling_config
    scaling = dict(out["autoscaling_config"])
    if user_scaling is not None:
        ceiling = max(ceiling, user_scaling.max_replicas)
        given = user_scaling.model_dump(exclude_unset=True)
        # The ladder's upscale delay is a default: a user's own one stays.
        kept = {k: v for k, v in scaling.items() if k != "upscale_delay_s" or k not in given}
        scaling = {**{k: v for k, v in given.items() if k not in kept}, **kept}
    scaling["max_replicas"] = max(scaling["max_replicas"], ceiling)
    out["autoscaling_config"] = scaling
    bundles = replica.placement_group_bundles
    if bundles:
        out["placement_group_bundles"] = [_with_placement(bundles[0], actor), *bundles[1:]]
    return out


def _with_placement(bundle: dict[str, float], actor: dict[str, Any]) -> dict[str, float]:
    """``bundle`` grown to hold the replica actor's asks (Serve places it in bundle 0)."""
    asks = dict(actor.get("resources") or {})
    for key, name in (("num_cpus", "CPU"), ("num_gpus", "GPU")):
        if actor.get(key) is not None:
            asks[name] = actor[key]
    out = dict(bundle)
    for name, value in asks.items():
        out[name] = max(float(out.get(name, 0.0)), float(value))
    return out


def bind_rung(target: ServeTarget, rung: RungContext, options: dict[str, Any],
              init_kwargs: dict[str, Any]) -> Any:
    """The rung's bound application: the user's deployment with the ladder's class and
    options, built from its own arguments (an application) or ``(rung, **init_kwargs)``.

    Raises:
        ValueError: ``init_kwargs`` for an application (its arguments are bound already).
    """
    deployment = target.deployment.options(
        func_or_class=rung_class(target.user_class, rung),
        **serve_options(target.deployment, options))
    if not target.bound:
        return deployment.bind(rung, **init_kwargs)
    if init_kwargs:
        raise ValueError(f"rung {rung.name!r}: init_kwargs for an application, whose "
                         "arguments are bound already (give them to .bind())")
    return deployment.bind(*target.deployment.init_args, **target.deployment.init_kwargs)
