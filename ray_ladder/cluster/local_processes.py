"""The processes of a local Ray node: kill a node's whole tree at once (a preemption), and
start a node again when Ray's own start-up gives up on a CPU-starved machine.

Used by :class:`ray_ladder.testing.LocalCluster`; it knows processes, not ladders.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psutil  # a dependency of Ray

from ray_ladder.cluster import ray_private

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How many times a node's start is tried. Ray waits a fixed time for a new node's parts
#: (the raylet gives its dashboard agent about 15 s to write its port file and then
#: aborts; ``Node`` waits 30 s for the raylet to register); neither wait can be set, and
#: on a machine whose CPUs another Ray workload holds, a healthy start can miss them.
START_ATTEMPTS = 3
#: Ray starts each process of a node with ``subprocess.Popen(preexec_fn=...)``: Python code
#: that runs in the forked child before its exec. Forked from a process with many threads
#: (a test's load threads, Ray's own), the child can deadlock there on a lock another
#: thread held at the fork, and the ``Popen`` waits for it forever (a fresh-clone run's
#: ``add_node`` hung 600 s so). A child still running this process's own command line
#: this long after its fork never execs: it is killed, ``Popen`` returns, Ray's start
#: fails on the dead process, and the start is tried again.
STUCK_FORK_S = 10.0


def sigkill_node(node: Any) -> None:
    """SIGKILL a node's raylet and every process under it (its workers) at once.

    A preempted VM loses all its processes in the same instant. ``Cluster.remove_node``
    kills the raylet and the node's agents one by one and leaves the workers to notice
    their raylet's death, so an actor there kept answering for about a second after
    "the node died"; killing the whole process tree first makes the preemption real.
    """
    procs: list[Any] = []
    for info in ray_private.raylet_processes(node):
        try:
            raylet = psutil.Process(info.process.pid)
            procs += [raylet, *raylet.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    _kill(procs)
    # No wait here: the workers are not our children, so they stay zombies until init
    # reaps them; Cluster.remove_node reaps the raylet, and the workers are gone already.


def start_with_retries(start: Callable[[], T], what: str, *,
                       attempts: int = START_ATTEMPTS) -> T:
    """Call ``start()`` (which starts Ray processes as children of this one); when it
    raises, kill the processes the failed try left behind and call it again, up to
    ``attempts`` times in all. Argument errors (``ValueError``, ``TypeError``) are raised
    at once: trying again cannot fix them.

    Only what the failed try started is killed: this process's children that were not
    there before it, with their descendants. A process started before (a vLLM server the
    test runs beside the cluster) keeps the children it forks meanwhile."""
    for attempt in range(1, attempts + 1):
        before = _children(recursive=False)
        try:
            with ForkWatch():
                return start()
        except (ValueError, TypeError):
            raise
        except Exception as err:
            if attempt == attempts:
                raise
            left = _started_since(before)
            logger.warning("starting %s failed (try %d of %d: %s: %s); stopping the %d "
                           "process(es) it left and trying again", what, attempt, attempts,
                           type(err).__name__, err, len(left))
            _kill(left)
    raise AssertionError("unreachable")  # pragma: no cover


class ForkWatch:
    """While in its ``with`` block, kill this process's children that were forked in it
    and still run this process's command line after ``stuck_s`` (a fork that never
    reached its exec; see :data:`STUCK_FORK_S`). ``killed`` counts them."""

    def __init__(self, stuck_s: float = STUCK_FORK_S, every_s: float = 1.0) -> None:
        me = psutil.Process()
        self._me, self._cmdline = me, me.cmdline()
        self.stuck_s, self.every_s = stuck_s, every_s
        self.killed = 0
        self._since = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fork-watch", daemon=True)

    def __enter__(self) -> ForkWatch:
        self._since = time.time() - 1.0  # create_time has a coarse clock
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            for child in self._me.children():
                with contextlib.suppress(psutil.Error):  # gone, a zombie, or not ours
                    age = time.time() - child.create_time()
                    if (child.create_time() >= self._since and age > self.stuck_s
                            and child.cmdline() == self._cmdline):
                        logger.warning("killing child %d: forked %.0f s ago to start a Ray "
                                       "process, it never reached its exec", child.pid, age)
                        child.kill()
                        self.killed += 1


def _children(recursive: bool = True) -> dict[int, Any]:
    return {p.pid: p for p in psutil.Process().children(recursive=recursive)}


def _started_since(before: dict[int, Any]) -> list[Any]:
    """This process's children not in ``before`` (its children then), and theirs."""
    out: list[Any] = []
    for pid, child in _children(recursive=False).items():
        if pid in before:
            continue
        out.append(child)
        with contextlib.suppress(psutil.Error):
            out.extend(child.children(recursive=True))
    return out


def _kill(procs: list[Any]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
