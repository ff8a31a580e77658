"""LadderScalingPolicy: the ladder as Ray Train's scaling policy (it runs in the controller)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ray_ladder.cluster import ray_private_train as ray_train
from ray_ladder.cluster.capacity import NodeSource, resolve_node_source
from ray_ladder.cluster.errors import is_rung_gone
from ray_ladder.cluster.event_log import log_event, show_events_on_stderr
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.events import Direction, TransitionCause, TransitionEvent
from ray_ladder.core.placement import NodeState
from ray_ladder.core.spec import Ladder
from ray_ladder.train import lifecycle
from ray_ladder.train.channel import Channel
from ray_ladder.train.gang import gang_size, worker_demand
from ray_ladder.train.history import LadderSummary, TrainSpan, close_last, with_nodes
from ray_ladder.train.planner import GangPlanner
from ray_ladder.train.team import TeamRun

logger = logging.getLogger(__name__)

_BASES = ray_train.train_bases()
_ScalingPolicy: Any = _BASES[0]
_WorkerGroupCallback: Any = _BASES[1]

#: The policies of the runs this controller process drives (run id -> policy), so the
#: :class:`GroupWatch` (pickled separately by Ray) finds its run's policy.
_LIVE: dict[str, LadderScalingPolicy] = {}


@dataclass(frozen=True)
class PolicySpec:
    """What the controller-side policy of one run needs (picklable).

    Attributes:
        ladder: The user's ladder.
        constraints: The run's constraints (hard).
        run_id: The ladder run's id (its :class:`Channel`).
        run_name: Ray Train's run name (in events).
        strategy: The placement-group strategy.
        max_wait_s: How long to wait for any eligible gang to fit before raising
            ``LadderExhaustedError`` (``None``: wait as long as it takes).
        suspect_s: How long a node whose workers died is left out, unless the GCS says
            it is dead sooner (it can look alive for seconds after its workers are gone).
        preemption_grace_s: The run's ``FailureConfig.preemption_grace_s`` (Ray Train
            waits that long past a drain's deadline; ending the wait early must too).
        team: The fleet team the run belongs to (the operator's binding; docs/teams.md).
    """

    ladder: Ladder
    constraints: Constraints | None
    run_id: str
    run_name: str = ""
    strategy: str = "PACK"
    max_wait_s: float | None = 300.0
    suspect_s: float = 30.0
    preemption_grace_s: float = 0.0
    team: str | None = None


class LadderScalingPolicy(_ScalingPolicy):  # type: ignore[misc]
    """Ray Train v2 scaling policy that picks the worker group's *shape* from a ladder.

    Ray Train's controller asks its scaling policy what to start (at the start, after a
    failure Ray Train's ``FailureConfig`` retries, and while the group runs): Ray's fixed
    policy always answers one shape, its elastic policy a worker count. This one answers
    the best eligible rung whose whole gang fits now (:class:`GangPlanner`), and, while the
    group runs, restarts it on a better rung once that has been obtainable for the
    hysteresis *and* the workers stopped at a committed checkpoint (``train.report``).
    On a preemption notice (Ray Train's ``PreemptingState``) it asks the workers to stop
    at their next checkpoint and, once they did, ends Ray Train's wait for the deadline;
    Ray Train does the rest (worker group, placement group, restore, failure budget).

    Args:
        scaling_config: The top rung's ``ScalingConfig`` (what Ray Train asks the
            autoscaler for, and the placement strategy).
        spec: The run's :class:`PolicySpec`.
        node_source: Node states (default: Ray's GCS view); ``nodes=``, its old name, warns.
        clock: Monotonic clock for the selector; ``wall_clock`` for history and events.
        sleep: How it waits before answering "no change" while no gang fits (tests).

    Example:
        >>> policy = LadderScalingPolicy(top_config, PolicySpec(ladder, None, "run1"))
        ... # doctest: +SKIP
    """

    def __init__(self, scaling_config: Any, spec: PolicySpec, *,
                 node_source: NodeSource | None = None, nodes: NodeSource | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(scaling_config)
        self.spec = spec
        self.planner = GangPlanner(spec.ladder, spec.constraints, strategy=spec.strategy)
        self.channel = Channel(spec.run_id)
        self._nodes = resolve_node_source(node_source, "LadderScalingPolicy", nodes=nodes)
        self._clock = clock
        self._wall = wall_clock
        self._sleep = sleep
        self.placed: str | None = None  # the rung of the group being started or running
        self.held: dict[str, dict[str, float]] = {}  # what that group holds, per node
        self.rank_nodes: list[str] = []
        self.suspects: dict[str, float] = {}  # node id -> left out until (monotonic)
        #: Climb, notice or wait: the run's one lifecycle value (see train/lifecycle.py).
        self.state: lifecycle.RunState = lifecycle.Steady()
        self.summary = LadderSummary(spec.ladder.name, self.planner.top)
        self._why_next = "first placement"
        self._cause_next: TransitionCause = "first"  # the cause that goes with _why_next
        self._down_why = ""  # why the group being resized down ended, when not a reclaim
        self.team = TeamRun.of(spec.team, spec.run_name or spec.run_id, self.planner, self.channel)

    # --- what Ray Train's controller asks --------------------------------------------------

    def _get_num_workers_for_resource_request(self) -> int:
        return int(self.scaling_config.num_workers)  # the top rung's gang

    def make_decision_for_non_running_worker_group(self) -> Any:
        """Start (or restart after a failure) on the best eligible rung whose gang fits."""
        self._maybe_send_resource_request()
        now = self._clock()
        self.suspects = {n: t for n, t in self.suspects.items() if t > now}
        nodes = self._nodes()
        placement = self.planner.place(nodes, now, held=self.held, exclude=set(self.suspects),
                                       deny=self._denied(None, nodes))
        if placement.rung is None:
            return self._wait(placement.capacity, now)
        free = ", ".join(placement.free()) or "none"
        self._move(placement.rung, f"{self._why_next}; free: {free}", self._cause_next)
        return self._resize(placement.rung)

    def make_decision_for_running_worker_group(self, worker_group_state: Any,
                                               worker_group_status: Any) -> Any:
        """Watch for a better rung; move there once the workers wait at a checkpoint."""
        self._maybe_send_resource_request()
        placements = ray_train.train_placements(worker_group_state)
        self._note_group(placements)
        if self.placed is None:
            return ray_train.train_decision()
        reclaim = self._reclaim(self.team, self.placed) if self.team is not None else None
        if reclaim is not None:
            return reclaim
        parked = self.channel.parked() if lifecycle.awaits_park(self.state) else None
        climb = lifecycle.climb_due(self.state, parked)
        if climb is not None:
            target = climb.to
            nodes = self._nodes()
            capacity = self.planner.capacity(nodes, held=self.held)[target]
            step = lifecycle.at_climb(climb, obtainable=capacity.obtainable
                                      and target not in self._denied(self.placed, nodes))
            self.state = step.state
            if step.kind == "move":
                self._move(target, f"climb at checkpoint; {target} obtainable for "
                                   f"{self.planner.selector.hysteresis} observation(s)",
                           "promoted")
                return self._resize(target)
            self.channel.cancel_climb(step.request)
            logger.info("ladder %s: %s went away before the climb (%s); staying on %s",
                        self.spec.ladder.name, target, capacity.why(), self.placed)
        now = self._clock()
        if not lifecycle.probe_due(self.state, now, self.spec.ladder.policy.probe_interval_s):
            return ray_train.train_decision()
        nodes = self._nodes()
        better = self.planner.observe(nodes, now, placed=self.placed, held=self.held,
                                      deny=self._denied(self.placed, nodes))
        step = lifecycle.on_probe(self.state, now, better)
        self.state = step.state
        if step.kind == "cancel":
            self.channel.cancel_climb(step.request)
        elif step.kind == "ask":
            self.channel.ask_climb(step.request, step.rung)
        return ray_train.train_decision()

    # --- ControllerCallback hooks ------------------------------------------------------------

    def after_controller_start(self, train_run_context: Any) -> None:
        """Make the ladder's events visible in the driver (Ray forwards this actor's logs)."""
        _LIVE[self.spec.run_id] = self
        show_events_on_stderr()
        self.channel.clear()
        super().after_controller_start(train_run_context)

    def on_controller_start_worker_group(self, *, scaling_config: Any,
                                         num_workers: int) -> dict[str, str] | None:
        """The label selector of the chosen rung, for every worker (``None``: no labels)."""
        if self.placed is None:
            return None
        selector = self.planner.train_ladder.rung(self.placed).label_selector
        return dict(selector) or None

    def after_controller_state_update(self, previous_state: Any, current_state: Any) -> None:
        """Keep the history (a span per worker group, closed with the reason it ended) and
        act on a preemption notice while Ray Train waits it out (``PreemptingState``)."""
        name, error, following = ray_train.train_state(current_state)
        before = ray_train.train_state(previous_state)[0]
        wall = self._wall()
        spans = self.summary.spans
        if name == "RUNNING" and before == "SCHEDULING" and self.placed is not None:
            rung = self.planner.train_ladder.rung(self.placed)
            spans.append(TrainSpan(self.placed, wall, None, None, gang_size(rung),
                                   tuple(self.rank_nodes), rung.cost_per_hour))
        elif name == "PREEMPTING":
            try:
                self._preempting(current_state, entered=before != "PREEMPTING")
            except Exception as err:  # never break Ray's own wait for the deadline
                logger.warning("ladder %s: could not act on the preemption notice (%s); "
                               "Ray Train restarts at the deadline", self.spec.ladder.name, err)
            return
        elif name == "RESTARTING":
            why = self._failed(error)
            close_last(spans, wall, why)
            self._why_next, self._cause_next = f"{self.placed} {why}", "lost"
            if getattr(error, "preemption_info", None) is not None:
                self._why_next = f"{self.placed} {self._notice_reason()}"
                self._cause_next = "preemption_notice"
            elif why == "preempted":  # killed at a drain's deadline Ray Train never saw
                self._why_next = f"{self.placed} preempted: node lost, its notice unseen"
        elif name == "RESCHEDULING":
            self._why_next = f"{self.placed} could not be scheduled"
            self._cause_next = "other"
        elif name == "RESIZING":  # a climb, a move off reclaimed units or a spent budget
            close_last(spans, wall, self._down_why or lifecycle.resized(
                spans[-1].rung if spans else None, str(self.placed), self.planner.eligible))
            self._down_why = ""
        elif name == "SHUTTING_DOWN":
            close_last(spans, wall, "completed" if following == "FINISHED" else "failed")
        elif name in ("ERRORED", "ABORTED", "FINISHED"):
            close_last(spans, wall, "completed" if name == "FINISHED" else name.lower())
        else:
            return
        self._publish()

    def after_controller_finish(self, result: Any) -> None:
        """Leave the final history for the driver."""
        close_last(self.summary.spans, self._wall(), "completed" if result.error is None
                   else "failed")
        self._publish()
        _LIVE.pop(self.spec.run_id, None)

    def group_started(self, placements: list[tuple[str, dict[str, float]]]) -> None:
        """Ray Train started a worker group (from :class:`GroupWatch`): note where its
        workers are, so a restart counts what they hold as free from the first moment."""
        self._note_group(placements)

    # --- internals -------------------------------------------------------------------------

    def _denied(self, placed: str | None, nodes: list[NodeState]) -> frozenset[str]:
        """The team's rungs the run may not take now, on ``nodes`` (:meth:`TeamRun.denied`)."""
        return frozenset() if self.team is None else self.team.denied(
            placed, self.planner.capacity(nodes, held=self.held))

    def _reclaim(self, team: TeamRun, placed: str) -> Any | None:
        """A reclaim notice on the team's units moves the group at its next checkpoint."""
        step = team.step(self.state, placed, self._safe_nodes(), self.held, self._clock())
        if step.kind == "move":
            reason, cause, self._down_why = team.move_why(placed, self.state, self._wall())
            self._move(step.rung, reason, cause)
            return self._resize(step.rung)
        self.state = step.state
        return ray_train.train_decision() if isinstance(self.state, lifecycle.Noticed) else None

    def _preempting(self, state: Any, *, entered: bool) -> None:
        """Ray Train waits out a preemption notice (it calls no scaling decision then): on
        entering, ask the workers to stop at their next checkpoint (replacing a standing
        climb, unless they already stopped for it); once they stopped, end the wait."""
        if entered:
            info = ray_train.train_preemption_info(state)
            deadline_ms = getattr(info, "deadline_ms", None)
            parked = self.channel.parked() if lifecycle.awaits_park(self.state) else None
            step = lifecycle.on_notice(self.state, parked=parked,
                                       deadline=deadline_ms / 1000.0 if deadline_ms else None)
            self.state = step.state
            if step.kind == "notice":
                self.channel.ask_climb(step.request, self._notice_target(info), notice=True)
        parked = self.channel.parked() if lifecycle.awaits_park(self.state) else None
        step = lifecycle.while_noticed(self.state, parked=parked)
        if step.kind != "end_wait":
            return
        if ray_train.train_end_preemption_wait(state, self.spec.preemption_grace_s):
            self.state = step.state
        logger.info("ladder %s: workers stopped at a committed checkpoint after a preemption "
                    "notice; restarting the group off the drained node now", self.spec.ladder.name)

    def _notice_target(self, info: Any) -> str:
        """The best eligible rung whose gang fits without the drained nodes (``""``: none)."""
        drained = set(getattr(info, "preempted_node_ids", None) or ())
        capacity = self.planner.capacity(self._safe_nodes(), held=self.held, exclude=drained)
        return next((name for name, c in capacity.items() if c.obtainable), "")

    def _notice_reason(self) -> str:
        """The event reason of a restart Ray Train made for a preemption notice."""
        return lifecycle.notice_reason(self.state, self._wall())

    def _resize(self, rung_name: str) -> Any:
        rung = self.planner.train_ladder.rung(rung_name)
        self.channel.clear()  # no request stands for the new group
        self.state = lifecycle.started(self.state)
        self.held = {}
        self.rank_nodes = []
        return ray_train.train_decision(gang_size(rung), worker_demand(rung))

    def _wait(self, capacity: dict[str, Any], now: float) -> Any:
        """No eligible gang fits: wait (a probe interval at a time), or raise when too long.

        The decision (:func:`lifecycle.on_no_fit`) only says how long; the wait is here."""
        step = lifecycle.on_no_fit(self.state, now, max_wait_s=self.spec.max_wait_s,
                                   poll_s=self.spec.ladder.policy.probe_interval_s)
        self.state = step.state
        if step.kind == "exhaust":
            raise self.planner.exhausted(capacity, step.waited_s, self._wall())
        if step.log:
            logger.warning("ladder %s: no eligible training shape fits, waiting: %s",
                           self.spec.ladder.name,
                           "; ".join(f"{n}: {c.why()}" for n, c in capacity.items()))
        self._sleep(step.sleep_s)
        return ray_train.train_decision()

    def _note_group(self, placements: list[tuple[str, dict[str, float]]]) -> None:
        held: dict[str, dict[str, float]] = {}
        for node, resources in placements:
            slot = held.setdefault(node, {})
            for key, amount in resources.items():
                slot[key] = slot.get(key, 0.0) + float(amount)
        self.held = held
        nodes = [node for node, _ in placements]
        if nodes != self.rank_nodes:
            self.rank_nodes = nodes
            with_nodes(self.summary.spans, nodes)

    def _failed(self, error: BaseException | None) -> str:
        """Why the group ended ("node lost", "preempted", "workers failed"); leaves out the
        nodes that took workers down with them for :attr:`PolicySpec.suspect_s`."""
        until = self._clock() + self.spec.suspect_s
        lost: set[str] = set()
        info = getattr(error, "preemption_info", None)
        if info is not None:
            lost.update(info.preempted_node_ids)
        failures = getattr(error, "worker_failures", None) or {}
        for rank, failure in failures.items():
            cause = ray_train.train_failure_cause(failure)
            if is_rung_gone(cause) and 0 <= rank < len(self.rank_nodes):
                lost.add(self.rank_nodes[rank])
        for node in lost:
            self.suspects[node] = until
        alive = {n.node_id for n in self._safe_nodes() if n.alive}
        if info is not None or any(getattr(ray_train.train_failure_cause(f), "preempted",
                                           False) for f in failures.values()):
            return "preempted"
        return "node lost" if lost and not lost <= alive else (
            "workers lost" if lost else "workers failed")

    def _safe_nodes(self) -> list[NodeState]:
        try:
            return self._nodes()
        except Exception:  # the GCS may be slow to answer right after a node died
            return []

    def _move(self, rung: str, reason: str, cause: TransitionCause) -> None:
        previous, self.placed = self.placed, rung
        if previous is None:
            cause = "first"
        direction: Direction | None = None
        if previous is not None and previous != rung:
            direction = "down" if self.planner.index(rung) > self.planner.index(previous) else "up"
        event = TransitionEvent(self._wall(), self.spec.ladder.name, previous, rung, direction,
                                reason, cause=cause)
        self.summary.events.append(event.to_dict())
        log_event(event, run=self.spec.run_name)
        self._publish()

    def _publish(self) -> None:
        try:
            self.channel.put_summary(self.summary.to_dict())
        except Exception as err:  # the history is a report; never fail training over it
            logger.debug("ladder: could not write the run's history: %s", err)


class GroupWatch(_WorkerGroupCallback):  # type: ignore[misc]
    """Ray Train worker-group callback: tells the run's policy where each new group's
    workers landed (the controller's scaling policy only sees a group once it ran a poll).

    Args:
        run_id: The ladder run's id.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def after_worker_group_start(self, worker_group: Any) -> None:
        """Hand the new group's placements to the policy."""
        policy = _LIVE.get(self.run_id)
        if policy is not None:
            policy.group_started(ray_train.train_placements(worker_group))

