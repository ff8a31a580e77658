"""Play the teams scenario on a running cluster with Serve: deploy, load, wait for each
move, clean up. With ``fleet=True`` the arbiter runs and the workloads are bound to
their teams; with ``fleet=False`` nothing arbitrates (plain Ray's first come, first
served)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from ray_ladder.demo.teams.figures import whole_quota_in_use
from ray_ladder.demo.teams.scenario import (
    LOWER,
    SHARED,
    Feeder,
    Load,
    Mark,
    Options,
    Result,
    Sample,
    TeamModel,
    _Loop,
    team_fleet,
    team_ladder,
    team_work,
)

#: A move the story waits for after a's arrival: ``(run, since) -> when it showed``
#: (the first record or sample that shows it; None: not yet).
Check = Callable[[Result, float], "float | None"]


def _served(team: str, rung: str, kind: str) -> Check:
    def check(res: Result, since: float) -> float | None:
        recs: list[Any] = res.requests if kind == "requests" else res.tasks
        return min((r.t for r in recs if r.team == team and r.rung == rung and r.t >= since
                    and getattr(r, "status", 200) == 200), default=None)
    return check


def _noticed(res: Result, since: float) -> float | None:
    return min((s.t for s in res.samples
                if s.t >= since and s.teams.get("b", {}).get("noticed", 0) > 0), default=None)


def _quota_back(res: Result, since: float) -> float | None:
    """When a held its whole nominal h100 quota again and b none (the reclaim is over)."""
    def back(a: dict[str, int], b: dict[str, int]) -> bool:
        return a.get("held", 0) >= a.get("nominal", 1) and b.get("held", 0) == 0

    return min((s.t for s in res.samples
                if s.t >= since and back(s.teams.get("a", {}), s.teams.get("b", {}))),
               default=None)


def _whole_quota(res: Result, since: float) -> float | None:
    """When a's own work first held both h100 units at once (figures.whole_quota_in_use)."""
    after = whole_quota_in_use(res)
    return None if after is None else res.arrived_at + after


def step_moves(fleet: bool, step: int) -> dict[str, Check]:
    """The moves after a's app arrives (``step`` 1: it wants one unit, so b's most
    recently placed part, its tasks, moves) or after a's tasks arrive (2: b's app moves
    too), in story order (no notice without an arbiter)."""
    out: dict[str, Check] = {}
    if step == 1:
        if fleet:
            out["reclaim notice to b"] = _noticed
        out["b's tasks on l4"] = _served("b", LOWER["b"], "tasks")
        out["a served from h100"] = _served("a", SHARED, "requests")
        return out
    if fleet:
        out["second reclaim notice to b"] = _noticed
    out["b's requests on l4"] = _served("b", LOWER["b"], "requests")
    out["a's tasks on h100"] = _served("a", SHARED, "tasks")
    if fleet:  # the story ends once the lender holds its quota again, not at a guess
        out["a holds its quota again"] = _quota_back
    out["a's work holds both units"] = _whole_quota  # plain Ray: b's replica keeps one
    return out


def moves(fleet: bool) -> dict[str, Check]:
    """Both steps' moves, in story order."""
    return {**step_moves(fleet, 1), **step_moves(fleet, 2)}


def _deploy(team: str, bound: str | None, *, blocking: bool) -> None:
    from ray import serve

    from ray_ladder.serve import build_app

    quick = {"graceful_shutdown_timeout_s": 2.0}
    ladder = team_ladder(team)
    rungs = [r.name for r in ladder.rungs if r.is_compute]
    app = build_app(ladder, dict.fromkeys(rungs, TeamModel), team=bound,
                    deployment_options=dict.fromkeys(rungs, quick))
    serve._run(app, _blocking=blocking, name=team, route_prefix=f"/{team}")


def _task(team: str, bound: str | None) -> Any:
    from ray_ladder.task import ladder_task

    return ladder_task(team_ladder(team), team=bound, max_attempts=8,
                       name=f"teams-{team}-{'fleet' if bound else 'plain'}")(team_work)


def _until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the teams story waited {timeout_s:.0f}s for {what}")
        time.sleep(0.1)


def _answers(url: str, rung: str | None) -> bool:
    import httpx

    try:
        r = httpx.post(url, json={}, timeout=10)
    except httpx.HTTPError:
        return False
    return r.status_code == 200 and (rung is None or r.headers.get("x-ladder-rung") == rung)


def _sampler(arbiter: Any, res: Result, clock: Callable[[], float], url: str) -> _Loop:
    import httpx
    import ray

    client = httpx.Client(timeout=5)

    def replicas(team: str) -> int | None:
        """The team's app's running h100 replicas, from its router (None: not up)."""
        try:
            rungs = client.get(f"{url}/{team}/-/ladder").json()["rungs"]
        except Exception:  # not deployed yet, or going: not read
            return None
        return next((int(r["running_replicas"]) for r in rungs if r["name"] == SHARED), 0)

    def sample() -> None:
        status = ray.get(arbiter.status.remote(), timeout=10)
        running = {team: replicas(team) for team in status["teams"]}
        res.samples.append(Sample(clock(), {
            team: {k: int(v) for k, v in entry["rungs"][SHARED].items()}
            for team, entry in status["teams"].items()},
            {team: n for team, n in running.items() if n is not None}))
        res.grace_restarts = int(status.get("grace_restarts", 0))
    return _Loop(sample, 0.25)


