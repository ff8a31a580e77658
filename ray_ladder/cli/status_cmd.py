"""`ray-ladder status`: every ladder in use on a running cluster, read-only."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import click
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ray_ladder.cluster.discovery import ClusterReader, ClusterUnreachable

#: Exit codes (docs/operating.md): 0 ladders found, 1 a cluster but no ladder in use,
#: 3 no Ray cluster at the address (2 is click's, a usage error).
EXIT_NO_LADDER = 1
EXIT_NO_CLUSTER = 3

ADDRESS = click.option(
    "--address", default="auto", show_default=True,
    help="GCS address host:port of the cluster (auto: RAY_ADDRESS, else the last "
         "`ray start` on this machine).")


def open_cluster(address: str) -> ClusterReader:
    """Connect read-only, or print why not and exit with ``EXIT_NO_CLUSTER``."""
    from ray_ladder.cluster.discovery import connect

    try:
        return connect(address)
    except ClusterUnreachable as err:
        click.echo(f"error: {err}", err=True)
        sys.stderr.flush()
        # A GCS client still waiting in Ray's C++ code must not hold the exit up.
        os._exit(EXIT_NO_CLUSTER)


def _fmt_s(value: Any) -> str:
    return "-" if value is None else f"{float(value):.1f} s"


def _event_line(e: dict[str, Any]) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(float(e.get("wall") or 0)))
    if e.get("kind") == "transition":
        what = f"{e.get('from') or '-'} -> {e.get('to') or 'none'}"
    else:
        what = f"{e.get('kind')} {e.get('to') or e.get('rung') or ''}".strip()
    return f"{when}  {what}: {e.get('reason', '')}"


def _title(user: dict[str, Any]) -> str:
    where = f"{user['part']} {user.get('source') or ''}".strip()
    current = user.get("current") or "none (exhausted)"
    title = f"ladder {user['ladder']} ({where}): on {current}"
    if user["part"] != "hook":
        title += f", degraded {_fmt_s(user.get('degraded_s'))}"
        limit = user.get("max_degraded_seconds")
        if limit is not None:
            fired = "FIRED" if user.get("alert_fired") else "not fired"
            title += f" (alert at {float(limit):g} s: {fired})"
    return title + f", updated {float(user.get('age_s') or 0):.1f} s ago"


def _why(rung: dict[str, Any]) -> dict[str, Any] | None:
    """Why an unobtainable rung is, where its observer knew (entries of older versions
    carry no ``why``)."""
    why = rung.get("why")
    return why if not rung["obtainable"] and isinstance(why, dict) else None


def _obtainable(rung: dict[str, Any], slow: dict[str, Any]) -> str:
    """The obtainable cell: ``yes``, ``slow``, ``no`` or ``no (<cause>)``."""
    if rung["obtainable"]:
        return "yes"
    if rung["name"] in slow:
        return "slow"
    why = _why(rung)
    return "no" if why is None else f"no ({str(why.get('cause', 'other')).replace('_', ' ')})"


def user_view(user: dict[str, Any]) -> Group:
    """The rich view of one ladder in use: a table per rung, then what differs and the
    last transitions."""
    table = Table()
    parts: list[Any] = [Text(_title(user), style="bold"), table]
    if user["part"] == "hook":
        for col in ("rung", "role", "status", "nodes"):
            table.add_column(col)
        for r in user["rungs"]:
            table.add_row(r["name"], str(r.get("role")), str(r.get("status")),
                          "-" if r.get("nodes") is None else str(r["nodes"]))
    else:
        for col in ("rung", "kind", "obtainable", "nodes", "replicas", "share 1m", "hook role"):
            table.add_column(col)
        slow = user.get("slow") or {}
        for r in user["rungs"]:
            mark = "*" if r["name"] == user.get("current") else ""
            share = r.get("share_1m")
            table.add_row(f"{r['name']}{mark}", r["kind"], _obtainable(r, slow),
                          "-" if r.get("nodes") is None else str(r["nodes"]),
                          "-" if r.get("replicas") is None else str(r["replicas"]),
                          "-" if share is None else f"{100 * share:.0f}% ({r['served_1m']})",
                          r.get("hook_role") or "-")
        for name, why in slow.items():
            parts.append(Text(f"{name} is slow: {why}"))
        for r in user["rungs"]:
            why = _why(r)
            if why is not None and why.get("reason") and r["name"] not in slow:
                parts.append(Text(f"{r['name']} is unobtainable: {why['reason']}"))
        unanswered = user.get("unanswered_1m") or {}
        if unanswered:
            parts.append(Text("not answered by a rung (1m): " + ", ".join(
                f"{k} {v}" for k, v in unanswered.items())))
        for c in user.get("by_constraints") or []:
            parts.append(Text(f"constraints {json.dumps(c['constraints'])}: on "
                              f"{c.get('current') or 'none'}, degraded "
                              f"{_fmt_s(c.get('degraded_s'))}"))
        for t in user.get("trials") or []:
            parts.append(Text(f"trial {t['trial']} ({t['status']}): {t.get('rung') or '-'}"))
    events = user.get("last_transitions") or []
    if events:
        parts.append(Text("last transitions:"))
        parts.extend(Text("  " + _event_line(e)) for e in events)
    return Group(*parts)


def teams_view(teams: list[dict[str, Any]]) -> Table:
    """Per team and shared rung: units held, noticed (being reclaimed), each part's share
    (the team ledger: ``name held``, ``-n`` when n of them are noticed), budget, and the
    grace restarts the team suffered as a lender (0 for steady work)."""
    table = Table(title="fleet teams (units per shared rung)")
    for column in ("team", "rung", "held", "reclaim notice", "parts", "budget",
                   "grace restarts"):
        table.add_column(column)
    for entry in teams:
        for rung, grant in sorted((entry.get("rungs") or {}).items()):
            noticed = grant.get("noticed", 0)
            notice = f"{noticed} by {_fmt_s((grant.get('deadline') or 0) - time.time())}" \
                if noticed else "-"
            table.add_row(str(entry.get("team")), rung, str(grant.get("held", 0)), notice,
                          _shares(grant.get("parts")), str(entry.get("budget", "ok")),
                          str(entry.get("grace_restarts", "-")))
    return table


def _shares(parts: dict[str, Any] | None) -> str:
    """``app 1, task:work 1-1``: each part's units (``-n``: n under the notice)."""
    return ", ".join(f"{name} {g.get('held', 0)}" + (f"-{g['noticed']}" if g.get("noticed")
                                                      else "")
                     for name, g in sorted((parts or {}).items())) or "-"


