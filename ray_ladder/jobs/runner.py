"""Run one job on a ladder of clusters: submit it to the best cluster rung through Ray's
Job Submission API, follow it, place it again when its rung or cluster is lost, and climb
it back at a checkpoint (decisions in :mod:`ray_ladder.jobs.policy`; this module acts).

Example:
    >>> job = LadderJob(load_ladder("ladder.yaml"), "python train.py",
    ...                 storage="s3://ckpt/runs?endpoint_override=10.0.0.9:9000")
    ... # doctest: +SKIP
    >>> job.run()  # doctest: +SKIP
    'SUCCEEDED'
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ray_ladder.core.placement import rung_capacity
from ray_ladder.core.selector import Selector
from ray_ladder.core.spec import Ladder
from ray_ladder.jobs.hook import JOB_ENV
from ray_ladder.jobs.policy import Act, JobState, Run, Seen, decide
from ray_ladder.jobs.remote import RemoteCluster
from ray_ladder.jobs.storage import RunStorage


@dataclass(frozen=True)
class JobEvent:
    """One thing the runner did or saw (``kind``: submit, submit_failed, stop, ask_climb,
    wait, finish, adopt), with the attempt, rung, cluster and cause as data and
    ``message`` in words."""

    time: float
    kind: str
    attempt: int
    rung: str | None
    cluster: str | None
    cause: str | None
    message: str


def run_name(ladder: Ladder, entrypoint: str) -> str:
    """A deterministic run name: the ladder's name and a hash of the entrypoint.

    Example:
        >>> run_name(Ladder.from_yaml("name: t\\nrungs: [{name: a, num_cpus: 1}]"), "python x.py")
        't-9a4a3a0c'
    """
    return f"{ladder.name}-{hashlib.sha256(entrypoint.encode()).hexdigest()[:8]}"


def submission_id(run: str, attempt: int) -> str:
    """The Job Submission API id of ``attempt`` of ``run`` (the same every time it is
    asked: a runner that restarts adopts the attempt instead of submitting it twice)."""
    return f"{run}-attempt-{attempt}"


class LadderJob:
    """One job run on a ladder whose compute rungs name clusters (``rungs[].cluster``).

    Args:
        ladder: The ladder (its ``clusters:`` and ``data:`` apply).
        entrypoint: The job's shell command (``python train.py --epochs 3``).
        storage: The run's shared storage URI (checkpoints, the owning attempt).
        run: The run's name (default: :func:`run_name`).
        runtime_env: The job's runtime_env (``RAY_LADDER_JOB`` is added to its env_vars).
        max_failures: Attempts that may fail on an obtainable rung before the run fails.
        on_event: Called with each :class:`JobEvent`.
        on_log: Called with each new piece of the current attempt's log.
        clock: The runner's clock (``time.monotonic``).
    """

    def __init__(self, ladder: Ladder, entrypoint: str, *, storage: str,
                 run: str | None = None, runtime_env: dict[str, Any] | None = None,
                 max_failures: int = 3, on_event: Callable[[JobEvent], None] | None = None,
                 on_log: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        missing = [r.name for r in ladder.rungs if r.is_compute and r.cluster is None]
        if missing:
            raise ValueError(f"rungs {missing} name no cluster: a job ladder's compute rungs "
                             "say cluster: NAME (one of the ladder's clusters:)")
        self.ladder, self.entrypoint = ladder, entrypoint
        self.run_name = run or run_name(ladder, entrypoint)
        self.store = RunStorage.open(storage, self.run_name)
        self.runtime_env = dict(runtime_env or {})
        self.max_failures = max_failures
        self._on_event, self._on_log, self._clock = on_event, on_log, clock
        now = clock()
        self.clusters = {name: RemoteCluster(name, spec, since=now)
                         for name, spec in ladder.clusters.items()}
        self.selector = Selector(ladder, promotion_hysteresis=ladder.policy.promotion_hysteresis)
        self.state = Run()
        self.events: list[JobEvent] = []
        self._last_state: JobState = "NONE"
        self._failed_at: float | None = None
        self._log_seen = 0
        self._waiting = ""
        self._adopt()

    # --- observing -----------------------------------------------------------------------

    def obtainable(self, now: float) -> dict[str, bool]:
        """Rung -> obtainable: its cluster answered recently and an alive node hosts it."""
        out: dict[str, bool] = {}
        eligible = {r.name for r in self.ladder.eligible()}
        for rung in self.ladder.rungs:
            if not rung.is_compute or rung.cluster is None or rung.name not in eligible:
                continue
            cluster = self.clusters[rung.cluster]
            out[rung.name] = (cluster.fresh(now) and not cluster.lost(now)
                              and rung_capacity(rung, cluster.nodes).obtainable)
        return out

    def why_not(self, now: float) -> str:
        """Why each compute rung cannot take the job now (for ``wait``)."""
        eligible = {r.name for r in self.ladder.eligible()}
        parts = []
        for rung in self.ladder.rungs:
            if not rung.is_compute:
                continue
            cluster = self.clusters[rung.cluster or ""]
            if rung.name not in eligible:
                parts.append(f"{rung.name}: excluded by the ladder's data "
                             f"({self._data_rule()})")
            elif not cluster.fresh(now):
                parts.append(f"{rung.name}: cluster {cluster.name} does not answer")
            else:
                parts.append(f"{rung.name}: {rung_capacity(rung, cluster.nodes).state} on "
                             f"cluster {cluster.name}")
        return "; ".join(parts)

    def _data_rule(self) -> str:
        data = self.ladder.data
        if data is None:
            return "none"
        rules = [f"stays in {list(data.stays)}" if data.stays else "",
                 f"jurisdiction {data.jurisdiction}" if data.jurisdiction else ""]
        return ", ".join(r for r in rules if r)

    def job_state(self, now: float) -> JobState:
        """The current attempt's state on its cluster (``LOST`` once the cluster is)."""
        if self.state.rung is None or self.state.attempt == 0:
            return "NONE"
        cluster = self._cluster_of(self.state.rung)
        if cluster.lost(now):
            return "LOST"
        try:
            status = str(cluster.jobs().get_job_status(
                submission_id(self.run_name, self.state.attempt)))
        except Exception:
            cluster.forget_client()
            if cluster.read_at == now:  # it answers but knows no such job: gone with a
                self._last_state = "LOST"  # restart, or never submitted
            return self._last_state  # else keep the last state until the cluster is lost
        state: JobState = status.rsplit(".", 1)[-1]  # type: ignore[assignment]
        if state == "FAILED":
            # A driver that died with its head is read FAILED an instant before the head
            # stops answering: believe it only once the cluster answers a later reading
            # (else the cluster is lost and the attempt with it).
            failed_at = self._failed_at = self._failed_at or now
            if cluster.read_at is None or cluster.read_at <= failed_at:
                return self._last_state
        self._last_state = state
        return state

    # --- one step ------------------------------------------------------------------------

    def step(self) -> list[Act]:
        """Read each cluster whose ``poll_interval_s`` has passed and the job once,
        decide, act; the acts taken."""
        now = self._clock()
        for cluster in self.clusters.values():
            if cluster.due(now):
                cluster.read(now)
        state = self.job_state(now)
        yielded = self.store.read("yielded.json") or {}
        seen = Seen(now, self.obtainable(now), state,
                    yielded=int(yielded.get("attempt", -1)) == self.state.attempt)
        self._follow_logs(state)
        self.state, acts = decide(self.state, seen, self.selector,
                                  max_failures=self.max_failures)
        for act in acts:
            self._act(act, now)
        return acts

    def run(self, timeout_s: float | None = None, poll_s: float | None = None) -> str:
        """Step until the run is over; its outcome (``SUCCEEDED`` or ``FAILED``).

        Raises:
            TimeoutError: ``timeout_s`` passed first (the current attempt keeps running).
        """
        poll = poll_s or min(c.poll_interval_s for c in self.ladder.clusters.values())
        deadline = None if timeout_s is None else self._clock() + timeout_s
        while self.state.done is None:
            self.step()
            if self.state.done is not None:
                break
            if deadline is not None and self._clock() > deadline:
                raise TimeoutError(f"run {self.run_name} not over after {timeout_s} s")
            time.sleep(poll)
        return self.state.done

    # --- acting --------------------------------------------------------------------------

    def _act(self, act: Act, now: float) -> None:
        if act.kind == "submit":
            self._submit(act, now)
        elif act.kind == "stop":
            self._stop(now)
        elif act.kind == "ask_climb":
            self.store.write("climb.json", {"attempt": self.state.attempt, "to": act.rung})
            self._event(now, "ask_climb", act.rung, "climb",
                        f"asked attempt {self.state.attempt} to stop at its next "
                        f"checkpoint and climb to {act.rung}")
        elif act.kind == "wait":
            why = self.why_not(now)
            if why != self._waiting:
                self._waiting = why
                self._event(now, "wait", None, None, f"waiting: {why}")
        else:
            self._event(now, "finish", act.rung, None, f"run {self.run_name}: {act.why}")

    def _submit(self, act: Act, now: float) -> None:
        rung = self.ladder.rung(act.rung or "")
        cluster = self._cluster_of(rung.name)
        sid = submission_id(self.run_name, act.attempt)
        self.store.write("attempt.json", {"attempt": act.attempt, "rung": rung.name,
                                          "cluster": cluster.name, "submission_id": sid})
        self.store.delete("climb.json")
        env = {**self.runtime_env.get("env_vars", {}), JOB_ENV: json.dumps({
            "run": self.run_name, "attempt": act.attempt, "rung": rung.name,
            "cluster": cluster.name, "placement": rung.placement(),
            "storage": self.store.uri})}
        self._last_state, self._log_seen, self._waiting = "PENDING", 0, ""
        self._failed_at = None
        try:
            cluster.jobs().submit_job(
                entrypoint=self.entrypoint, submission_id=sid,
                runtime_env={**self.runtime_env, "env_vars": env},
                metadata={"ray_ladder_run": self.run_name, "ray_ladder_rung": rung.name})
        except Exception as err:  # its cluster went away: the attempt never started
            cluster.forget_client()
            cluster.read_at = None  # its rungs are unobtainable until it answers again
            self._last_state = "LOST"
            self._event(now, "submit_failed", rung.name, act.cause,
                        f"submitting attempt {act.attempt} to {cluster.name} failed: {err}")
            return
        self._event(now, "submit", rung.name, act.cause,
                    f"attempt {act.attempt} on {rung.name} (cluster {cluster.name}): "
                    f"{act.cause}")

    def _stop(self, now: float) -> None:
        cluster = self._cluster_of(self.state.rung or "")
        try:
            cluster.jobs().stop_job(submission_id(self.run_name, self.state.attempt))
        except Exception:  # a cluster that does not answer ends up lost
            cluster.forget_client()
        self._event(now, "stop", self.state.rung, "fall",
                    f"stopping attempt {self.state.attempt}: {self.state.rung} unobtainable")

    def _follow_logs(self, state: JobState) -> None:
        if self._on_log is None or state in ("NONE", "LOST", "PENDING"):
            return
        cluster = self._cluster_of(self.state.rung or "")
        try:
            text = cluster.jobs().get_job_logs(submission_id(self.run_name, self.state.attempt))
        except Exception:
            return
        if len(text) > self._log_seen:
            self._on_log(text[self._log_seen:])
            self._log_seen = len(text)

    def _adopt(self) -> None:
        """Take over an attempt a previous runner of the same run submitted."""
        owner = self.store.read("attempt.json")
        if owner is None or owner.get("rung") not in self.ladder.names:
            return
        climb = self.store.read("climb.json") or {}
        asked = climb.get("to") if climb.get("attempt") == owner["attempt"] else None
        self.state = Run(rung=owner["rung"], attempt=int(owner["attempt"]), climb_to=asked)
        self._last_state = "PENDING"
        self._event(self._clock(), "adopt", owner["rung"], None,
                    f"following attempt {owner['attempt']} of run {self.run_name}")

    def _cluster_of(self, rung: str) -> RemoteCluster:
        return self.clusters[self.ladder.rung(rung).cluster or ""]

    def _event(self, now: float, kind: str, rung: str | None, cause: str | None,
               message: str) -> None:
        cluster = self.ladder.rung(rung).cluster if rung in self.ladder.names else None
        event = JobEvent(now, kind, self.state.attempt, rung, cluster, cause, message)
        self.events.append(event)
        if self._on_event is not None:
            self._on_event(event)
