"""Turn pydantic validation errors into ConfigIssues that name the field and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, get_args, get_origin

from pydantic import BaseModel, ValidationError

from ray_ladder.core.exceptions import ConfigIssue


def _model_in(annotation: Any) -> Any:
    """The pydantic model an annotation holds (``X``, ``X | None``), else ``None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    models = [m for m in map(_model_in, get_args(annotation)) if m is not None]
    return models[0] if len(models) == 1 and get_origin(annotation) is not list \
        and get_origin(annotation) is not dict else None


def _fields_at(root: type[BaseModel], path: tuple[Any, ...]) -> list[str]:
    """The field names of the model at ``path`` under ``root`` (``[]``: not a model),
    walked through the annotations: a field, a list's index, a mapping's key.

    Example:
        >>> from ray_ladder.core.spec import Ladder
        >>> _fields_at(Ladder, ("policy", "targets"))[:2]
        ['answer_s', 'ttft_s']
    """
    current: Any = root
    for part in path:
        model = _model_in(current)
        if model is not None and isinstance(part, str) and part in model.model_fields:
            current = model.model_fields[part].annotation
            continue
        inner, origin = current, get_origin(current)
        if origin not in (list, dict):  # X | None: the X
            args = [a for a in get_args(current) if a is not type(None)]
            inner = args[0] if len(args) == 1 else current
            origin = get_origin(inner)
        if origin is list and isinstance(part, int):
            current = get_args(inner)[0]
        elif origin is dict and isinstance(part, str):
            current = get_args(inner)[1]
        else:
            return []
    model = _model_in(current)
    return list(model.model_fields) if model is not None else []


#: A file's root model (its fields give each level's valid keys), or a table per level.
KeyTable: TypeAlias = "type[BaseModel] | Mapping[str, str]"

#: The valid keys per level of a fleet file (core/fleet.py); a shared rung's keys are
#: under its name.
FLEET_KEYS = {
    "fleet": "fleet, description, control_period_s, node_table_period_s, demand_hold_s, "
    "rungs, teams",
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


def _keys_for(loc: tuple[Any, ...], valid_keys: KeyTable) -> str:
    """The valid keys beside the unknown key at ``loc``: read from the file's root model,
    or from a table (``rungs.<name>.<key>``: a shared rung's keys)."""
    if isinstance(valid_keys, type):
        return ", ".join(_fields_at(valid_keys, loc[:-1]))
    parents = [p for p in loc[:-1] if isinstance(p, str)]
    if len(parents) == 2 and parents[0] == "rungs":
        parents = ["rungs"]
    return valid_keys.get(parents[-1] if parents else next(iter(valid_keys), ""), "")


def _fix_for(err: Mapping[str, Any], loc: tuple[Any, ...], valid_keys: KeyTable) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        keys = _keys_for(loc, valid_keys)
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
                                 valid_keys: KeyTable) -> list[ConfigIssue]:
    """One :class:`ConfigIssue` per pydantic error, with path, value and fix
    (``valid_keys``: the file's root model, whose fields give each level's valid keys,
    or a key table per level, e.g. :data:`FLEET_KEYS`)."""
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
