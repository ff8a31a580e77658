"""``python -m ray_ladder.demo --story teams``: the cluster, the story, the table, the PNG."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.markup import escape

from ray_ladder.demo.session import DemoError, Phases, serving
from ray_ladder.demo.teams.figures import summary, table, team_rows, write_summary
from ray_ladder.demo.teams.scenario import Mark, Options, Result, team_ladder, teams_cluster


def options(args: argparse.Namespace) -> Options:
    """The scenario's lengths from the command line."""
    return Options(borrowed_s=args.borrowed, horizon_s=args.horizon, tail_s=args.tail,
                   rate_hz=args.team_rate, grace_s=args.grace,
                   deploy_timeout_s=args.serve_timeout)


def verdict(res: Result) -> None:
    """:class:`DemoError` unless b lost nothing and a was served from its h100 units."""
    rows = team_rows(res)
    b = rows["b"]
    problems = []
    if b["failed_requests"] or b["tasks_lost"]:
        problems.append(f"team b lost {b['failed_requests']} requests and "
                        f"{b['tasks_lost']} task calls")
    if not rows["a"]["requests"].get("h100"):
        problems.append("team a was never served from h100")
    if not b["tasks"].get("l4") or not b["requests"].get("l4"):
        problems.append("team b never moved down to l4")
    if problems:
        raise DemoError("; ".join(problems) + " (see the table above)")


def run_teams_demo(args: argparse.Namespace, console: Console) -> int:
    """Start the cluster and Serve, play the teams story, print the table, write
    ``summary.json`` and ``timeline.png`` under ``--out``. Returns the exit code."""
    phase = Phases(console)
    opts = options(args)

    def said(m: Mark) -> None:
        console.print(f"[dim]{phase.elapsed:6.1f}s[/dim]  [bold]+{m.t:5.1f}s[/bold] "
                      f"{escape(m.label)}")

    from ray_ladder.demo.teams.script import run_scenario

    with serving(team_ladder("b"), out=args.out, verbose=args.verbose, console=console,
                 phase=phase, cluster=teams_cluster(connect=False)) as live:
        phase("story", "teams a (quota: both h100 units, idle) and b (quota: none) behind "
                       f"the fleet arbiter; b's grace {opts.grace_s:g}s; b's app deploys ...")
        res = run_scenario(live.url, fleet=True, opts=opts, on_mark=said)
        phase("report", "story over; per team:")
        write_outputs(console, args, res)
    verdict(res)
    return 0


def write_outputs(console: Console, args: argparse.Namespace, res: Result) -> dict[str, Any]:
    """Print the table and the figures; write the summary and the timeline."""
    from ray_ladder.demo.teams.plot import plot_teams

    data = summary(res)
    console.print(table(data["teams"]))
    f = data["figures"]
    console.print(f"a's load arrived at +{res.arrived_at:.1f}s; notice to b after "
                  f"{f['reclaim_notice_s']}s; b's requests on l4 after "
                  f"{f['borrower_moved_requests_s']}s, its tasks after "
                  f"{f['borrower_moved_tasks_s']}s; a served from h100 after "
                  f"{f['reclaim_to_lender_served_s']}s (b's grace {args.grace:g}s)")
    json_path = write_summary(data, args.out / "summary.json")
    png = plot_teams(res, args.out / "timeline.png")
    console.print(f"wrote {json_path} and {png}")
    return data

