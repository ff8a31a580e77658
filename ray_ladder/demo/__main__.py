"""``python -m ray_ladder.demo``: the ladder story on an embedded LocalCluster, end to end.

Three stories: ``llm`` (the default, what ``make demo`` tells) streams chat answers through
an n-gram model ladder while the top node is preempted mid-generation and comes back;
``digits`` serves digit classifiers through two preemptions and a return; ``teams`` has
two teams share two h100 units behind the fleet arbiter (borrow, reclaim notice, move).
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib.util
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ray_ladder._lazy import MissingExtraError, require_modules
from ray_ladder.demo.session import LIVE_CLUSTERS, DemoError
from ray_ladder.ladders import ladder_path

# Package data (ray_ladder/ladders/), so an installed wheel finds them as a checkout does.
DEFAULT_LADDER = ladder_path("demo")  # the digits story's
LLM_LADDER = ladder_path("llm")
VLLM_LADDER = ladder_path("vllm")
STORIES = ("llm", "digits", "teams", "vllm")
#: The vllm story's limits: each engine takes about a minute to load on 2 cores.
VLLM_DEFAULTS = {"serve_timeout": 420.0, "climb_timeout": 240.0, "deadline": 900.0,
                 "clients": 12, "max_tokens": 400, "kill_at": 15.0, "back_at": 25.0}
#: What the stories import (Ray Serve's HTTP stack, the load clients, the models, the
#: plots): checked before a cluster starts, so a missing one names the demo extra at once.
NEEDS = ("fastapi", "starlette", "uvicorn", "httpx", "matplotlib", "sklearn", "threadpoolctl")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The demo's command line (``make demo`` uses the defaults: the LLM story)."""
    p = argparse.ArgumentParser(
        prog="python -m ray_ladder.demo",
        description="A ladder losing its GPUs and climbing back, on a local Ray cluster. "
                    "llm (default): chat clients stream through an h100 -> a100 -> cpu -> shed "
                    "ladder of n-gram models while the h100 node is preempted mid-generation "
                    "and returns. digits: digit classifiers behind h100 -> a100 -> cpu -> "
                    "cache -> shed through two preemptions and a return. teams: team b "
                    "borrows team a's idle h100 units, a's load arrives in two steps, b "
                    "moves one part down its ladder at each notice, a is served from h100. "
                    "vllm: the llm story on real vLLM engines (make engine first).")
    p.add_argument("--story", choices=STORIES, default="llm", help="which story (default: llm)")
    p.add_argument("--ladder", type=Path, default=None,
                   help=f"ladder YAML (default: the shipped {LLM_LADDER.name} for llm, "
                        f"{DEFAULT_LADDER.name} for digits, in {LLM_LADDER.parent})")
    p.add_argument("--out", type=Path, default=Path("demo-out"), help="output folder")
    p.add_argument("--serve-timeout", type=float, default=120.0,
                   help="seconds to wait for the top rung's first answer after deploying")
    p.add_argument("--climb-timeout", type=float, default=45.0,
                   help="seconds to wait for answers from the top rung after it returns")
    p.add_argument("--tail", type=float, default=None,
                   help="seconds of traffic after the climb (default: 10 for llm, so most "
                        "clients start a stream on the top rung again; 5 for digits; 2 "
                        "for teams, after the last move)")
    p.add_argument("--deadline", type=float, default=420.0,
                   help="hard limit on the whole run (above the sum of the phase limits); past it "
                        "the cluster is torn down")
    p.add_argument("--verbose", action="store_true",
                   help="keep Ray's logs and notices on the terminal; tracebacks on failure")
    llm = p.add_argument_group("llm story")
    llm.add_argument("--clients", type=int, default=20, help="concurrent chat clients")
    llm.add_argument("--max-tokens", type=int, default=96, help="tokens per answer")
    llm.add_argument("--kill-at", type=float, default=12.0,
                     help="seconds after traffic starts: SIGKILL the top rung's node")
    llm.add_argument("--back-at", type=float, default=24.0,
                     help="seconds after traffic starts: a new top-rung node joins")
    llm.add_argument("--drain-timeout", type=float, default=30.0,
                     help="seconds the open streams get to finish after the story")
    digits = p.add_argument_group("digits story")
    digits.add_argument("--rate", type=float, default=20.0, help="requests per second")
    teams = p.add_argument_group("teams story")
    teams.add_argument("--team-rate", type=float, default=5.0,
                       help="requests per second of each team's load")
    teams.add_argument("--grace", type=float, default=4.0,
                       help="team b's reclaim grace (seconds)")
    teams.add_argument("--borrowed", type=float, default=3.0,
                       help="seconds b runs on a's units before a's load arrives")
    teams.add_argument("--horizon", type=float, default=60.0,
                       help="longest wait for the moves after a's load arrives")
    first, _ = p.parse_known_args(argv)
    if first.story == "vllm":  # the engine story's defaults, where the user sets nothing
        p.set_defaults(**VLLM_DEFAULTS)
    args = p.parse_args(argv)
    if args.ladder is None:
        args.ladder = {"llm": LLM_LADDER, "vllm": VLLM_LADDER}.get(args.story, DEFAULT_LADDER)
    if args.tail is None:
        args.tail = {"llm": 10.0, "vllm": 10.0, "digits": 5.0}.get(args.story, 2.0)
    if args.clients < 1 or args.max_tokens < 1:
        p.error("--clients and --max-tokens must be >= 1")
    return args


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
    try:
        require_modules("demo", "python -m ray_ladder.demo", NEEDS)
    except MissingExtraError as err:
        print(f"demo failed: {err}", file=sys.stderr)
        return 1
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    console = Console()
    timer = _watchdog(args.deadline, console)
    try:
        if args.story == "digits":
            from ray_ladder.demo.run import run_demo

            return run_demo(args, console)
        if args.story == "teams":
            from ray_ladder.demo.teams.run import run_teams_demo

            return run_teams_demo(args, console)
        if args.story == "vllm" and importlib.util.find_spec("vllm") is None:
            raise DemoError("the vllm story runs real vLLM engines, which are not installed: "
                            "make engine (python -m ray_ladder.engines.install)")
        from ray_ladder.demo.llm.run import run_llm_demo

        return run_llm_demo(args, console)
    except DemoError as err:
        console.print(f"[bold red]demo failed:[/bold red] {escape(str(err))}")
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted; the cluster was stopped[/yellow]")
        return 130
    except Exception as err:  # anything else: one clear line; the traceback with --verbose
        if args.verbose:
            console.print_exception()
        # escape: "pip install 'ray-ladder[plots]'" is not markup
        console.print(f"[bold red]demo failed:[/bold red] {type(err).__name__}: "
                      f"{escape(str(err))}")
        return 1
    finally:
        timer.cancel()
        faulthandler.cancel_dump_traceback_later()


if __name__ == "__main__":
    sys.exit(main())
