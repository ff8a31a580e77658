"""The ladder's metrics in one table, exported through Ray's metrics pipeline.

Every part records through :func:`inc` and :func:`set_gauge`, which create the Ray metric
of a name the first time this process uses it (``ray.util.metrics``: each node's metrics
agent exports it for Prometheus as ``ray_<name>``, counters with ``_total``). Where Ray
is not initialized (unit tests, the simulator, the CLI) they do nothing.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ray_ladder.core.events import TRANSITION_CAUSES
from ray_ladder.core.exceptions import ATTEMPT_CAUSES


@dataclass(frozen=True)
class MetricSpec:
    """One metric: its Ray name, kind, labels and meaning.

    Attributes:
        name: The name given to Ray (``ladder_requests``).
        kind: ``counter`` or ``gauge``.
        labels: Its tag keys, in order (Ray adds ``SessionName``, ``NodeAddress``...).
        description: What one unit means.
        parts: Which parts record it (``serve``, ``task``, ``tune``, ``hook``).
    """

    name: str
    kind: Literal["counter", "gauge"]
    labels: tuple[str, ...]
    description: str
    parts: str

    @property
    def prometheus(self) -> str:
        """The name Prometheus shows.

        Example:
            >>> SPECS["ladder_requests"].prometheus
            'ray_ladder_requests_total'
        """
        return f"ray_{self.name}" + ("_total" if self.kind == "counter" else "")


_L, _P, _R = "ladder", "part", "rung"
#: Every metric of ray-ladder (docs/operating.md prints this table; a test pins it).
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("ladder_requests", "counter", (_L, _R),
               "Serve answers per rung; `exhausted`: a 503 with no rung left; the shed "
               "rung's name: a shed", "serve"),
    MetricSpec("ladder_calls", "counter", (_L, _R),
               "`@ladder_task` calls finished per rung; `exhausted`: LadderExhaustedError; "
               "`error`: the function's own error", "task"),
    MetricSpec("ladder_answers", "counter", (_L, _P),
               "Answers and finished calls, sheds and exhaustions included (the "
               "denominator of the quality share)", "serve, task"),
    MetricSpec("ladder_quality_points", "counter", (_L, _P),
               "Sum of the answering rung's `quality` over answers (0 for shed and "
               "exhausted): quality share = rate(this) / rate(ladder_answers)", "serve, task"),
    MetricSpec("ladder_current_rung", "gauge", (_L, _P),
               "Index of the rung in use (0 = best; -1 = none)", "serve, task, tune, hook"),
    MetricSpec("ladder_degraded_seconds", "gauge", (_L, _P),
               "Seconds below the best eligible rung in the current episode (0 on it)",
               "serve, task, tune"),
    MetricSpec("ladder_max_degraded_seconds", "gauge", (_L, _P),
               "The ladder's `policy.max_degraded_seconds` (set only when it has one)",
               "serve, task, tune"),
    MetricSpec("ladder_transitions", "counter", (_L, _P, "direction", "reason"),
               "Ladder moves; direction `down`/`up`/`none` (first pick); reason `first`, "
               "`lost`, `preemption_notice`, `slow`, `exhausted`, `returned`, `promoted`, "
               "`other`",
               "serve, task, tune, hook"),
    MetricSpec("ladder_alerts", "counter", (_L, _P),
               "`max_degraded_seconds` alerts (one per degraded episode)", "serve, task"),
    MetricSpec("ladder_cache_hits", "counter", (_L,),
               "Answers from the cache rung", "serve"),
    MetricSpec("ladder_sheds", "counter", (_L,),
               "Requests answered by the shed rung (503 with Retry-After)", "serve"),
    MetricSpec("ladder_exhausted", "counter", (_L, _P),
               "Requests or calls refused because every eligible rung was gone", "serve, task"),
    MetricSpec("ladder_attempt_failures", "counter", (_L, _P, _R, "reason"),
               "Failed attempts per rung; reason `timeout`, `rung_down`, `unobtainable`, "
               "`busy`, the error's class (Ray's, or a `fallback_on` one), or `other`",
               "serve, task"),
    MetricSpec("ladder_hedges", "counter", (_L, _R),
               "Requests copied to another rung because no replica of `rung` took them "
               "within `assign_timeout_s` (a hedge; the first answer wins)", "serve"),
    MetricSpec("ladder_spills", "counter", (_L, _R),
               "Requests passed over `rung` because it was expected to miss their latency "
               "target (its queue and service time); they went below", "serve"),
    MetricSpec("ladder_slow", "counter", (_L, _R),
               "Times `rung` was found slow: its replicas broke the ladder's latency "
               "target for `slow_after_s` (queue left out); the ladder fell off it",
               "serve"),
    MetricSpec("ladder_hook_role", "gauge", (_L, _R, "role"),
               "1 for the role the autoscaler hook gives the rung (`serving`, `warming`, "
               "`draining`, `released`, `none`), 0 for the others", "hook"),
    MetricSpec("ladder_launch_refusals", "counter", (_L, _R),
               "Node launches of a rung the autoscaler reported refused (stock-outs)",
               "hook"),
    MetricSpec("ladder_replica_hours", "counter", (_L, _P, _R),
               "Replica-hours per rung (Serve replicas running; task attempts and Tune "
               "trials in flight)", "serve, task, tune"),
    MetricSpec("ladder_cost", "counter", (_L, _P, _R),
               "Replica-hours x the rung's `cost_per_hour`", "serve, task, tune"),
    MetricSpec("ladder_team_units", "gauge", (_L, "team", _R, "state"),
               "Units of a shared rung per fleet team (`ladder` is the fleet's name); state "
               "`held`, `nominal`, `entitled`, `borrowed`, `lent`, `noticed` (under a "
               "reclaim notice), `wanted`", "fleet"),
    MetricSpec("ladder_team_reclaims", "counter", (_L, "team", _R),
               "Units reclaimed from a borrowing team (`team`) by notice, counted when "
               "the notice is sent", "fleet"),
    MetricSpec("ladder_team_budget_spent", "gauge", (_L, "team"),
               "Cost a team spent in its current budget window", "fleet"),
)
SPECS: dict[str, MetricSpec] = {m.name: m for m in METRICS}
ROLES = ("serving", "warming", "draining", "released", "none")

_made: dict[str, Any] = {}
_lock = threading.Lock()


def _metric(spec: MetricSpec) -> Any | None:
    if "ray" not in sys.modules:  # never import Ray just to find out
        return None
    import ray

    if not ray.is_initialized():
        return None
    metric = _made.get(spec.name)
    if metric is None:
        from ray.util import metrics

        with _lock:
            metric = _made.get(spec.name)
            if metric is None:
                cls = metrics.Counter if spec.kind == "counter" else metrics.Gauge
                metric = _made[spec.name] = cls(spec.name, spec.description,
                                                tag_keys=spec.labels)
    return metric


def _tags(spec: MetricSpec, tags: Mapping[str, Any]) -> dict[str, str]:
    if tuple(sorted(tags)) != tuple(sorted(spec.labels)):
        raise ValueError(f"{spec.name} takes labels {list(spec.labels)}, got {sorted(tags)}")
    return {k: str(v) for k, v in tags.items()}


def inc(name: str, value: float = 1.0, **tags: Any) -> None:
    """Add ``value`` to counter ``name`` (a name of :data:`METRICS`).

    Example:
        >>> inc("ladder_sheds", ladder="gpu")  # no Ray here: nothing happens
    """
    spec = SPECS[name]
    checked = _tags(spec, tags)
    if value <= 0:
        return
    metric = _metric(spec)
    if metric is not None:
        metric.inc(value, tags=checked)


def set_gauge(name: str, value: float, **tags: Any) -> None:
    """Set gauge ``name`` (a name of :data:`METRICS`).

    Example:
        >>> set_gauge("ladder_current_rung", 0, ladder="gpu", part="serve")
    """
    spec = SPECS[name]
    checked = _tags(spec, tags)
    metric = _metric(spec)
    if metric is not None:
        metric.set(value, tags=checked)


def transition_label(event: Mapping[str, Any]) -> str:
    """The ``reason`` label of ``ladder_transitions`` for a transition event (a dict of
    :meth:`TransitionEvent.to_dict`): its ``cause``, never its sentence. An event written
    before causes were data (read back from Ray's KV) has none: ``other``.

    Example:
        >>> transition_label({"reason": "h100 gone, reworded", "cause": "lost"})
        'lost'
        >>> transition_label({"reason": "h100 unobtainable"})  # an older event
        'other'
    """
    cause = event.get("cause")
    return cause if isinstance(cause, str) and cause in TRANSITION_CAUSES else "other"


def failure_label(cause: str, error: str | None = None) -> str:
    """The ``reason`` label of ``ladder_attempt_failures`` for a failed attempt's
    ``Attempt.cause`` and ``Attempt.error``: the error's class for ``failed`` (when
    known), else the cause (``other`` for one that is no :data:`AttemptCause`).

    Example:
        >>> failure_label("timeout")
        'timeout'
        >>> failure_label("failed", "NodeDiedError")
        'NodeDiedError'
        >>> failure_label("failed")
        'other'
    """
    if cause == "failed":
        return error or "other"
    return cause if cause in ATTEMPT_CAUSES else "other"
