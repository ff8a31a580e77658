"""Turn pydantic validation errors into ConfigIssues that name the field and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from ray_ladder.core.exceptions import ConfigIssue


def _ladder_keys() -> dict[str, str]:
    """Valid keys per level of a ladder file (the "did you mean" of an unknown field),
    read from the models themselves so that a new field is never missing here."""
    from ray_ladder.core.clusters import ClusterSpec, DataSpec, RungData
    from ray_ladder.core.spec import (
        CacheSettings,
        CapacitySpec,
        Ladder,
        LatencyTargets,
        Policy,
        Rung,
        TrainShape,
    )

    def keys(*models: Any) -> str:
        return ", ".join(dict.fromkeys(k for m in models for k in m.model_fields))

    return {"ladder": keys(Ladder), "rungs": keys(Rung), "policy": keys(Policy),
            "targets": keys(LatencyTargets), "cache": keys(CacheSettings),
            "capacity": keys(CapacitySpec), "train": keys(TrainShape),
            "clusters": keys(ClusterSpec),
            "data": f"{keys(DataSpec)} (the ladder's); {keys(RungData)} (a rung's)"}


#: The same for a fleet file (core/fleet.py); a shared rung's keys are under its name.
FLEET_KEYS = {
    "fleet": "fleet, description, control_period_s, rungs, teams",
    "rungs": "resources, cloud, cost_per_hour, jurisdiction",
    "teams": "name, weight, cohort, quota, borrowing_limit, lending_limit, reclaim_grace_s, "
    "constraints, budget",
    "budget": "max_cost, window_s, on_exhausted",
    "constraints": "jurisdiction, max_cost_per_hour, min_quality, sites",
}

_TYPE_FIXES = {
    "int_type": "use a whole number",
    "int_from_float": "use a whole number",
    "float_type": "use a number",
    "string_type": "use a string (quote it in YAML)",
    "bool_type": "use true or false",
    "dict_type": "use a mapping (key: value)",
    "list_type": "use a list (- item)",
    "model_type": "use a mapping (key: value)",
    "missing": "add this field",
    "string_pattern_mismatch": "use 1-63 lowercase letters, digits, '.', '_' or '-', "
    "starting and ending with a letter or digit",
    "too_short": "add at least one item",
    "literal_error": "use one of the allowed values",
    "datetime_type": "use an ISO 8601 time with a zone, e.g. 2026-03-02T11:30:00Z",
    "datetime_from_date_parsing": "use an ISO 8601 time with a zone, e.g. 2026-03-02T11:30:00Z",
    "timezone_aware": "add a time zone: Z (UTC) or an offset such as +01:00",
}


def _format_loc(loc: tuple[Any, ...], data: Any) -> str:
    """('rungs', 2, 'quality') -> 'rungs[2] (l4).quality' (rung names help humans)."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            name = None
            if isinstance(node, list) and 0 <= part < len(node) and isinstance(node[part], dict):
                name = node[part].get("name")
            if name is not None and out.startswith("rungs") and out.count("[") == 1:
                out += f" ({name})"
        else:
            out += f".{part}" if out else str(part)
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None
    return out


def did_you_mean(key: str, valid: Sequence[str]) -> str | None:
    """The valid key closest to a misspelt one: the only valid key that contains it, else
    one that difflib finds close (ratio >= 0.75), case ignored; None when none is.

    Example:
        >>> did_you_mean("qualty", ["name", "quality", "tags"])
        'quality'
        >>> did_you_mean("colour", ["name", "quality"]) is None
        True
    """
    lowered = {k.lower(): k for k in valid}
    part = [k for k in lowered if len(key) >= 4 and key.lower() in k]
    if len(part) == 1:  # hysteresis -> promotion_hysteresis
        return lowered[part[0]]
    close = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.75)
    return lowered[close[0]] if close else None


def _fix_for(err: Mapping[str, Any], loc: tuple[Any, ...],
             valid_keys: Mapping[str, str] | None = None) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        table = _ladder_keys() if valid_keys is None else valid_keys
        root = "ladder" if valid_keys is None else "fleet"
        parents = [p for p in loc[:-1] if isinstance(p, str)]
        named = "clusters" if valid_keys is None else "rungs"  # <level>.<name>.<key>
        if len(parents) == 2 and parents[0] == named:
            parents = [named]
        parent = parents[-1] if parents else root
        keys = table.get(parent, "")
        if not keys:
            return "remove it"
        guess = did_you_mean(str(loc[-1]), keys.split(", "))
        if guess:
            return f"did you mean {guess!r}? Else remove it; valid keys here: {keys}"
        return f"remove it or fix its spelling; valid keys here: {keys}"
    if kind.startswith(("greater_than", "less_than")):
        return "use a value that is " + err["msg"].replace("Input should be ", "")
    return _TYPE_FIXES.get(kind, "")


def issues_from_validation_error(err: ValidationError, data: Any,
                                 valid_keys: Mapping[str, str] | None = None
                                 ) -> list[ConfigIssue]:
    """One :class:`ConfigIssue` per pydantic error, with path, value and fix
    (``valid_keys``: the key table of another file kind, e.g. :data:`FLEET_KEYS`)."""
    issues: list[ConfigIssue] = []
    for e in err.errors(include_url=False):
        loc = tuple(e["loc"])
        ctx = e.get("ctx") or {}
        if e["type"] == "ladder_rule":
            sub = ctx.get("path", "")
            path = _format_loc(loc, data)
            if sub:
                path = f"{path}.{sub}" if path else sub
            issues.append(ConfigIssue(path, e["msg"], None, ctx.get("fix", "")))
            continue
        value = None if e["type"] == "missing" else e.get("input")
        msg = e["msg"]
        if e["type"] == "literal_error" and "expected" in ctx:
            msg = f"must be one of {ctx['expected']}"
        issues.append(ConfigIssue(_format_loc(loc, data), msg, value,
                                  _fix_for(e, loc, valid_keys)))
    return issues
