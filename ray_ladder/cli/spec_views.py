"""The tables `ray-ladder show` prints: a ladder's rungs, a fleet's shared rungs and teams."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rich.console import Group, RenderableType

from ray_ladder.cli.table_fit import Col, fitted_table, listing
from ray_ladder.core.fleet import Fleet, Team
from ray_ladder.core.placement import standby_replicas
from ray_ladder.core.spec import Ladder, Rung

#: A ``params`` value longer than this is cut, with ``...``, in the list under the table.
PARAM_CHARS = 40


def _placement_text(rung: Rung) -> str:
    if not rung.is_compute:
        return "-"
    parts = [f"{k}={v:g}" for k, v in rung.resources.items()]
    for key in ("num_gpus", "num_cpus"):
        value = getattr(rung, key)
        if value is not None:
            parts.append(f"{key}={value:g}")
    if rung.accelerator_type:
        parts.append(f"accelerator_type={rung.accelerator_type}")
    parts += [f"label {k}={v}" for k, v in rung.label_selector.items()]
    return ", ".join(parts)


def _train_text(rung: Rung) -> str:
    """``4 x (ladder/h100=2)``: the gang a Ray Train run puts on the rung."""
    if rung.train is None:
        return "-"
    each = rung.train.resources_per_worker
    per = ", ".join(f"{k}={v:g}" for k, v in each.items()) if each else _placement_text(rung)
    return f"{rung.train.workers} x ({per})"


def _params_text(params: Mapping[str, Any], limit: int = PARAM_CHARS) -> str:
    """``model=llama-3-70b, dtype=bf16``: each value in JSON (strings bare), cut to
    ``limit`` characters with ``...``."""
    parts = []
    for key, value in params.items():
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"),
                                                               default=str)
        parts.append(f"{key}={text if len(text) <= limit else text[:limit - 3] + '...'}")
    return ", ".join(parts)


def _optional_columns(ladder: Ladder) -> list[Col]:
    """The columns only some ladders have, each where a rung sets what it shows: standby
    replicas, tags, the work's cost with the data moved, the cluster, how capacity is
    bought (issue 19) and the training shape. ``spill``: the first to move under the
    table of a narrow terminal are the longest and least read."""
    rungs = ladder.rungs
    cols = []
    if any(r.standby_replicas is not None for r in rungs):
        cols.append(Col("standby", tuple(str(standby_replicas(ladder, r)) if r.is_compute
                                         else "-" for r in rungs), whole=True, spill=5))
    if any(r.tags for r in rungs):
        cols.append(Col("tags", tuple(", ".join(f"{k}={v}" for k, v in r.tags.items())
                                      for r in rungs), spill=0))
    if ladder.data is not None:
        cols.append(Col("work cost/h", tuple(f"{ladder.work_cost_per_hour(r.name):g}"
                                             for r in rungs), whole=True, spill=3))
    if ladder.clusters:
        cols.append(Col("cluster", tuple((r.cluster or "(this one)") if r.is_compute else "-"
                                         for r in rungs), whole=True, spill=4))
    if any(r.capacity is not None for r in rungs):
        cols.append(Col("capacity", tuple(
            r.capacity.describe() if r.capacity else "on-demand" if r.is_compute else "-"
            for r in rungs), spill=2))
    if any(r.train is not None for r in rungs):
        cols.append(Col("train", tuple(map(_train_text, rungs)), spill=1))
    return cols


def ladder_table(ladder: Ladder, width: int = 120) -> RenderableType:
    """A table of the rungs no wider than ``width``: order, name, kind, placement, quality,
    cost (and standby replicas, tags, work cost, cluster, capacity, training shape where
    a rung sets them), then each rung's ``params``.

    Every header stays on one line and rung names stay whole; other cells fold rather than
    being cut to "eu-cloud-h1…". In a narrow terminal the optional columns, then ``#``,
    move under the table as a list by rung.
    """
    rungs = ladder.rungs
    names = tuple(r.name for r in rungs)
    cols = [Col("#", tuple(map(str, range(len(rungs)))), whole=True, spill=9, listed=False),
            Col("rung", names, whole=True),
            Col("kind", tuple(r.kind for r in rungs), whole=True),
            Col("placement", tuple(map(_placement_text, rungs))),
            Col("quality", tuple(f"{r.quality:g}" for r in rungs), whole=True),
            Col("cost/h", tuple(f"{r.cost_per_hour:g}" for r in rungs), whole=True),
            *_optional_columns(ladder)]
    table = fitted_table(f"ladder {ladder.name}", names, cols, width)
    if not any(r.params for r in rungs):
        return table
    return Group(table, listing("params", names, [_params_text(r.params) for r in rungs]))


def clusters_table(ladder: Ladder, width: int = 120) -> RenderableType:
    """A table of the clusters a ladder's rungs may live on (``clusters:``)."""
    clusters = ladder.clusters.values()
    names = tuple(ladder.clusters)
    cols = [Col("cluster", names, whole=True),
            Col("address", tuple(c.address for c in clusters)),
            Col("serve", tuple(c.serve or "-" for c in clusters), spill=3),
            Col("site", tuple(c.site or "-" for c in clusters), spill=2),
            Col("jurisdiction", tuple(c.jurisdiction or "-" for c in clusters), spill=1),
            Col("poll/stale/lost s", tuple(f"{c.poll_interval_s:g}/{c.stale_s:g}/"
                                           f"{c.lost_after_s:g}" for c in clusters), spill=0)]
    return fitted_table("clusters", names, cols, width)