def run_scenario(url: str, *, fleet: bool, opts: Options = Options(),
                 on_mark: Callable[[Mark], None] = lambda m: None) -> Result:
    """Run the scenario once against Serve at ``url``; everything it started is gone
    when it returns (apps, arbiter, the fleet's KV entries)."""
    from ray_ladder.fleet import start_arbiter

    arbiter = start_arbiter(team_fleet(opts.grace_s)) if fleet else None
    bound: dict[str, str | None] = {t: (t if fleet else None) for t in ("a", "b")}
    loops: list[Any] = []
    try:
        deploying = time.monotonic()
        _deploy("b", bound["b"], blocking=True)
        _until(lambda: _answers(f"{url}/b", SHARED), opts.deploy_timeout_s,
               "b's app to answer from h100")
        t0 = time.monotonic()
        res = Result("fleet" if fleet else "plain", 0.0, opts.horizon_s,
                     replica_start_s=round(t0 - deploying, 3))
        return _play(url, res, lambda: time.monotonic() - t0, arbiter, bound, opts,
                     on_mark, loops)
    finally:
        for loop in loops:
            loop.stop()
        _clean_up(arbiter)


def _play(url: str, res: Result, clock: Callable[[], float], arbiter: Any,
          bound: dict[str, str | None], opts: Options, on_mark: Callable[[Mark], None],
          loops: list[Any]) -> Result:
    def mark(label: str, at: float | None = None) -> None:
        res.marks.append(Mark(round(clock() if at is None else at, 3), label))
        on_mark(res.marks[-1])

    if arbiter is not None:
        loops.append(_sampler(arbiter, res, clock, url))
    loops.append(b_load := Load("b", f"{url}/b", clock, opts.rate_hz))
    loops.append(b_tasks := Feeder("b", _task("b", bound["b"]), clock))
    mark("b's load starts")
    held = (lambda: bool(res.samples) and res.samples[-1].teams["b"]["held"] >= 2) \
        if arbiter is not None else (lambda: True)
    _until(lambda: held() and any(c.rung == SHARED for c in b_tasks.done),
           opts.deploy_timeout_s, "b to borrow a's idle units")
    mark("b borrows a's idle units")
    time.sleep(opts.borrowed_s)
    res.arrived_at = clock()
    mark("a's app arrives")  # a's demand, step 1: its app (one unit)
    _deploy("a", bound["a"], blocking=False)
    a_load: Load | None = None
    a_tasks: Feeder | None = None
    try:
        try:
            _until(lambda: _answers(f"{url}/a", None), opts.horizon_s, "a's app to answer")
        except TimeoutError:  # its load starts anyway: its requests say what it got
            mark("a's app did not answer yet")
        loops.append(a_load := Load("a", f"{url}/a", clock, opts.rate_hz))
        fleet = arbiter is not None
        _await_moves(res, [b_load, a_load], [b_tasks], step_moves(fleet, 1), mark, clock,
                     opts, res.arrived_at)
        res.tasks_at = clock()
        mark("a's tasks arrive")  # step 2: its tasks (the second unit)
        loops.append(a_tasks := Feeder("a", _task("a", bound["a"]), clock))
        _await_moves(res, [b_load, a_load], [b_tasks, a_tasks], step_moves(fleet, 2), mark,
                     clock, opts, res.tasks_at)
        time.sleep(opts.tail_s)
    finally:
        for loop in loops:
            loop.stop()
        res.tasks = b_tasks.stop() + (a_tasks.stop() if a_tasks is not None else [])
    res.requests = sorted(b_load.records + (a_load.records if a_load else []),
                          key=lambda r: r.t)
    return res


def _await_moves(res: Result, loads: list[Load], feeders: list[Feeder],
                 checks: dict[str, Check], mark: Callable[[str, float | None], None],
                 clock: Callable[[], float], opts: Options, since: float) -> None:
    """Mark each move when it shows (the first record or sample since ``since``); stop
    ``opts.horizon_s`` after ``since`` (plain Ray may never move)."""
    pending = dict(checks)
    while pending and clock() - since < opts.horizon_s:
        res.requests = [r for load in loads for r in list(load.records)]
        res.tasks = [c for f in feeders for c in list(f.done)]
        for label, check in list(pending.items()):
            at = check(res, since)
            if at is not None:
                mark(label, at)
                del pending[label]
        time.sleep(0.1)
    if pending:
        mark(f"horizon: {', '.join(pending)} not seen", None)


def _clean_up(arbiter: Any) -> None:
    import ray
    from ray import serve

    from ray_ladder.cluster import grants, ray_private

    for app in ("a", "b"):
        with contextlib.suppress(Exception):  # never deployed
            serve.delete(app)
    if arbiter is not None:
        ray.kill(arbiter, no_restart=True)
        for key in ray_private.kv_list("fleet/", namespace=grants.KV_NAMESPACE):
            ray_private.kv_del(key.decode(), namespace=grants.KV_NAMESPACE)

