"""`ray-ladder events`: the transitions and alerts the cluster kept, after the fact."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import click

from ray_ladder.cli.status_cmd import ADDRESS, open_cluster

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """Seconds in ``30s``, ``10m``, ``2h``, ``1d`` or a plain number of seconds.

    Example:
        >>> parse_duration("10m"), parse_duration("90")
        (600.0, 90.0)
    """
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None:
        raise click.BadParameter(f"{text!r}: write a duration such as 30s, 10m, 2h or 1d")
    return float(match.group(1)) * _UNITS.get(match.group(2) or "s", 1.0)


def event_line(e: dict[str, Any]) -> str:
    """One event for people: time, ladder, who saw it, what moved and why.

    Example:
        >>> event_line({"wall": 0.0, "ladder": "gpu", "part": "serve", "source": "app",
        ...             "kind": "transition", "from": "h100", "to": "a100",
        ...             "direction": "down", "reason": "h100 unobtainable"})[19:]
        '  gpu  serve app  transition h100 -> a100 (down): h100 unobtainable'
    """
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(e.get("wall") or 0)))
    who = f"{e.get('part', '?')} {e.get('source') or ''}".strip()
    kind = e.get("kind", "?")
    if kind == "transition":
        what = f"{e.get('from') or '-'} -> {e.get('to') or 'none'}"
        if e.get("direction"):
            what += f" ({e['direction']})"
    else:
        what = str(e.get("rung") or e.get("to") or "")
    return f"{when}  {e.get('ladder')}  {who}  {kind} {what}: {e.get('reason', '')}"


@click.command()
@ADDRESS
@click.option("--ladder", "ladder_name", default=None, help="Only this ladder.")
@click.option("--since", default=None, metavar="DURATION",
              help="Only events of the last DURATION (30s, 10m, 2h, 1d).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events (Ctrl-C stops).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--interval", type=float, default=1.0, show_default=True,
              help="Seconds between reads with --follow.")
def events(address: str, ladder_name: str | None, since: str | None, follow: bool,
           as_json: bool, interval: float) -> None:
    """Print the ladder events the cluster kept (transitions, alerts, hook steps).

    Every part (Serve router, @ladder_task orchestrator, Tune scheduler, autoscaler hook)
    records them in the cluster's internal KV, so they outlive the process that saw them.
    """
    window = parse_duration(since) if since else None  # a bad value fails before connecting
    reader = open_cluster(address)
    start = time.time() - window if window is not None else None
    seen: set[str] = set()
    try:
        while True:
            for e in reader.events(ladder=ladder_name, since=start):
                key = str(e.get("id"))
                if key in seen:
                    continue
                seen.add(key)
                click.echo(json.dumps(e) if as_json else event_line(e))
            if not follow:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return
