"""One scripted day of two teams on one cluster's h100 units, with the fleet arbiter or
without it (plain Ray: first come, first served). The demo and ``bench/teams.py`` run it.

Team ``a`` owns both h100 units (its quota) and is idle at first; team ``b`` owns none.
b's Serve app and its ``@ladder_task`` calls borrow a's idle units; then a's load arrives
in two steps: its Serve app (one unit), then its tasks (the second). With the arbiter,
each step sends b a notice on one unit, which b's team ledger puts on its most recently
placed part (its tasks, then its app): that part moves down its ladder (to ``l4``) and a
is served from h100 after b's grace; without it, b keeps the units while it has work.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ray_ladder.core.fleet import Fleet
from ray_ladder.core.spec import Ladder
from ray_ladder.testing import LocalCluster, NodeType

TEAMS = ("a", "b")
SHARED = "h100"
#: Each team's ladder: the shared h100, then a rung of its own, then shed.
LOWER = {"a": "a100", "b": "l4"}
H100_UNITS = 2
GRACE_S = 4.0
CONTROL_PERIOD_S = 0.25


def team_ladder(team: str) -> Ladder:
    """Team ``team``'s ladder: ``h100 -> its own lower rung -> shed``."""
    lower = LOWER[team]
    return Ladder.from_yaml(f"""
name: team-{team}
policy: {{probe_interval_s: 0.25, pending_timeout_s: 10}}
rungs:
  - {{name: h100, resources: {{ladder/h100: 1}}, cost_per_hour: 12}}
  - {{name: {lower}, resources: {{ladder/{lower}: 1}}, quality: 0.9, standby_replicas: 1,
     cost_per_hour: 3}}
  - {{name: shed, kind: shed}}
""")


def team_fleet(grace_s: float = GRACE_S) -> Fleet:
    """The fleet: a owns both h100 units, b owns none and borrows a's idle ones."""
    return Fleet.from_yaml(f"""
fleet: teams-demo
control_period_s: {CONTROL_PERIOD_S}
rungs: {{h100: {{resources: {{ladder/h100: 1}}, cost_per_hour: 12}}}}
teams:
  - {{name: a, quota: {{h100: {H100_UNITS}}}, cohort: onprem}}
  - {{name: b, cohort: onprem, reclaim_grace_s: {grace_s}}}
""")


def teams_cluster(**kwargs: Any) -> LocalCluster:
    """The story's cluster (not started): the head, one node with the two h100 units, one
    with every team's lower-rung units (logical CPUs for the replicas and tasks there)."""
    lower = {f"ladder/{rung}": 4 for rung in LOWER.values()}
    return LocalCluster({
        "h100": NodeType(num_cpus=4, resources={"ladder/h100": H100_UNITS},
                         labels={"ladder.rung": "h100"}),
        "lower": NodeType(num_cpus=8, resources=lower)}, **kwargs)


class TeamModel:
    """A rung's model: answers which rung it runs on."""

    def __init__(self, rung: Any) -> None:
        self.rung = rung

    def __call__(self, payload: Any) -> dict[str, Any]:
        """The answer names the rung."""
        return {"rung": self.rung.name}


def team_work(i: int, *, rung: Any) -> str:
    """One of a team's task calls: half a second of work on the rung it was given."""
    time.sleep(0.5)
    return str(rung.name)


@dataclass(frozen=True)
class Request:
    """One HTTP request of a team's load: sent at ``t``, its status and answering rung,
    answered at ``answered`` (the same clock; None: not recorded)."""

    team: str
    t: float
    status: int
    rung: str | None
    answered: float | None = None


@dataclass(frozen=True)
class TaskCall:
    """One ``@ladder_task`` call: sent at ``t``, the rung that ran it (None: lost), its
    answer back at ``done`` (the same clock; None: not recorded)."""

    team: str
    t: float
    rung: str | None
    error: str = ""
    done: float | None = None


@dataclass(frozen=True)
class Mark:
    """A moment of the story (``t``: seconds since b's load started)."""

    t: float
    label: str


