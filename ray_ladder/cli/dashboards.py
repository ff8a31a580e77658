"""The Grafana dashboard and the Prometheus alerting rules, built from one panel table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

#: Grafana's dashboard variable for the ladder (``.+`` in tests and plain Prometheus).
LADDER = '$ladder'
SEL = f'ladder=~"{LADDER}"'


@dataclass(frozen=True)
class Panel:
    """One dashboard panel: a title, PromQL targets (legend per target), a unit."""

    title: str
    targets: tuple[tuple[str, str], ...]
    unit: str = "short"
    description: str = ""


PANELS: tuple[Panel, ...] = (
    Panel("Rung in use (0 = best, -1 = none)", (
        (f"max by (ladder, part) (ray_ladder_current_rung{{{SEL}}})", "{{ladder}} {{part}}"),
    ), description="Index of the rung each part of each ladder is on."),
    Panel("Degraded seconds vs max_degraded_seconds", (
        (f"max by (ladder, part) (ray_ladder_degraded_seconds{{{SEL}}})",
         "{{ladder}} {{part}} degraded"),
        (f"max by (ladder, part) (ray_ladder_max_degraded_seconds{{{SEL}}})",
         "{{ladder}} {{part}} limit"),
    ), unit="s"),
    Panel("Serve answers per rung", (
        (f"sum by (ladder, rung) (rate(ray_ladder_requests_total{{{SEL}}}[1m]))",
         "{{ladder}} {{rung}}"),
    ), unit="reqps"),
    Panel("Share of Serve traffic per rung", (
        (f"sum by (ladder, rung) (rate(ray_ladder_requests_total{{{SEL}}}[5m])) "
         f"/ ignoring (rung) group_left "
         f"sum by (ladder) (rate(ray_ladder_requests_total{{{SEL}}}[5m]))",
         "{{ladder}} {{rung}}"),
    ), unit="percentunit"),
    Panel("@ladder_task calls per rung", (
        (f"sum by (ladder, rung) (rate(ray_ladder_calls_total{{{SEL}}}[1m]))",
         "{{ladder}} {{rung}}"),
    ), unit="ops"),
    Panel("Transitions by direction and reason", (
        (f"sum by (ladder, part, direction, reason) "
         f"(increase(ray_ladder_transitions_total{{{SEL}}}[5m]))",
         "{{ladder}} {{part}} {{direction}} {{reason}}"),
    )),
    Panel("max_degraded_seconds alerts", (
        (f"sum by (ladder, part) (increase(ray_ladder_alerts_total{{{SEL}}}[1h]))",
         "{{ladder}} {{part}}"),
    )),
    Panel("Cache hits, sheds, exhausted", (
        (f"sum by (ladder) (rate(ray_ladder_cache_hits_total{{{SEL}}}[1m]))",
         "{{ladder}} cache hits"),
        (f"sum by (ladder) (rate(ray_ladder_sheds_total{{{SEL}}}[1m]))", "{{ladder}} sheds"),
        (f"sum by (ladder, part) (rate(ray_ladder_exhausted_total{{{SEL}}}[1m]))",
         "{{ladder}} {{part}} exhausted"),
    ), unit="ops"),
    Panel("Failed attempts by rung and reason", (
        (f"sum by (ladder, part, rung, reason) "
         f"(rate(ray_ladder_attempt_failures_total{{{SEL}}}[5m]))",
         "{{ladder}} {{part}} {{rung}} {{reason}}"),
    ), unit="ops"),
    Panel("Hedged requests by the rung that was slow to take them", (
        (f"sum by (ladder, rung) (rate(ray_ladder_hedges_total{{{SEL}}}[5m]))",
         "{{ladder}} {{rung}}"),
    ), unit="ops", description="Copies sent to the next rung after assign_timeout_s; "
       "with a preemption notice acted on, a reclaim adds none."),
    Panel("Spilled requests and slow rungs (latency targets)", (
        (f"sum by (ladder, rung) (rate(ray_ladder_spills_total{{{SEL}}}[5m]))",
         "{{ladder}} {{rung}} spilled"),
        (f"sum by (ladder, rung) (increase(ray_ladder_slow_total{{{SEL}}}[1h]))",
         "{{ladder}} {{rung}} found slow"),
    ), unit="ops", description="Requests passed over a rung expected to miss their "
       "target (they ran below), and times a rung was found slow (docs/serve.md)."),
    Panel("Autoscaler hook: role per rung", (
        (f"max by (ladder, rung, role) (ray_ladder_hook_role{{{SEL}}}) == 1",
         "{{ladder}} {{rung}} {{role}}"),
    )),
    Panel("Autoscaler hook: launches refused (stock-outs)", (
        (f"sum by (ladder, rung) (increase(ray_ladder_launch_refusals_total{{{SEL}}}[1h]))",
         "{{ladder}} {{rung}}"),
    )),
    Panel("Replicas running per rung (replica-hours per hour)", (
        (f"sum by (ladder, part, rung) "
         f"(rate(ray_ladder_replica_hours_total{{{SEL}}}[5m])) * 3600",
         "{{ladder}} {{part}} {{rung}}"),
    )),
    Panel("Cost per hour per rung (replica-hours x cost_per_hour)", (
        (f"sum by (ladder, rung) (rate(ray_ladder_cost_total{{{SEL}}}[5m])) * 3600",
         "{{ladder}} {{rung}}"),
    ), description="What the ladder spends now; a fall to a cheaper rung shows as a drop."),
    Panel("Quality-weighted share of answers", (
        (f"sum by (ladder) (rate(ray_ladder_quality_points_total{{{SEL}}}[5m])) "
         f"/ sum by (ladder) (rate(ray_ladder_answers_total{{{SEL}}}[5m]))", "{{ladder}}"),
    ), unit="percentunit", description="1 = every answer from a quality-1 rung; sheds "
       "and exhausted answers count 0. What a fall cost in quality."),
    Panel("Fleet teams: units held vs nominal quota", (
        (f'max by (team, rung, state) (ray_ladder_team_units{{{SEL}, '
         f'state=~"held|nominal|noticed"}})', "{{team}} {{rung}} {{state}}"),
        (f"sum by (team) (increase(ray_ladder_team_reclaims_total{{{SEL}}}[5m]))",
         "{{team}} reclaimed (5m)"),
        (f"max by (team) (ray_ladder_team_budget_spent{{{SEL}}})", "{{team}} spent"),
    ), description="Per team: what it holds of each shared rung, its nominal quota, units "
       "under a reclaim notice, reclaims from it, and its budget spent (docs/teams.md)."),
)

#: The alerting rules: (name, PromQL, for, severity, summary).
RULES: tuple[tuple[str, str, str, str, str], ...] = (
    ("LadderDegradedTooLong",
     "max by (ladder, part) (ray_ladder_degraded_seconds) > on (ladder, part) "
     "max by (ladder, part) (ray_ladder_max_degraded_seconds)", "0s", "warning",
     "ladder {{ $labels.ladder }} ({{ $labels.part }}) has been below its best eligible "
     "rung for {{ $value | humanizeDuration }}, longer than its max_degraded_seconds"),
    ("LadderExhausted",
     "sum by (ladder) (increase(ray_ladder_exhausted_total[2m])) > 0 "
     "or sum by (ladder) (increase(ray_ladder_sheds_total[2m])) > 0", "0s", "critical",
     "ladder {{ $labels.ladder }} turned work away in the last 2 minutes: every eligible "
     "compute rung was gone (shed or LadderExhaustedError)"),
)


def expressions(*, ladder: str = ".+") -> list[str]:
    """Every PromQL expression of the dashboard and the rules (``$ladder`` filled in).

    Example:
        >>> all("ray_ladder_" in e for e in expressions())
        True
    """
    exprs = [expr.replace(LADDER, ladder) for p in PANELS for expr, _ in p.targets]
    return exprs + [expr for _, expr, *_ in RULES]


def grafana_dashboard() -> dict[str, Any]:
    """The Grafana dashboard (JSON model, Prometheus data source chosen on import).

    Example:
        >>> grafana_dashboard()["title"]
        'ray-ladder'
    """
    source = {"type": "prometheus", "uid": "${datasource}"}
    panels = []
    for i, panel in enumerate(PANELS):
        panels.append({
            "id": i + 1, "type": "timeseries", "title": panel.title,
            "description": panel.description, "datasource": source,
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
            "targets": [{"refId": chr(ord("A") + j), "datasource": source, "expr": expr,
                         "legendFormat": legend}
                        for j, (expr, legend) in enumerate(panel.targets)],
        })
    return {
        "title": "ray-ladder", "uid": "ray-ladder", "schemaVersion": 39, "version": 1,
        "tags": ["ray", "ray-ladder"], "timezone": "browser", "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus",
             "label": "Prometheus"},
            {"name": "ladder", "type": "query", "datasource": source, "label": "ladder",
             "query": {"query": "label_values(ray_ladder_current_rung, ladder)",
                       "refId": "ladders"},
             "definition": "label_values(ray_ladder_current_rung, ladder)",
             "includeAll": True, "multi": True, "allValue": ".+", "refresh": 2,
             "current": {"text": "All", "value": "$__all"}},
        ]},
        "panels": panels,
    }


def alert_rules() -> str:
    """The Prometheus alerting-rule file (YAML; ``promtool check rules`` passes).

    Example:
        >>> "LadderDegradedTooLong" in alert_rules()
        True
    """
    rules = [{"alert": name, "expr": expr, "for": duration,
              "labels": {"severity": severity},
              "annotations": {"summary": summary}}
             for name, expr, duration, severity, summary in RULES]
    doc = {"groups": [{"name": "ray-ladder", "rules": rules}]}
    return "# ray-ladder alerts (`ray-ladder grafana --rules`); see docs/operating.md\n" + \
        yaml.safe_dump(doc, sort_keys=False, width=100)
