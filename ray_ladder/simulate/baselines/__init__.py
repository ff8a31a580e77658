"""Named policies to replay beside the ladder: Ray native, GKE ComputeClass, Karpenter, LiteLLM.

Each is a small model of how that system places, falls and climbs, with parameters from
its documentation or measured behaviour (``docs/simulate.md`` cites each number). The
ladder itself (:class:`LadderPolicy`) runs the live :class:`~ray_ladder.Selector`.

    from ray_ladder.simulate.baselines import parse_policy
    parse_policy("karpenter:consolidation=on,ice_ttl=3m")
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable
from typing import Any

from ray_ladder.simulate.baselines.base import Baseline, Engine
from ray_ladder.simulate.baselines.context import PolicyContext
from ray_ladder.simulate.baselines.gke import GkeComputeClass
from ray_ladder.simulate.baselines.karpenter import Karpenter
from ray_ladder.simulate.baselines.ladder import LadderPolicy
from ray_ladder.simulate.baselines.litellm import LiteLLM
from ray_ladder.simulate.baselines.ray_native import RayNative
from ray_ladder.simulate.specs import parse_duration

POLICIES: dict[str, type[Baseline]] = {
    cls.name: cls for cls in (LadderPolicy, RayNative, GkeComputeClass, Karpenter, LiteLLM)
}
"""Every named policy, by name."""

ALL = ("ladder", "ray-native", "gke-computeclass",
       "gke-computeclass:when_unsatisfiable=ScaleUpAnyway", "karpenter", "litellm")
"""What ``--compare all`` replays: each policy with its defaults, GKE both ways."""

_ALIASES = {"h": "hysteresis"}
_TRUE, _FALSE = ("on", "true", "yes", "1"), ("off", "false", "no", "0")


def _value(policy: str, key: str, kind: Any, text: str) -> Any:
    kinds = set(typing.get_args(kind)) if isinstance(kind, types.UnionType) else {kind}
    kinds.discard(type(None))
    raw = text.strip()
    if bool in kinds:
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise ValueError(f"{policy}: {key} must be on or off, got {text!r}")
    if int in kinds:
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{policy}: {key} must be an integer, got {text!r}") from None
    if float in kinds:
        return parse_duration(raw) if key.endswith("_s") else float(raw)
    return raw


def parse_policy(spec: str | Baseline) -> Baseline:
    """Build a policy from ``NAME`` or ``NAME:key=value[,key=value...]``.

    Keys are the policy's fields, with or without their ``_s`` (durations take s, m, h,
    d); booleans are ``on``/``off``; ``h`` is short for the ladder's ``hysteresis``.

    Raises:
        ValueError: an unknown policy or key, or a bad value, naming the valid ones.

    Example:
        >>> parse_policy("karpenter:consolidation=on,ice_ttl=3m")
        Karpenter(ice_ttl_s=180.0, retry_s=11.0, start_s=10.0, consolidation=True, \
consolidate_after_s=15.0)
        >>> parse_policy("ladder:h=2").label
        'ladder (hysteresis=2)'
    """
    if isinstance(spec, Baseline):
        return spec
    name, _, args = spec.strip().partition(":")
    name = name.strip()
    cls = POLICIES.get(name)
    if cls is None:
        raise ValueError(f"unknown policy {name!r}; policies: {', '.join(POLICIES)} (or all)")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in args.split(","))):
        key, sep, text = part.partition("=")
        key = _ALIASES.get(key.strip(), key.strip())
        field = key if key in fields else f"{key}_s" if f"{key}_s" in fields else None
        if not sep or field is None:
            valid = ", ".join(f.removesuffix("_s") for f in fields)
            raise ValueError(f"{name}: bad argument {part!r}; keys: {valid}")
        kwargs[field] = _value(name, field, hints[field], text)
    return cls(**kwargs)


def parse_policies(specs: str | Baseline | Iterable[str | Baseline]) -> list[Baseline]:
    """Policies from specs: ``all`` expands to :data:`ALL`; commas separate policies.

    A comma-separated part with an ``=`` and no ``:`` continues the previous policy's
    options: ``"litellm,karpenter:consolidation=on,ice_ttl=1m,ladder"`` is three.

    Example:
        >>> [p.label for p in parse_policies(["ladder:h=2,start=5,litellm"])]
        ['ladder (hysteresis=2, start=5)', 'litellm']
    """
    items = [specs] if isinstance(specs, (str, Baseline)) else list(specs)
    out: list[Baseline] = []
    for item in items:
        if isinstance(item, Baseline):
            out.append(item)
            continue
        groups: list[str] = []
        for part in filter(None, (s.strip() for s in item.split(","))):
            if groups and "=" in part and ":" not in part:
                groups[-1] += "," + part
            else:
                groups.append(part)
        for group in groups:
            out += [parse_policy(s) for s in ALL] if group == "all" else [parse_policy(group)]
    return out


__all__ = [
    "ALL",
    "POLICIES",
    "Baseline",
    "Engine",
    "GkeComputeClass",
    "Karpenter",
    "LadderPolicy",
    "LiteLLM",
    "PolicyContext",
    "RayNative",
    "parse_policies",
    "parse_policy",
]