def data_line(ladder: Ladder) -> str | None:
    """One line on the ladder's ``data:`` (where it lives, may go, how much work reads)."""
    d = ladder.data
    if d is None:
        return None
    parts = [f"data {d.name or '(unnamed)'}:", f"region={d.region or '-'}",
             f"read_gb_per_hour={d.read_gb_per_hour:g}"]
    if d.stays is not None:
        parts.append(f"stays={','.join(d.stays)}")
    if d.jurisdiction is not None:
        parts.append(f"jurisdiction={d.jurisdiction}")
    return " ".join(parts)


def _units(table: dict[str, int] | None, unset: str) -> str:
    if table is None:
        return unset
    return ", ".join(f"{k}={v}" for k, v in table.items()) or "none"


def _budget_text(team: Team) -> str:
    b = team.budget
    if b is None:
        return "-"
    return f"{b.max_cost:g} per {b.window_s:g} s, then {b.on_exhausted}"


def fleet_rungs_table(fleet: Fleet, width: int = 120) -> RenderableType:
    """The shared rungs: one unit's resources, cloud or on-prem, cost, jurisdiction."""
    rungs = fleet.rungs.values()
    names = tuple(fleet.rungs)
    cols = [Col("rung", names, whole=True),
            Col("unit", tuple(", ".join(f"{k}={v:g}" for k, v in r.resources.items())
                              for r in rungs)),
            Col("bought", tuple("cloud" if r.cloud else "quota" for r in rungs), spill=1),
            Col("cost/h", tuple(f"{r.cost_per_hour:g}" for r in rungs), whole=True),
            Col("jurisdiction", tuple(r.jurisdiction or "-" for r in rungs), spill=0)]
    return fitted_table(f"fleet {fleet.fleet}: shared rungs", names, cols, width)


def fleet_teams_table(fleet: Fleet, width: int = 120) -> RenderableType:
    """The teams: quota, borrowing and lending limits, cohort, weight, grace, budget."""
    teams = fleet.teams
    names = tuple(t.name for t in teams)
    cols = [Col("team", names, whole=True),
            Col("quota", tuple(_units(t.quota, "none") for t in teams)),
            Col("may borrow", tuple(_units(t.borrowing_limit, "no limit") for t in teams),
                spill=4),
            Col("may lend", tuple(_units(t.lending_limit, "all idle") for t in teams),
                spill=3),
            Col("cohort", tuple(t.cohort or "-" for t in teams), whole=True, spill=5),
            Col("weight", tuple(f"{t.weight:g}" for t in teams), whole=True, spill=2),
            Col("grace", tuple(f"{t.reclaim_grace_s:g} s" for t in teams), whole=True,
                spill=1),
            Col("budget", tuple(map(_budget_text, teams)), spill=0)]
    return fitted_table(f"fleet {fleet.fleet}: teams", names, cols, width)