def report_view(report: dict[str, Any]) -> Group:
    """The whole report for people."""
    head = Text(f"cluster {report['address']}: {report['alive_nodes']} alive node(s), "
                f"{len(report['ladders'])} ladder(s) in use")
    teams = [teams_view(report["teams"])] if report.get("teams") else []
    return Group(head, *(user_view(u) for u in report["ladders"]), *teams)


@click.command()
@ADDRESS
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--watch", is_flag=True, help="Refresh until interrupted (Ctrl-C).")
@click.option("--interval", type=float, default=2.0, show_default=True,
              help="Seconds between refreshes with --watch.")
def status(address: str, as_json: bool, watch: bool, interval: float) -> None:
    """Show every ladder in use: rung, degraded time, capacity per rung, last moves.

    Finds Serve ladder apps, @ladder_task orchestrators of live drivers, Tune runs on a
    ladder and autoscaler hooks without configuration. Read-only: it joins no cluster
    (no driver, job or actor). Exit 0: found; 1: no ladder in use; 3: no cluster.
    """
    reader = open_cluster(address)
    if watch:
        _watch(reader, as_json, interval)
        return
    report = reader.report()
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        Console(width=max(Console().width, 120)).print(report_view(report))
    if not report["ladders"]:
        click.echo(f"no ladder in use on {reader.address} (no Serve ladder app, "
                   "@ladder_task driver, Tune run or autoscaler hook reported within "
                   "the last minute)", err=True)
        sys.exit(EXIT_NO_LADDER)


def _watch(reader: ClusterReader, as_json: bool, interval: float) -> None:
    from rich.live import Live

    try:
        if as_json:
            while True:
                click.echo(json.dumps(reader.report()))
                time.sleep(interval)
        with Live(report_view(reader.report()), refresh_per_second=4) as live:
            while True:
                time.sleep(interval)
                live.update(report_view(reader.report()))
    except KeyboardInterrupt:
        return
