"""The ladder file's rules across fields, on facts that may be unknown.

The same rules run twice: in :class:`~ray_ladder.core.spec.Ladder`'s validator (every
field valid) and, when some fields are not, on the raw document, so one run of
``ray-ladder validate`` reports field errors and rule errors together. A rule that needs
a fact a field error left unknown (a rung's kind that is not one of the three, a quality
that is not a number in 0..1) does not run; a rung that is not a mapping is unknown
entirely.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_core import PydanticCustomError

from ray_ladder.core.exceptions import ConfigIssue

KINDS = ("compute", "cache", "shed")
_ORDER = {"compute": 0, "cache": 1, "shed": 2}
RESERVED_RESOURCES = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": None,
                      "object_store_memory": None}
"""Ray's default resources: a rung asks for CPUs and GPUs with num_cpus / num_gpus."""

#: Ray's resource unit: amounts are kept in 1/10000ths (``RESOURCE_UNIT_SCALING``).
RESOURCE_UNIT = 0.0001

#: (path, message with ``{value}``, value, fix): one broken rule.
Rule = tuple[str, str, object, str]


@dataclass(frozen=True)
class RungFacts:
    """What the ladder's rules read of one rung (``None``: unknown)."""

    name: str | None
    kind: str | None
    quality: float | None


def facts_from_raw(rung: Any) -> RungFacts:
    """The facts of one raw rung mapping, each only where its field is valid."""
    if not isinstance(rung, dict):
        return RungFacts(None, None, None)
    name = rung.get("name") if isinstance(rung.get("name"), str) else None
    kind = rung.get("kind", "compute")
    kind = kind if kind in KINDS else None
    quality = rung.get("quality", 0.0 if kind == "shed" else 1.0)
    ok = isinstance(quality, (int, float)) and not isinstance(quality, bool) \
        and 0 <= quality <= 1
    return RungFacts(name, kind, float(quality) if ok else None)


def _kind_rules(kinds: list[str | None], names: list[str | None]) -> list[Rule]:
    out: list[Rule] = []
    if kinds and None not in kinds and "compute" not in kinds:
        out.append(("rungs", "a ladder needs at least one compute rung, got kinds {value}",
                    kinds, "add a rung with a placement, e.g. {name: cpu, num_cpus: 1}"))
    for kind in ("cache", "shed"):
        where = [j for j, k in enumerate(kinds) if k == kind]
        if len(where) > 1:
            i = where[1]
            out.append((f"rungs[{i}].kind", f"at most one {kind} rung; {{value}} is another",
                        names[i], f"remove the extra {kind} rung"))
    for i in range(1, len(kinds)):
        above, below = kinds[i - 1], kinds[i]
        if above is not None and below is not None and _ORDER[below] < _ORDER[above]:
            out.append((f"rungs[{i}].kind", "rung {value} comes below a " + above + " rung",
                        f"{names[i]} ({below})",
                        "order rungs compute..., then cache, then shed (the bottom)"))
    return out


def ladder_rules(rungs: list[RungFacts]) -> list[Rule]:
    """Every broken rule of a ladder's rung list, in document order.

    Example:
        >>> ladder_rules([RungFacts("a", "compute", 0.5), RungFacts("a", "compute", 0.9)])
        ... # doctest: +ELLIPSIS
        [('rungs[1].name', 'duplicate rung name {value} (also rungs[0])', 'a', ...), ...]
    """
    out: list[Rule] = []
    seen: dict[str, int] = {}
    for i, rung in enumerate(rungs):
        if rung.name is None:
            continue
        if rung.name in seen:
            out.append((f"rungs[{i}].name", "duplicate rung name {value} (also "
                        f"rungs[{seen[rung.name]}])", rung.name,
                        "give every rung a unique name"))
        else:
            seen[rung.name] = i
    out += _kind_rules([r.kind for r in rungs], [r.name for r in rungs])
    for i in range(1, len(rungs)):
        above, below = rungs[i - 1], rungs[i]
        if above.quality is None or below.quality is None:
            continue
        if below.quality > above.quality:
            out.append((f"rungs[{i}].quality", "quality must not increase going down: {value}",
                        f"rungs[{i}].quality ({below.quality}) > rungs[{i - 1}].quality "
                        f"({above.quality})",
                        f"lower {below.name or f'rungs[{i}]'}'s quality or move it above "
                        f"{above.name or f'rungs[{i - 1}]'}"))
    return out


def resource_rules(resources: dict[str, float]) -> list[Rule]:
    """Custom resource names and amounts Ray would refuse later, at ``ray.remote`` or
    ``ray start --resources`` time."""
    out: list[Rule] = []
    for key, amount in resources.items():
        path = f"resources.{key}" if key.strip() else "resources"
        if key in RESERVED_RESOURCES:
            alt = RESERVED_RESOURCES[key]
            out.append((path, "{value} is one of Ray's default resources, not a custom one",
                        key, f"use {alt}: N instead" if alt else
                        "remove it: a rung is placed by custom resources, CPUs and GPUs"))
        elif not key.strip():
            out.append((path, "a resource name must not be empty, got {value}", repr(key),
                        "name it, e.g. ladder/h100"))
        elif any(c.isspace() for c in key):
            out.append((path, "a resource name must not contain spaces, got {value}",
                        repr(key), "use '-', '_' or '/' instead, e.g. ladder/h100"))
        elif amount <= 0:
            out.append((path, "resource amounts must be > 0, got {value}", amount,
                        "use a positive amount, e.g. 1"))
        elif amount < RESOURCE_UNIT:
            out.append((path, "Ray counts resources in units of 0.0001; {value} is less",
                        amount, "use 0.0001 or more"))
    return out


def as_error(rule: Rule) -> PydanticCustomError:
    """A rule as the error a validator raises (``config_errors`` reads it back)."""
    path, message, value, fix = rule
    return PydanticCustomError("ladder_rule", message, {"path": path, "value": value,
                                                        "fix": fix})


def as_issue(rule: Rule) -> ConfigIssue:
    """A rule as the issue :class:`ConfigError` lists (the message as pydantic writes it)."""
    return ConfigIssue(rule[0], as_error(rule).message(), None, rule[3])