@dataclass(frozen=True)
class Sample:
    """The arbiter's view at ``t``: team -> its h100 ``held``, ``noticed``, ``nominal``,
    ``borrowed``, ``lent`` (``ray_ladder.fleet.FleetArbiter.status``); ``replicas``: team
    -> its app's running h100 replicas then (its router's ``/-/ladder``; absent: not
    read)."""

    t: float
    teams: dict[str, dict[str, int]]
    replicas: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Options:
    """The script's lengths.

    Attributes:
        borrowed_s: Seconds b runs on the borrowed units before a's load arrives.
        horizon_s: After a's load arrives, the longest the story waits for its moves.
        tail_s: Seconds of load after the last move.
        rate_hz: Requests per second of each team's load.
        grace_s: b's reclaim grace.
        deploy_timeout_s: Longest wait for b's app to answer from h100 at the start.
    """

    borrowed_s: float = 3.0
    horizon_s: float = 60.0
    tail_s: float = 2.0
    rate_hz: float = 5.0
    grace_s: float = GRACE_S
    deploy_timeout_s: float = 120.0


@dataclass
class Result:
    """What one run of the scenario recorded (times relative to b's load start).

    a's load arrives in two steps: its Serve app at ``arrived_at`` (one h100 unit), its
    task calls at ``tasks_at`` (the second; ``None``: with the app). ``replica_start_s``:
    b's app from its deploy to its first answer from h100 (a replica's start on this
    machine); ``grace_restarts``: the arbiter's count at the end (``None``: no arbiter).
    """

    mode: str
    arrived_at: float
    horizon_s: float
    tasks_at: float | None = None
    replica_start_s: float | None = None
    grace_restarts: int | None = None
    requests: list[Request] = field(default_factory=list)
    tasks: list[TaskCall] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)


class _Loop:
    """A daemon thread running ``body()`` until stopped (bounded: joined on stop)."""

    def __init__(self, body: Callable[[], None], every_s: float) -> None:
        self._body, self._every = body, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            with contextlib.suppress(Exception):  # a failed sample: the next one
                self._body()
            self._stop.wait(max(0.0, self._every - (time.monotonic() - began)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


class Load(_Loop):
    """Posts to a team's app at ``rate_hz`` and records every answer."""

    def __init__(self, team: str, url: str, clock: Callable[[], float], rate_hz: float) -> None:
        import httpx

        self.team, self.url, self.clock = team, url, clock
        self.records: list[Request] = []
        self._client = httpx.Client(timeout=30)
        super().__init__(self._post, 1.0 / rate_hz)

    def _post(self) -> None:
        sent = self.clock()
        try:
            r = self._client.post(self.url, json={"team": self.team})
            self.records.append(Request(self.team, sent, r.status_code,
                                        r.headers.get("x-ladder-rung"), self.clock()))
        except Exception as err:  # a transport error is a failed request
            self.records.append(Request(self.team, sent, -1, type(err).__name__))


class Feeder:
    """Keeps one call of a team's task outstanding (its steady work) and records them."""

    def __init__(self, team: str, task: Any, clock: Callable[[], float]) -> None:
        self.team, self.task, self.clock = team, task, clock
        self.sent: list[tuple[float, Any]] = []
        self.done: list[TaskCall] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._feed, daemon=True)
        self._thread.start()

    def _feed(self) -> None:
        import ray

        while not self._stop.is_set():
            at = self.clock()
            ref = self.task.remote(len(self.sent))
            self.sent.append((at, ref))
            try:
                rung = ray.get(ref, timeout=120)
                self.done.append(TaskCall(self.team, at, rung, done=self.clock()))
            except Exception as err:  # lost: counted, and the feeder goes on
                self.done.append(TaskCall(self.team, at, None, type(err).__name__))

    def stop(self) -> list[TaskCall]:
        """Stop sending; the calls, each with the rung that ran it or its error."""
        self._stop.set()
        self._thread.join(timeout=150)
        return list(self.done)
