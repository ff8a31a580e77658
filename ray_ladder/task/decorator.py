"""``@ladder_task``: ``@ray.remote`` with a compute fallback ladder."""

from __future__ import annotations

import functools
import inspect
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from ray_ladder.cluster import ray_private
from ray_ladder.cluster.fleet_teams import check_bound_team
from ray_ladder.core.events import TransitionEvent
from ray_ladder.core.spec import Ladder, as_ladder
from ray_ladder.task.native import NativePath, native_problem, native_rung
from ray_ladder.task.options import TaskOptions, TaskSpec
from ray_ladder.task.orchestrator.registry import ensure_registered, get_orchestrator
from ray_ladder.task.transfer import by_reference


class LadderTask:
    """A remote function that runs each call on the best rung obtainable now.

    Made by :func:`ladder_task`. ``.remote()`` returns a real ``ray.ObjectRef`` whose
    ``ray.get`` is the function's own value; :func:`last_rung` says which rung made it.

    Attributes:
        ladder: The ladder.
        path: ``"orchestrated"`` (the orchestrator actor runs the attempt loop) or
            ``"native"`` (Ray's ``label_selector`` + ``fallback_strategy``).

    Example:
        >>> @ladder_task(ladder)  # doctest: +SKIP
        ... def embed(texts, *, rung):
        ...     return encode(texts, model=rung.params["model"])
        >>> ray.get(embed.remote(["hello"]))  # doctest: +SKIP
    """

    def __init__(self, fn: Callable[..., Any], ladder: Ladder, options: TaskOptions,
                 family: str | None = None) -> None:
        self._fn = fn
        self.ladder = ladder
        self._options = options
        self._family = family or uuid.uuid4().hex
        self._name = getattr(fn, "__qualname__", getattr(fn, "__name__", "ladder_task"))
        self._signature = inspect.signature(fn)
        self._key = f"{self._family}:{options.fingerprint()}"
        self._spec = TaskSpec(self._name, self._family, fn, ladder, options)
        if options.path == "native":
            problem = native_problem(ladder, options)
            if problem is not None:
                raise ValueError(f"path='native' is not possible for {self._name}: {problem}")
        self.path = options.path
        self._team_checked = False
        self._check_team()
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"Ladder task '{self._name}' cannot be called directly; use "
            f"'{self._name}.remote(...)' (it runs on the best rung obtainable now)."
        )

    def __repr__(self) -> str:
        return f"LadderTask({self._name}, ladder={self.ladder.name!r}, path={self.path!r})"

    def _check_team(self) -> None:
        """Check the bound team against the running fleet once this process is connected
        to Ray (at decoration, else at the first call): ``ValueError`` naming its teams."""
        if self._team_checked or self._options.team is None:
            return
        if ray_private.kv_initialized():
            check_bound_team(self._options.team)
            self._team_checked = True

    @property
    def options_in_force(self) -> TaskOptions:
        """The validated options of this task."""
        return self._options

    def remote(self, *args: Any, **kwargs: Any) -> ray.ObjectRef:
        """Run one call; return the ``ObjectRef`` of its value.

        Raises:
            TypeError: The arguments do not fit the function, or pass ``rung``.
            ValueError: The bound team is not one of the running fleet's teams.
        """
        if "rung" in kwargs:
            raise TypeError(f"'{self._name}': 'rung' is passed by the ladder, not the caller")
        try:
            self._signature.bind(*args, rung=None, **kwargs)
        except TypeError as err:
            raise TypeError(f"{self._name}.remote(): {err}") from None
        self._check_team()
        if self.path == "native":
            return NativePath.of(self._key, self._spec).submit(args, kwargs)
        handle = get_orchestrator()
        self._check_team()  # Ray may have been started just now
        ensure_registered(handle, self._key, self._spec)
        # Large values go by reference, put here once as Ray would put them: the
        # orchestrator then handles a ref, never the value (docs/tasks.md, data path).
        args, kwargs, any_ref = by_reference(args, kwargs)
        if kwargs or any_ref:
            return handle.run.remote(self._key, (args, kwargs))
        return handle.run_args.remote(self._key, *args)

    def options(self, **options: Any) -> LadderTask:
        """A copy with some options changed (ladder options and Ray task options).

        Raises:
            ValueError: An unknown key (the message names the valid ones) or bad value.

        Example:
            >>> embed.options(constraints=Constraints(jurisdiction="eu"), num_cpus=2)
            ... # doctest: +SKIP
        """
        opts = TaskOptions.build(options, base=self._options, ladder=self.ladder)
        return LadderTask(self._fn, self.ladder, opts, family=self._family)

    def events(self) -> list[TransitionEvent]:
        """Every fall and climb of this task and its ``.options()`` variants, oldest first.

        ``kind`` is ``"transition"`` for a move of the ladder's selector (what new calls
        use), ``"alert"`` for ``max_degraded_seconds``, and ``"call"`` for one call that
        fell (or moved node) after a failed attempt.
        """
        out = list(NativePath.events(self._family))
        if get_orchestrator_exists():
            raw = ray.get(get_orchestrator().events.remote(self._family))
            out.extend(TransitionEvent(d["time"], d["ladder"], d["from"], d["to"],
                                       d["direction"], d["reason"], d["kind"],
                                       d.get("cause", "other")) for d in raw)
        return sorted(out, key=lambda e: e.time)


