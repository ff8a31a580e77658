"""The processes of a local Ray node: kill a node's whole tree at once (a preemption), and
start a node again when Ray's own start-up gives up on a CPU-starved machine.

Used by :class:`ray_ladder.testing.LocalCluster`; it knows processes, not ladders.
"""

from __future__ import annotations

import contextlib
import logging
import signal
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
    at once: trying again cannot fix them."""
    for attempt in range(1, attempts + 1):
        before = _children()
        try:
            return start()
        except (ValueError, TypeError):
            raise
        except Exception as err:
            if attempt == attempts:
                raise
            left = [p for pid, p in _children().items() if pid not in before]
            logger.warning("starting %s failed (try %d of %d: %s: %s); stopping the %d "
                           "process(es) it left and trying again", what, attempt, attempts,
                           type(err).__name__, err, len(left))
            _kill(left)
    raise AssertionError("unreachable")  # pragma: no cover


def _children() -> dict[int, Any]:
    return {p.pid: p for p in psutil.Process().children(recursive=True)}


def _kill(procs: list[Any]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
