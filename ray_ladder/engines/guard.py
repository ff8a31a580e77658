"""``python -m ray_ladder.engines.guard CMD ...``: run ``CMD`` in this process's group and
kill the whole group when the process that started the guard dies.

A vLLM server forks its engine core and workers, and none of them ends with its parent.
When a rung's replica dies, Ray kills the replica's direct children (this guard) with
SIGKILL, which nothing can answer; the server and its engine, the guard's children, would
stay behind with gigabytes of memory. So the guard also starts a *sentinel* in the group,
which Ray does not kill: it watches the starter's pid and, once that process is gone,
SIGKILLs every process of the group, itself included. The guard also asks for SIGTERM at
its parent's death (Linux) and answers it the same way, for a starter that dies alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from types import FrameType

PR_SET_PDEATHSIG = 1


def _kill_group(signum: int = 0, frame: FrameType | None = None) -> None:
    os.killpg(0, signal.SIGKILL)  # this process too: its job is done


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch(starter: int, every_s: float = 0.5) -> None:
    """The sentinel: wait for ``starter`` to be gone, then kill the group."""
    while _alive(starter):
        time.sleep(every_s)
    _kill_group()


def main() -> int:
    """Run the command; its exit status is the guard's."""
    if len(sys.argv) == 3 and sys.argv[1] == "--watch":
        watch(int(sys.argv[2]))
        return 0
    if len(sys.argv) < 2:
        print("usage: python -m ray_ladder.engines.guard CMD [ARG ...]", file=sys.stderr)
        return 2
    starter = os.getppid()
    signal.signal(signal.SIGTERM, _kill_group)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if starter == 1 or not _alive(starter):  # gone before the signal was asked for
        _kill_group()
    subprocess.Popen([sys.executable, "-m", "ray_ladder.engines.guard", "--watch",
                      str(starter)])
    return subprocess.call(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