def get_orchestrator_exists() -> bool:
    """Whether this driver has talked to its orchestrator (events() won't create one)."""
    from ray_ladder.task.orchestrator import registry

    return bool(registry._handles)


def ladder_task(ladder: Ladder | str | Path | None = None, /,
                **options: Any) -> Callable[[Callable[..., Any]], LadderTask]:
    """Decorate a function so each ``.remote()`` call runs on the best rung obtainable.

    The function takes a keyword argument ``rung``: the :class:`RungContext` it runs on
    (name, params, tags, quality). Options: ``constraints``, ``max_attempts``,
    ``fallback_on``, ``pending_timeout_s``, ``path`` (``"orchestrated"`` or
    ``"native"``, see docs/tasks.md), ``team`` (a fleet team, bound: docs/teams.md), and
    the Ray task options
    ``num_cpus``, ``num_gpus``, ``memory``, ``resources``, ``accelerator_type``,
    ``label_selector``, ``runtime_env``, ``name``, ``enable_task_events``.

    Args:
        ladder: A :class:`Ladder` or the path of its YAML/JSON file.
        **options: Defaults for every call; ``.options()`` overrides them.

    Example:
        >>> @ladder_task("ladders/embed.yaml", max_attempts=5)  # doctest: +SKIP
        ... def embed(texts, *, rung):
        ...     return encode(texts, model=rung.params["model"])
    """
    if callable(ladder) and not isinstance(ladder, (Ladder, str, Path)):
        raise TypeError("@ladder_task needs a ladder: use @ladder_task(ladder) or "
                        "@ladder_task('path/to/ladder.yaml')")
    if ladder is None:
        raise TypeError("@ladder_task needs a ladder (a Ladder or the path of its file)")
    resolved = as_ladder(ladder)
    opts = TaskOptions.build(options, ladder=resolved)

    def wrap(fn: Callable[..., Any]) -> LadderTask:
        if inspect.isclass(fn):
            raise TypeError(
                "@ladder_task decorates functions. An actor keeps state on one node, so "
                "moving it between rungs means restarting it: use ray_ladder.serve for "
                "long-lived replicas, or call a @ladder_task from your actor."
            )
        params = inspect.signature(fn).parameters
        takes_rung = "rung" in params and params["rung"].kind in (
            inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        if not takes_rung and not any(p.kind is inspect.Parameter.VAR_KEYWORD
                                      for p in params.values()):
            raise TypeError(f"{fn.__qualname__} must take a keyword argument 'rung' "
                            f"(the RungContext it runs on), e.g. def f(x, *, rung): ...")
        return LadderTask(fn, resolved, opts)

    return wrap


def last_rung(ref: ray.ObjectRef, timeout_s: float | None = None) -> str | None:
    """The rung whose attempt produced ``ref``'s value (waits for the call to finish).

    Returns ``None`` when no rung produced an answer (``LadderExhaustedError``). For a
    call that raised the function's own error, the orchestrated path gives the rung it
    raised on; the native path gives ``None``.

    Raises:
        ray.exceptions.GetTimeoutError: Not finished within ``timeout_s``.
        ValueError: ``ref`` is not the result of a ladder task (or its record is gone).

    Example:
        >>> ref = embed.remote(["hello"])  # doctest: +SKIP
        >>> last_rung(ref)  # doctest: +SKIP
        'a100'
    """
    return call_info(ref, timeout_s)["rung"]


def call_info(ref: ray.ObjectRef, timeout_s: float | None = None) -> dict[str, Any]:
    """``{"rung": ..., "attempts": [...]}`` of a finished ladder task call.

    ``attempts`` lists the failed tries before the answer (rung, reason, time); the
    native path leaves retries to Ray and reports none.
    """
    found, rung = native_rung(ref, timeout_s)
    if found:
        return {"rung": rung, "attempts": []}
    ready, _ = ray.wait([ref], timeout=timeout_s, fetch_local=False)
    if not ready:
        raise ray.exceptions.GetTimeoutError(f"{ref} not finished within {timeout_s}s")
    info = ray.get(get_orchestrator().info.remote(ref.task_id().hex()))
    if info is None:
        raise ValueError(f"{ref} is not the result of a ladder task of this driver "
                         "(or its record was dropped)")
    return dict(info)
