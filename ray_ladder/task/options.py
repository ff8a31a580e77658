"""Options of ``@ladder_task``: one table, validated at decoration and in ``.options()``."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ray_ladder.core.constraints import Constraints
from ray_ladder.core.exceptions import ConstraintNotAllowedError
from ray_ladder.core.spec import Ladder, Rung
from ray_ladder.core.teamwork import check_team

PATHS = ("orchestrated", "native")


def _check_constraints(value: Any) -> Constraints | None:
    if value is None or isinstance(value, Constraints):
        return value
    if isinstance(value, Mapping):
        return Constraints.model_validate(dict(value))
    raise TypeError(f"constraints must be a Constraints or a dict, got {type(value).__name__}")


def _check_max_attempts(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_attempts must be an int >= 1 (or None), got {value!r}")
    return value


def _check_fallback_on(value: Any) -> tuple[type[BaseException], ...]:
    items = value if isinstance(value, (tuple, list)) else (value,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise TypeError(f"fallback_on takes exception classes, got {item!r}")
    return tuple(items)


def _check_pending_timeout(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"pending_timeout_s must be a number > 0 (math.inf waits forever), "
                         f"got {value!r}")
    return float(value)


def _check_path(value: Any) -> str:
    if value not in PATHS:
        raise ValueError(f"path must be one of {list(PATHS)}, got {value!r}")
    return str(value)


#: Ladder options: name -> (validator, default).
LADDER_OPTIONS: dict[str, tuple[Callable[[Any], Any], Any]] = {
    "constraints": (_check_constraints, None),
    "fallback_on": (_check_fallback_on, ()),
    "max_attempts": (_check_max_attempts, None),
    "path": (_check_path, "orchestrated"),
    "pending_timeout_s": (_check_pending_timeout, None),
    "team": (check_team, None),
}

#: Ray task options passed through to every attempt (Ray validates their values).
RAY_OPTIONS = (
    "accelerator_type", "enable_task_events", "label_selector", "memory", "name", "num_cpus",
    "num_gpus", "resources", "runtime_env",
)

#: Ray task options the ladder sets itself, and what to use instead.
CONTROLLED = {
    "max_retries": "the ladder retries across rungs; use max_attempts",
    "retry_exceptions": "use fallback_on to fall a rung on chosen exceptions",
    "num_returns": "a ladder task returns one value",
    "fallback_strategy": "the ladder's rungs are the fallback strategy",
    "scheduling_strategy": "the rung's placement decides where an attempt runs",
    "placement_group": "the rung's placement decides where an attempt runs",
    "placement_group_bundle_index": "the rung's placement decides where an attempt runs",
    "placement_group_capture_child_tasks": "the rung's placement decides where an attempt runs",
    "max_calls": "attempts may run several calls in one task",
}


def valid_keys() -> list[str]:
    """Every option name ``@ladder_task`` and ``.options()`` accept, sorted."""
    return sorted([*LADDER_OPTIONS, *RAY_OPTIONS])


def _ray_validate(key: str, value: Any) -> None:
    """Run Ray's own validator for one task option (Ray's table, not a copy of it)."""
    from ray_ladder.cluster import ray_private

    ray_private.task_option_table()[key].validate(key, value)


@dataclass(frozen=True)
class TaskOptions:
    """The validated options of one ladder task.

    Attributes:
        constraints: Hard limits on the rungs (residency, cost, quality).
        fallback_on: Exception classes that make a call fall one rung.
        max_attempts: Most attempts per call (``None``: one per compute rung + 3).
        path: ``orchestrated`` (default) or ``native`` (Ray's label fallback).
        pending_timeout_s: Override of ``policy.pending_timeout_s``.
        team: The fleet team whose grants the task's shared rungs follow (bound: set in
            the decorator, ``.options()`` cannot change it; docs/teams.md).
        ray: Ray task options passed to every attempt.

    Example:
        >>> TaskOptions.build({"max_attempts": 5, "num_cpus": 2}).max_attempts
        5
    """

    constraints: Constraints | None = None
    fallback_on: tuple[type[BaseException], ...] = ()
    max_attempts: int | None = None
    path: str = "orchestrated"
    pending_timeout_s: float | None = None
    team: str | None = None
    ray: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def build(cls, options: Mapping[str, Any], base: TaskOptions | None = None,
              ladder: Ladder | None = None) -> TaskOptions:
        """Validate ``options`` over ``base``; unknown keys name the valid ones.

        Raises:
            ValueError: An unknown or ladder-controlled key, or a bad value.
            TypeError: A value of the wrong type.
            InvalidConstraintsError: Constraints no rung of ``ladder`` can satisfy.
        """
        base = base or cls()
        ladder_kw: dict[str, Any] = {}
        ray_kw = dict(base.ray)
        for key, value in options.items():
            if key in LADDER_OPTIONS:
                ladder_kw[key] = LADDER_OPTIONS[key][0](value)
            elif key in RAY_OPTIONS:
                _ray_validate(key, value)
                ray_kw[key] = value
            elif key in CONTROLLED:
                raise ValueError(f"option {key!r} is set by the ladder ({CONTROLLED[key]})")
            elif key == "rung":
                raise ValueError("'rung' is passed to the function by the ladder, "
                                 "not an option")
            else:
                raise ValueError(f"unknown ladder task option {key!r}; valid options: "
                                 f"{valid_keys()}")
        if base.team is not None and ladder_kw.get("team", base.team) != base.team:
            raise ConstraintNotAllowedError(
                f"team {base.team!r} is bound by the decorator; .options(team=...) "
                f"cannot change it (got {ladder_kw['team']!r})")
        if base.constraints is not None and "constraints" in ladder_kw:
            # The decorator's constraints are bound: .options() may only narrow them.
            ladder_kw["constraints"] = base.constraints.narrow(ladder_kw["constraints"])
        out = replace(base, ray=ray_kw, **ladder_kw)
        if ladder is not None and out.constraints is not None:
            ladder.check_constraints(out.constraints)
        return out

    def fingerprint(self) -> str:
        """A stable short hash of the options (keys the orchestrator's registrations)."""
        parts = [
            repr(self.constraints.key() if self.constraints else None),
            repr([f"{c.__module__}.{c.__qualname__}" for c in self.fallback_on]),
            repr(self.max_attempts), self.path, repr(self.pending_timeout_s),
            *([f"team={self.team}"] if self.team is not None else []),
            repr(sorted((k, repr(v)) for k, v in self.ray.items())),
        ]
        return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]

    def pending_timeout(self, ladder: Ladder) -> float:
        """Seconds an attempt may wait unscheduled before falling."""
        if self.pending_timeout_s is not None:
            return self.pending_timeout_s
        return ladder.policy.pending_timeout_s

    def attempts_allowed(self, ladder: Ladder) -> int:
        """``max_attempts``, or one per eligible compute rung plus Ray's default 3 retries."""
        if self.max_attempts is not None:
            return self.max_attempts
        return sum(r.is_compute for r in ladder.eligible(self.constraints)) + 3


