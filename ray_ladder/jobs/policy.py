"""Where a job across clusters runs next: a pure decision over one observation.

The runner (:mod:`ray_ladder.jobs.runner`) reads every cluster's capacity and the job's
status, calls :func:`decide`, and acts on the returned :class:`Act` list. Nothing here
reads a clock, touches Ray or the network.

One attempt at a time: a new attempt is submitted only once the last one is over (ended,
stopped, or its cluster lost). A fall stops the attempt whose rung went away; a climb asks
the job to stop at its next committed checkpoint and waits for it to yield.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from ray_ladder.core.selector import Selector

#: A job attempt's state as the runner sees it: Ray's job statuses, ``LOST`` (its cluster
#: stopped answering for ``lost_after_s``) and ``NONE`` (no attempt yet).
JobState = Literal["NONE", "PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED", "LOST"]
OVER: frozenset[str] = frozenset({"SUCCEEDED", "FAILED", "STOPPED", "LOST"})
#: Why an attempt was placed (data, not sentences): first placement, a fall (its rung
#: went away, or its cluster was lost), a climb at a checkpoint, a retry after a failure.
Cause = Literal["start", "fall", "lost", "climb", "retry"]


@dataclass(frozen=True)
class Seen:
    """One observation of the run.

    Attributes:
        now: The runner's clock.
        obtainable: Rung name -> obtainable now (a stale or lost cluster's rungs: False).
        state: The current attempt's state (``NONE`` before the first one).
        yielded: The current attempt stopped at a committed checkpoint because it was
            asked to climb (its storage says so).
    """

    now: float
    obtainable: Mapping[str, bool]
    state: JobState = "NONE"
    yielded: bool = False


@dataclass(frozen=True)
class Run:
    """What the runner remembers of the run between observations.

    Attributes:
        rung: The rung of the current attempt (``None``: none yet).
        attempt: The current attempt's number (0: none yet).
        climb_to: The rung the job was asked to climb to (waiting for it to yield).
        stopping: The current attempt was told to stop (its rung went away).
        failures: Attempts that failed while their rung stayed obtainable.
        done: The run's outcome once over (``SUCCEEDED`` or ``FAILED``).
    """

    rung: str | None = None
    attempt: int = 0
    climb_to: str | None = None
    stopping: bool = False
    failures: int = 0
    done: str | None = None


@dataclass(frozen=True)
class Act:
    """One thing for the runner to do.

    Attributes:
        kind: ``submit`` (attempt ``attempt`` on ``rung``), ``stop`` (the current attempt),
            ``ask_climb`` (tell the job to stop at its next checkpoint), ``wait`` (nothing
            can be done now; ``why`` says why), ``finish`` (the run is over: ``why`` is its
            outcome).
        rung: The rung it concerns.
        attempt: For ``submit``, the attempt's number.
        cause: For ``submit``, why the attempt is placed.
        why: Words for ``wait`` and ``finish``.
    """

    kind: Literal["submit", "stop", "ask_climb", "wait", "finish"]
    rung: str | None = None
    attempt: int = 0
    cause: Cause | None = None
    why: str = ""


def decide(run: Run, seen: Seen, selector: Selector, *,
           max_failures: int = 3) -> tuple[Run, list[Act]]:
    """The run after ``seen`` and what to do now.

    ``selector`` is the run's selector: it is fed ``seen.obtainable`` once per call, so a
    better rung is climbed to only after the ladder's ``promotion_hysteresis``.
    """
    if run.done is not None:
        return run, []
    target = selector.observe(seen.obtainable, seen.now).rung
    compute = target if target is not None and selector.ladder.rung(target).is_compute \
        else None
    if run.rung is None:
        return _place(run, compute, "start")
    if seen.state in OVER:
        return _after(run, seen, compute, max_failures)
    if not run.stopping and not seen.obtainable.get(run.rung, False):
        return replace(run, stopping=True), [Act("stop", run.rung)]
    if run.stopping or run.climb_to is not None:
        return run, []
    if compute is not None and _above(selector, compute, run.rung):
        return replace(run, climb_to=compute), [Act("ask_climb", compute)]
    return run, []


def _after(run: Run, seen: Seen, compute: str | None,
           max_failures: int) -> tuple[Run, list[Act]]:
    """The current attempt is over: finish, or place the next attempt."""
    if run.climb_to is not None and seen.yielded:
        return _place(replace(run, climb_to=None), compute, "climb")
    if seen.state == "SUCCEEDED":
        return replace(run, done="SUCCEEDED"), [Act("finish", run.rung, why="SUCCEEDED")]
    if seen.state == "LOST":
        return _place(run, compute, "lost")
    if run.stopping or not seen.obtainable.get(run.rung or "", False):
        return _place(replace(run, stopping=False), compute, "fall")
    failures = run.failures + 1
    if failures >= max_failures:
        return replace(run, failures=failures, done="FAILED"), [
            Act("finish", run.rung, why=f"FAILED ({failures} attempts failed on an "
                "obtainable rung)")]
    return _place(replace(run, failures=failures), compute, "retry")


def _place(run: Run, compute: str | None, cause: Cause) -> tuple[Run, list[Act]]:
    if compute is None:
        return replace(run, rung=None, climb_to=None, stopping=False), [
            Act("wait", why="no cluster rung is obtainable now")]
    attempt = run.attempt + 1
    return (replace(run, rung=compute, attempt=attempt, climb_to=None, stopping=False),
            [Act("submit", compute, attempt=attempt, cause=cause)])


def _above(selector: Selector, rung: str, current: str) -> bool:
    ladder = selector.ladder
    return ladder.index(rung) < ladder.index(current)
