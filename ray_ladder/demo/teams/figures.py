"""What a run of the teams scenario shows (pure): the per-team table, the figures the
bench prints, the summary the demo writes."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ray_ladder.demo.teams.scenario import (
    LOWER,
    SHARED,
    TEAMS,
    Request,
    Result,
    Sample,
    TaskCall,
)


def _first(times: Iterable[float]) -> float | None:
    return min(times, default=None)


def first_served(res: Result, team: str, rung: str, kind: str) -> float | None:
    """Seconds from a's arrival to ``team``'s first request (``kind="requests"``) or task
    call (``"tasks"``) sent since then and served on ``rung``; None: none was."""
    recs: Sequence[Request | TaskCall] = res.requests if kind == "requests" else res.tasks
    t = _first(r.t for r in recs if r.team == team and r.rung == rung and r.t >= res.arrived_at
               and (not isinstance(r, Request) or r.status == 200))
    return None if t is None else round(t - res.arrived_at, 3)


def whole_quota_in_use(res: Result, team: str = "a") -> float | None:
    """Seconds from a's arrival to the first moment ``team``'s own work holds both h100
    units at once (the story's nominal quota): its app answers from h100 (its replica
    holds one unit) while one of its task calls runs there (the other). Read from what
    answered, not from the arbiter's books, so a plain-Ray run is timed the same way;
    None: not within the run.

    Example:
        >>> res = Result("plain", arrived_at=1.0, horizon_s=9.0)
        >>> res.requests = [Request("a", 3.0, 200, "h100", answered=3.1)]
        >>> res.tasks = [TaskCall("a", 2.8, "h100", done=3.4)]
        >>> whole_quota_in_use(res)
        2.0
    """
    calls = [c for c in res.tasks if c.team == team and c.rung == SHARED and c.done is not None
             and c.done >= res.arrived_at]
    answers = [r for r in res.requests if r.team == team and r.rung == SHARED
               and r.status == 200 and r.answered is not None and r.answered >= res.arrived_at]
    both = [max(c.t, r.t, res.arrived_at) for c in calls for r in answers
            if c.done is not None and r.answered is not None
            and r.t <= c.done and c.t <= r.answered]
    return None if not both else round(min(both) - res.arrived_at, 3)


def failed_requests(records: Iterable[Request], team: str) -> int:
    """Requests of ``team`` not answered 200 (a 503 shed counts: nothing answered it)."""
    return sum(r.team == team and r.status != 200 for r in records)


def tasks_lost(calls: Iterable[TaskCall], team: str) -> int:
    """Task calls of ``team`` that returned no answer."""
    return sum(c.team == team and c.rung is None for c in calls)


def unit_seconds(samples: Sequence[Sample], team: str) -> float:
    """h100 unit-seconds ``team`` held, from the sampled grants (step between samples).

    Example:
        >>> s = [Sample(0.0, {"a": {"held": 2}}), Sample(1.5, {"a": {"held": 0}})]
        >>> unit_seconds(s, "a")
        3.0
    """
    total = 0.0
    for now, nxt in zip(samples, samples[1:], strict=False):
        total += now.teams.get(team, {}).get("held", 0) * (nxt.t - now.t)
    return round(total, 1)


def team_rows(res: Result) -> dict[str, dict[str, Any]]:
    """Per team: quota, held at the end, most borrowed and lent, unit-seconds held,
    answers and task calls per rung, failed requests and lost calls."""
    rows = {}
    for team in TEAMS:
        seen = [s.teams.get(team, {}) for s in res.samples]
        rows[team] = {
            "quota": max((s.get("nominal", 0) for s in seen), default=None),
            "held_end": seen[-1].get("held", 0) if seen else None,
            "borrowed_max": max((s.get("borrowed", 0) for s in seen), default=None),
            "lent_max": max((s.get("lent", 0) for s in seen), default=None),
            "noticed_max": max((s.get("noticed", 0) for s in seen), default=None),
            "h100_unit_s": unit_seconds(res.samples, team) if seen else None,
            "requests": dict(Counter(r.rung or "-" for r in res.requests
                                     if r.team == team and r.status == 200)),
            "tasks": dict(Counter(c.rung for c in res.tasks if c.team == team and c.rung)),
            "failed_requests": failed_requests(res.requests, team),
            "tasks_lost": tasks_lost(res.tasks, team)}
    return rows


def units_in_use(res: Result, sample: Sample, team: str) -> int:
    """h100 units ``team``'s work occupies at ``sample``: its app's running h100 replicas
    (read from its router then) and its task calls on h100 in flight then (sent, not yet
    answered: an upper bound of the attempt's own time there)."""
    calls = sum(c.team == team and c.rung == SHARED and c.done is not None
                and c.t <= sample.t <= c.done for c in res.tasks)
    return sample.replicas.get(team, 0) + calls


def over_grant_samples(res: Result) -> int:
    """Samples at which some team's work occupied more h100 units than the arbiter
    granted it then (goal 0: a team's parts together stay within its grant).

    Example:
        >>> res = Result("fleet", arrived_at=0.0, horizon_s=9.0)
        >>> res.samples = [Sample(1.0, {"b": {"held": 1}}, {"b": 1})]
        >>> res.tasks = [TaskCall("b", 0.8, "h100", done=1.3)]
        >>> over_grant_samples(res)
        1
    """
    return sum(any(units_in_use(res, s, team) > s.teams.get(team, {}).get("held", 0)
                   for team in s.teams) for s in res.samples)


def step_figures(res: Result) -> dict[str, Any]:
    """Per step of a's arrival: from the step to a's first work served on h100 (``app``:
    its first request answered there, from the app's arrival; ``tasks``: its first task
    call run there, from the tasks' arrival); the over-grant samples; the grace restarts."""
    tasks_at = res.arrived_at if res.tasks_at is None else res.tasks_at
    app = _first(r.t for r in res.requests if r.team == "a" and r.rung == SHARED
                 and r.status == 200 and r.t >= res.arrived_at)
    tasks = _first(c.t for c in res.tasks if c.team == "a" and c.rung == SHARED
                   and c.t >= tasks_at)
    return {"lender_first_top_answer_s": {
                "app": None if app is None else round(app - res.arrived_at, 3),
                "tasks": None if tasks is None else round(tasks - tasks_at, 3)},
            "units_in_use_over_grant_samples": over_grant_samples(res),
            "units_in_use_samples": len(res.samples),
            "grace_restarts": res.grace_restarts,
            "replica_start_s": res.replica_start_s}


def live_figures(res: Result) -> dict[str, Any]:
    """The bench's figures of a run with the arbiter."""
    notice = _first(s.t for s in res.samples if s.teams.get("b", {}).get("noticed", 0) > 0)
    moved = _first(s.t for s in res.samples if s.teams.get("a", {}).get("held", 0) >= 2
                   and s.t >= res.arrived_at)
    return {
        "reclaim_to_lender_served_s": first_served(res, "a", SHARED, "requests"),
        "lender_tasks_on_h100_s": first_served(res, "a", SHARED, "tasks"),
        "reclaim_notice_s": None if notice is None else round(notice - res.arrived_at, 3),
        "lender_holds_quota_s": None if moved is None else round(moved - res.arrived_at, 3),
        "lender_whole_quota_in_use_s": whole_quota_in_use(res),
        "borrower_moved_requests_s": first_served(res, "b", LOWER["b"], "requests"),
        "borrower_moved_tasks_s": first_served(res, "b", LOWER["b"], "tasks"),
        "borrower_failed_requests": failed_requests(res.requests, "b"),
        "borrower_requests": sum(r.team == "b" for r in res.requests),
        "borrower_tasks_lost": tasks_lost(res.tasks, "b"),
        "borrower_tasks": sum(c.team == "b" for c in res.tasks),
        **step_figures(res)}


def plain_figures(res: Result) -> dict[str, Any]:
    """The same scenario without the arbiter: how long a waits for its h100 units (its
    requests and its tasks both served there), capped at the horizon."""
    parts = {"requests": first_served(res, "a", SHARED, "requests"),
             "tasks": first_served(res, "a", SHARED, "tasks")}
    capped = any(v is None for v in parts.values())
    wait = res.horizon_s if capped else max(v for v in parts.values() if v is not None)
    return {
        "plain_ray_lender_wait_s": round(wait, 3),
        "plain_ray_lender_whole_quota_in_use_s": whole_quota_in_use(res),
        "plain_ray_lender_wait_at_horizon": capped,
        "plain_ray_horizon_s": res.horizon_s,
        "plain_ray_lender_requests_on_h100_s": parts["requests"],
        "plain_ray_lender_tasks_on_h100_s": parts["tasks"],
        "plain_ray_borrower_failed_requests": failed_requests(res.requests, "b"),
        "plain_ray_borrower_tasks_lost": tasks_lost(res.tasks, "b"),
        "plain_ray_borrower_requests_on_h100_after_arrival": sum(
            r.team == "b" and r.rung == SHARED and r.t >= res.arrived_at
            for r in res.requests)}


def summary(res: Result) -> dict[str, Any]:
    """The demo's ``summary.json``: the table's rows, the story's marks, the figures."""
    return {"mode": res.mode, "arrived_at_s": round(res.arrived_at, 3),
            "teams": team_rows(res), "figures": live_figures(res),
            "story": [{"t": m.t, "label": m.label} for m in res.marks]}


def write_summary(data: dict[str, Any], path: Path) -> Path:
    """Write ``data`` as indented JSON at ``path`` (creating its folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def table(rows: dict[str, dict[str, Any]]) -> Any:
    """The per-team rich table."""
    from rich import box
    from rich.table import Table

    t = Table(title="h100 units per team (held: at the end; borrowed, lent: most at once);\n"
                    "answers and task calls per rung", title_justify="left",
              box=box.SIMPLE_HEAVY, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for col in ("team", "quota", "held", "borrowed", "lent", "unit-s", "answers",
                "tasks", "failed", "lost"):
        t.add_column(col, no_wrap=True, min_width=len(col))
    for team, r in rows.items():
        t.add_row(team, str(r["quota"]), str(r["held_end"]), str(r["borrowed_max"]),
                  str(r["lent_max"]), str(r["h100_unit_s"]), _mix(r["requests"]),
                  _mix(r["tasks"]), str(r["failed_requests"]), str(r["tasks_lost"]))
    return t


def _mix(counts: dict[str, int]) -> str:
    return "\n".join(f"{k} {v}" for k, v in sorted(counts.items())) or "-"
