"""``python -m ray_ladder.demo``: the ladder story on an embedded LocalCluster, end to end."""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from ray_ladder.demo.run import LIVE_CLUSTERS, DemoError, run_demo

DEFAULT_LADDER = Path(__file__).resolve().parents[2] / "examples" / "ladders" / "demo.yaml"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The demo's command line (``make demo`` uses the defaults)."""
    p = argparse.ArgumentParser(
        prog="python -m ray_ladder.demo",
        description="Serve digits through an h100 -> a100 -> cpu -> cache -> shed ladder on "
                    "a local Ray cluster, preempt the GPUs, bring one back, report.")
    p.add_argument("--ladder", type=Path, default=DEFAULT_LADDER, help="ladder YAML")
    p.add_argument("--out", type=Path, default=Path("demo-out"), help="output folder")
    p.add_argument("--rate", type=float, default=20.0, help="requests per second")
    p.add_argument("--serve-timeout", type=float, default=120.0,
                   help="seconds to wait for the top rung's first answer after deploying")
    p.add_argument("--climb-timeout", type=float, default=45.0,
                   help="seconds to wait for answers from the top rung after it returns")
    p.add_argument("--tail", type=float, default=5.0, help="seconds of traffic after the climb")
    p.add_argument("--deadline", type=float, default=420.0,
                   help="hard limit on the whole run (above the sum of the phase limits); past it "
                        "the cluster is torn down")
    p.add_argument("--verbose", action="store_true",
                   help="keep Ray's logs and notices on the terminal; tracebacks on failure")
    return p.parse_args(argv)


def _watchdog(deadline_s: float, console: Console) -> threading.Timer:
    """Past the deadline: say so, stop the cluster's processes and end this one.

    A Python timer needs the GIL; should a native call hang holding it, faulthandler's C
    thread dumps every thread's stack and exits 30 s later. Ray's processes are
    fate-shared with this one (``PR_SET_PDEATHSIG``), so they end with it.
    """
    faulthandler.dump_traceback_later(deadline_s + 30.0, exit=True)

    def fire() -> None:
        console.print(f"[bold red]demo failed: still running after its {deadline_s:.0f}s "
                      "deadline; stopping the cluster[/bold red]")
        try:
            for cluster in list(LIVE_CLUSTERS):
                cluster.shutdown()
        finally:
            os._exit(3)

    timer = threading.Timer(deadline_s, fire)
    timer.daemon = True
    timer.start()
    return timer


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo: 0 when the story ran and traffic climbed back, non-zero otherwise."""
    args = parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    console = Console()
    timer = _watchdog(args.deadline, console)
    try:
        return run_demo(args, console)
    except DemoError as err:
        console.print(f"[bold red]demo failed:[/bold red] {err}")
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted; the cluster was stopped[/yellow]")
        return 130
    except Exception as err:  # anything else: one clear line; the traceback with --verbose
        if args.verbose:
            console.print_exception()
        console.print(f"[bold red]demo failed:[/bold red] {type(err).__name__}: {err}")
        return 1
    finally:
        timer.cancel()
        faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    sys.exit(main())
