"""Which latency targets a request runs under (pure): the ladder's, replaced by the
operator's app and route overrides, narrowed (never widened) by the request.

A request narrows its targets with ``X-Ladder-Target-S: SECONDS`` (its answer, or its
first token for a stream) or by the read timeout the official OpenAI clients send
(``X-Stainless-Read-Timeout``: the client gives up when no byte comes that long, so it
bounds the answer, the first token and the gap between tokens).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ray_ladder.core.latency import LatencyTargets
from ray_ladder.core.spec import Ladder
from ray_ladder.serve import http

TARGET_HEADER = "X-Ladder-Target-S"
#: The read timeout (seconds) the official OpenAI Python client sends with each request.
CLIENT_TIMEOUT_HEADER = "X-Stainless-Read-Timeout"


def _targets(where: str, value: LatencyTargets | Mapping[str, Any]) -> LatencyTargets:
    if isinstance(value, LatencyTargets):
        return value
    try:
        return LatencyTargets.model_validate(dict(value))
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{where}.{field}: {first['msg']} (got {first.get('input')!r}); "
                         "targets take answer_s, ttft_s, inter_token_s (seconds > 0), "
                         "slow_after_s and late_moves") from None


def route_target_table(ladder: Ladder, app: LatencyTargets | Mapping[str, Any] | None,
                       routes: Mapping[str, LatencyTargets | Mapping[str, Any]] | None
                       ) -> dict[str, LatencyTargets]:
    """Path prefix (``""``: the whole app) -> the targets its requests run under.

    Raises:
        ValueError: a malformed target (names the field) or route prefix.

    Example:
        >>> lad = Ladder.from_dict({"name": "t", "policy": {"targets": {"answer_s": 1}},
        ...                         "rungs": [{"name": "cpu", "num_cpus": 1}]})
        >>> table = route_target_table(lad, None, {"/batch": {"answer_s": 30}})
        >>> table[""].answer_s, table["/batch"].answer_s
        (1.0, 30.0)
    """
    base = ladder.policy.targets or LatencyTargets()
    if app is not None:
        base = base.overridden(_targets("targets", app))
    table = {"": base}
    for prefix, value in (routes or {}).items():
        if not prefix.startswith("/") or prefix == "/":
            raise ValueError(f"route_targets {prefix!r}: a route is a path prefix like "
                             "'/batch' (the app's own targets are 'targets')")
        table[prefix.rstrip("/")] = base.overridden(_targets(f"route_targets[{prefix!r}]",
                                                             value))
    return table


def for_path(table: Mapping[str, LatencyTargets], path: str) -> LatencyTargets:
    """The targets of a request path (relative to the app): its longest prefix's.

    Example:
        >>> t = {"": LatencyTargets(answer_s=1.0), "/b": LatencyTargets(answer_s=9.0)}
        >>> for_path(t, "/b/v1/chat/completions").answer_s, for_path(t, "/").answer_s
        (9.0, 1.0)
    """
    best = ""
    for prefix in table:
        if prefix and (path == prefix or path.startswith(prefix + "/")) \
                and len(prefix) > len(best):
            best = prefix
    return table.get(best) or LatencyTargets()


def _seconds(headers: Mapping[str, str], name: str) -> float | None:
    raw = headers.get(name.lower())
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise http.HttpError(400, f"{name} must be a number of seconds > 0, got {raw!r}")
    return value


def request_targets(base: LatencyTargets, headers: Mapping[str, str]) -> LatencyTargets:
    """``base`` narrowed by the request's headers (a larger value changes nothing).

    Raises:
        http.HttpError: 400 for a value that is not a number of seconds > 0.

    Example:
        >>> request_targets(LatencyTargets(answer_s=2.0), {"x-ladder-target-s": "0.5"}).answer_s
        0.5
        >>> request_targets(LatencyTargets(answer_s=2.0), {"x-ladder-target-s": "9"}).answer_s
        2.0
    """
    own = _seconds(headers, TARGET_HEADER)
    client = _seconds(headers, CLIENT_TIMEOUT_HEADER)
    narrowed = base
    if own is not None:
        narrowed = narrowed.narrowed(LatencyTargets(answer_s=own, ttft_s=own))
    if client is not None:
        narrowed = narrowed.narrowed(LatencyTargets(answer_s=client, ttft_s=client,
                                                    inter_token_s=client))
    return narrowed