def merge_rung(rung: Rung, ray_options: Mapping[str, Any]) -> Rung:
    """The rung as one attempt asks for it: its placement merged over the user's options.

    Custom resources and label selectors merge (the rung's keys win); ``num_cpus``,
    ``num_gpus`` and ``accelerator_type`` come from the rung when it sets them, else
    from the user; ``num_cpus`` defaults to 1 like any Ray task.

    Example:
        >>> merge_rung(Rung(name="h100", resources={"ladder/h100": 1}), {"num_cpus": 2}
        ...            ).placement()
        {'resources': {'ladder/h100': 1.0}, 'num_cpus': 2.0}
    """
    if not rung.is_compute:
        return rung
    user_cpus = ray_options.get("num_cpus")
    update: dict[str, Any] = {
        "resources": {**(ray_options.get("resources") or {}), **rung.resources},
        "label_selector": {**(ray_options.get("label_selector") or {}),
                           **rung.label_selector},
        "num_cpus": rung.num_cpus if rung.num_cpus is not None
        else float(1.0 if user_cpus is None else user_cpus),
    }
    for key in ("num_gpus", "accelerator_type"):
        if getattr(rung, key) is None and ray_options.get(key) is not None:
            update[key] = ray_options[key]
    return rung.model_copy(update=update)


def effective_ladder(ladder: Ladder, ray_options: Mapping[str, Any]) -> Ladder:
    """The ladder with every compute rung merged with the user's Ray options."""
    if not ray_options:
        ray_options = {}
    rungs = [merge_rung(r, ray_options) for r in ladder.rungs]
    return ladder.model_copy(update={"rungs": rungs})


def attempt_options(rung: Rung, ray_options: Mapping[str, Any], task_name: str
                    ) -> dict[str, Any]:
    """Ray options of one attempt on ``rung`` (already merged by :func:`merge_rung`)."""
    opts = {k: v for k, v in ray_options.items()
            if k in ("memory", "runtime_env", "enable_task_events")}
    opts.update(rung.placement())
    opts.setdefault("num_cpus", 1.0)
    opts["name"] = ray_options.get("name") or f"{task_name}[{rung.name}]"
    opts["max_retries"] = 0  # a dead rung is the ladder's business, not Ray's retry
    return opts


def is_inf(value: float) -> bool:
    """True for ``math.inf`` (wait forever)."""
    return math.isinf(value)


@dataclass(frozen=True)
class TaskSpec:
    """What the orchestrator needs to run one ladder task (sent once per option set).

    Attributes:
        name: The function's qualified name (task names, events).
        family: Id shared by a decorated function and all its ``.options()`` variants.
        fn: The user function.
        ladder: The ladder as the user gave it.
        options: The validated options.
    """

    name: str
    family: str
    fn: Callable[..., Any]
    ladder: Ladder
    options: TaskOptions
