"""The tables `ray-ladder show` prints: a ladder's rungs, a fleet's shared rungs and teams."""

from __future__ import annotations

from rich.table import Table

from ray_ladder.core.fleet import Fleet, Team
from ray_ladder.core.spec import Ladder, Rung


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


def ladder_table(ladder: Ladder) -> Table:
    """A rich table of the rungs: order, kind, placement, quality, cost, tags (and capacity,
    training shape)."""
    table = Table(title=f"ladder {ladder.name}")
    # In a narrow or piped terminal rich would cut cells to "eu-cloud-h1…"; keep rung names
    # whole and fold the other cells so no name, resource or tag is lost.
    # The capacity column appears only where a rung says how it is bought (issue 19).
    bought = any(r.capacity is not None for r in ladder.rungs)
    trains = any(r.train is not None for r in ladder.rungs)  # likewise the training shape
    remote = bool(ladder.clusters)  # the cluster column, where the ladder names clusters
    moves = ladder.data is not None  # the work's cost with the data moved, where data is set
    for col in ("#", "rung", "kind", "placement", "quality", "cost/h", "tags") + (
            ("work cost/h",) if moves else ()) + (("cluster",) if remote else ()) + (
            ("capacity",) if bought else ()) + (("train",) if trains else ()):
        table.add_column(col, no_wrap=col in ("#", "rung", "kind"), overflow="fold")
    for i, r in enumerate(ladder.rungs):
        tags = ", ".join(f"{k}={v}" for k, v in r.tags.items())
        work = (f"{ladder.work_cost_per_hour(r.name):g}",) if moves else ()
        where = ((r.cluster or "(this one)") if r.is_compute else "-",) if remote else ()
        capacity = ((r.capacity.describe() if r.capacity else "on-demand" if r.is_compute
                     else "-"),) if bought else ()
        train = (_train_text(r),) if trains else ()
        table.add_row(str(i), r.name, r.kind, _placement_text(r), f"{r.quality:g}",
                      f"{r.cost_per_hour:g}", tags, *work, *where, *capacity, *train)
    return table


def clusters_table(ladder: Ladder) -> Table:
    """A rich table of the clusters a ladder's rungs may live on (``clusters:``)."""
    table = Table(title="clusters")
    for col in ("cluster", "address", "serve", "site", "jurisdiction", "poll/stale/lost s"):
        table.add_column(col, no_wrap=col == "cluster", overflow="fold")
    for name, c in ladder.clusters.items():
        table.add_row(name, c.address, c.serve or "-", c.site or "-", c.jurisdiction or "-",
                      f"{c.poll_interval_s:g}/{c.stale_s:g}/{c.lost_after_s:g}")
    return table


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


def fleet_rungs_table(fleet: Fleet) -> Table:
    """The shared rungs: one unit's resources, cloud or on-prem, cost, jurisdiction."""
    table = Table(title=f"fleet {fleet.fleet}: shared rungs")
    for col in ("rung", "unit", "bought", "cost/h", "jurisdiction"):
        table.add_column(col, no_wrap=col == "rung", overflow="fold")
    for name, rung in fleet.rungs.items():
        table.add_row(name, ", ".join(f"{k}={v:g}" for k, v in rung.resources.items()),
                      "cloud" if rung.cloud else "quota", f"{rung.cost_per_hour:g}",
                      rung.jurisdiction or "-")
    return table


def fleet_teams_table(fleet: Fleet) -> Table:
    """The teams: quota, borrowing and lending limits, cohort, weight, grace, budget."""
    table = Table(title=f"fleet {fleet.fleet}: teams")
    for col in ("team", "quota", "may borrow", "may lend", "cohort", "weight", "grace",
                "budget"):
        table.add_column(col, no_wrap=col == "team", overflow="fold")
    for t in fleet.teams:
        table.add_row(t.name, _units(t.quota, "none"), _units(t.borrowing_limit, "no limit"),
                      _units(t.lending_limit, "all idle"), t.cohort or "-", f"{t.weight:g}",
                      f"{t.reclaim_grace_s:g} s", _budget_text(t))
    return table
