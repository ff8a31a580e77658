"""LadderScheduler: places Tune trials on rungs, falls on failure, climbs at a checkpoint."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from ray_ladder.cluster import ray_private
from ray_ladder.cluster.capacity import NodeSource, ray_node_states, resolve_node_source
from ray_ladder.core.events import Direction, TransitionCause, TransitionEvent
from ray_ladder.core.selector import Selector
from ray_ladder.tune import lifecycle
from ray_ladder.tune._state import TrialState, View
from ray_ladder.tune.active import ACTIVE
from ray_ladder.tune.board import publish_run, record_move
from ray_ladder.tune.history import RungSpan, summary
from ray_ladder.tune.team import TeamBook
from ray_ladder.tune.trainable import LadderTrialSpec, spec_of

if TYPE_CHECKING:
    from ray_ladder.tune.callback import LadderCallback

logger = logging.getLogger(__name__)

_LIVE = (Trial.PENDING, Trial.RUNNING, Trial.PAUSED)


class LadderScheduler(TrialScheduler):
    """Tune scheduler that keeps every ladder trial on the best obtainable rung.

    * **Place**: a new trial goes to the best eligible rung with a free placement now
      (placements promised to other pending trials count as taken). With none free it is
      held (shown PAUSED) until one frees up, instead of queueing on one rung.
    * **Fall**: when a trial fails (its node was killed: a preemption) and Tune recovers
      it (``FailureConfig(max_failures>=1)``), it is re-placed on the best rung
      obtainable at that moment and restored from its last checkpoint there.
    * **Notice**: its rung going away (a drain; a reclaim of its team's units), it moves at
      its next checkpoint (:func:`ray_ladder.tune.should_checkpoint` asks), before the kill;
      so is a rung its team's spent ``demote`` budget takes.
    * **Climb**: once a better rung has been free for ``promotion_hysteresis`` observations
      (every ``probe_interval_s``), the trial is paused on its next result that carries a
      checkpoint, re-placed, and resumed from that checkpoint: never mid-step.

    All decisions come from :class:`ray_ladder.Selector`. Wrap another scheduler (ASHA,
    median stopping...) with ``base_scheduler``: its decisions stand, the ladder only
    turns a CONTINUE into a move. Pass :attr:`callback` to ``RunConfig(callbacks=...)``
    to get each trial's rung history and cost in its results (``result["ladder"]``).

    Args:
        base_scheduler: The scheduler that decides CONTINUE/PAUSE/STOP (default FIFO).
        on_event: Called with each trial's real moves (default: log them at INFO).
        clock: Monotonic clock for the selectors.
        wall_clock: Wall clock for the history.
        node_source: Node states (default: Ray's GCS); ``capacity_source=``, its old name, warns.

    Example:
        >>> scheduler = LadderScheduler(ASHAScheduler(metric="loss", mode="min"))
        ... # doctest: +SKIP
        >>> tune.Tuner(trainable, tune_config=tune.TuneConfig(scheduler=scheduler),
        ...            run_config=tune.RunConfig(callbacks=[scheduler.callback]))
        ... # doctest: +SKIP
    """

    _supports_buffered_results = False  # a move must happen at the result that checkpoints

    def __init__(
        self,
        base_scheduler: TrialScheduler | None = None,
        *,
        on_event: Callable[[TransitionEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        node_source: NodeSource | None = None,
        capacity_source: NodeSource | None = None,
    ) -> None:
        super().__init__()
        if isinstance(base_scheduler, LadderScheduler):
            raise ValueError("a LadderScheduler cannot wrap another LadderScheduler")
        self.base = base_scheduler or FIFOScheduler()
        self.on_event = on_event
        self._clock = clock
        self._wall = wall_clock
        given = resolve_node_source(node_source, "LadderScheduler", capacity_source=capacity_source)
        self._node_source: NodeSource | None = None if given is ray_node_states else given
        self._states: dict[str, TrialState] = {}
        self._views: dict[str, View] = {}
        self._specs: dict[str, LadderTrialSpec] = {}
        self._callback: LadderCallback | None = None
        self._team = TeamBook()  # a team-bound run's grants and demand

    # --- public views --------------------------------------------------------------------

    @property
    def callback(self) -> LadderCallback:
        """The Tune callback that writes each trial's ladder history into its results."""
        if self._callback is None:
            from ray_ladder.tune.callback import LadderCallback

            self._callback = LadderCallback(self)
        return self._callback

    def rung(self, trial_id: str) -> str | None:
        """The rung trial ``trial_id`` is placed on now."""
        state = self._states.get(trial_id)
        return state.placed if state else None

    def history(self, trial_id: str) -> list[RungSpan]:
        """Every rung the trial ran on, with times (the last span is open while it runs)."""
        state = self._states.get(trial_id)
        return list(state.spans) if state else []

    def summary(self, trial_id: str) -> dict[str, Any]:
        """History, time and cost per rung, total cost and moves of one trial."""
        state = self._states.get(trial_id)
        if state is None:
            return {}
        out = summary(state.spans, now=self._wall())
        top = state.spec.trial_ladder.eligible(state.constraints)[0].name
        out["seconds_below_top"] = sum(v["seconds"] for k, v in out["per_rung"].items()
                                       if k != top)
        out["placed"] = state.placed
        return out

    # --- TrialScheduler hooks ------------------------------------------------------------

    @property
    def metric(self) -> Any:
        return self.base.metric

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        ACTIVE.add(self)
        return self.base.set_search_properties(metric, mode, **spec)

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        self.base.on_trial_add(tune_controller, trial)
        state = self._states.get(trial.trial_id)
        if state is None:
            state = self._new_state(trial)
            if state is None or trial.status not in _LIVE:
                return
            rung = self._decide(state, self._clock())
            state.placed = None  # the trainable's default resources were only a guess
            if rung is None:
                state.phase = "to_park"  # listed as PENDING only after this hook returns
            else:
                self._place(trial, state, rung, "first placement", "first")
            return
        if trial.status != Trial.PENDING:
            return
        # Requeued by Tune after a failure: re-place it now, not where it was.
        rung = self._decide(state, self._clock())  # on_trial_error read capacity just now
        if rung is None:
            self._park(tune_controller, trial, state)
        else:
            self._place(trial, state, rung, f"{state.placed} lost", "lost")
        state.released = None

    def on_trial_error(self, tune_controller: Any, trial: Trial) -> None:
        state = self._states.get(trial.trial_id)
        if state is not None:
            view = self._view(state.spec)
            view.refresh()
            alive = view.node_alive(state.node_id)
            self._close(state, "trial failed" if alive else "node lost")
            state.phase = lifecycle.on_error(state.phase)
            if alive and state.placed and state.node_id:
                state.released = (state.placed, state.node_id)
        self.base.on_trial_error(tune_controller, trial)

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        decision = self.base.on_trial_result(tune_controller, trial, result)
        state = self._states.get(trial.trial_id)
        if state is None:
            return decision
        self._note_result(state, result)
        if (decision != TrialScheduler.CONTINUE or not result.get("should_checkpoint")
                or result.get("done")):
            return decision
        self._tick(tune_controller, self._clock())
        target, placed = state.selector.current, state.placed
        snap = self._view(state.spec).snap
        move = lifecycle.at_checkpoint(state.phase, placed, target,
                                       going=self._team.going(snap, state),
                                       demoted=self._team.demoted(snap, state),
                                       order=state.spec.trial_ladder.names)
        if move.kind == "stay":
            return decision
        if move.release and placed and state.node_id:
            state.released = (placed, state.node_id)
        self._close(state, move.ended_by)
        state.phase = move.phase
        return TrialScheduler.PAUSE

    def on_trial_complete(self, tune_controller: Any, trial: Trial, result: dict) -> None:
        state = self._states.get(trial.trial_id)
        if state is not None:
            self._close(state, "completed")
        self.base.on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller: Any, trial: Trial) -> None:
        state = self._states.get(trial.trial_id)
        if state is not None:
            self._close(state, "stopped")
        self.base.on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        # The wrapper Tune hands schedulers warns on private reads; ask the controller.
        controller = getattr(tune_controller, "_tune_controller", tune_controller)
        if getattr(controller, "_reuse_actors", False):
            raise ValueError("LadderScheduler moves trials between actors: set "
                             "reuse_actors=False in tune.TuneConfig()")
        now = self._clock()
        trials = self._live(tune_controller)
        self._tick(tune_controller, now, trials)
        publish_run(self, trials, now)  # `ray-ladder status`
        for trial, state in trials:
            if state.phase == "to_park":
                state.phase = lifecycle.on_listed("to_park", pending=trial.status == Trial.PENDING)
                if state.phase == "parked":
                    self._park(tune_controller, trial, state)
        for trial, state in trials:
            if trial.status == Trial.PAUSED and state.phase in lifecycle.HELD:
                rung = self._decide(state, now)
                if rung is not None:
                    self._place(trial, state, rung, lifecycle.resume_reason(state.phase),
                                lifecycle.resume_cause(state.phase))
                    state.released = None
                    return trial
        chosen = self.base.choose_trial_to_run(tune_controller)
        held = self._states.get(chosen.trial_id) if chosen is not None else None
        if chosen is None or held is None or chosen.status != Trial.PAUSED:
            return chosen
        if held.phase in lifecycle.HELD:
            return None  # ours, still waiting for a free rung
        rung = self._decide(held, now)  # paused by the base scheduler
        if rung is None:
            held.phase = "parked"
            return None
        self._place(chosen, held, rung, "resumed", "other")
        return chosen

    def debug_string(self) -> str:
        return f"(LadderScheduler) {self.base.debug_string()}"

    def save(self, checkpoint_path: str) -> None:
        self.base.save(checkpoint_path)

    def restore(self, checkpoint_path: str) -> None:
        self.base.restore(checkpoint_path)

    def refresh(self) -> None:
        """Read capacity now (a daemon thread does it every ``policy.probe_interval_s``)."""
        for view in list(self._views.values()):
            view.refresh()

    def stop(self) -> None:
        """Stop the capacity refresh threads (the callback does so when the run ends)."""
        for view in self._views.values():
            view.stop()
        self._views.clear()
        ACTIVE.discard(self)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_views"] = {}  # holds a lock and Ray state; rebuilt on use
        return state

    # --- internals -----------------------------------------------------------------------

    def _new_state(self, trial: Trial) -> TrialState | None:
        spec = spec_of(trial.get_trainable_cls())
        if spec is None:
            return None  # not a ladder trainable: leave it to the base scheduler
        spec = self._specs.setdefault(spec.uid, spec)  # one object per trainable
        constraints = spec.constraints_for(trial.config)
        pgf = trial.placement_group_factory
        placed = spec.rung_of(pgf.bundles if pgf is not None else None, None, constraints)
        state = TrialState(trial.trial_id, spec, constraints,
                            Selector(spec.trial_ladder, constraints), placed)
        self._states[trial.trial_id] = state
        return state

    def _view(self, spec: LadderTrialSpec) -> View:
        if spec.uid not in self._views:
            self._views[spec.uid] = View(spec, self._node_source, self._clock)
        return self._views[spec.uid]

    def _live(self, tune_controller: Any) -> list[tuple[Trial, TrialState]]:
        states = ((t, self._states.get(t.trial_id)) for t in tune_controller.get_trials())
        return [(t, s) for t, s in states if s is not None and t.status in _LIVE]

    def _free(self, state: TrialState, running: bool) -> dict[str, bool]:
        """Per rung: can this trial get a placement there now (placements promised to
        other trials that do not hold them yet count as taken)?"""
        view = self._view(state.spec)
        snap = view.snap
        promised = Counter(s.placed for s in self._states.values()
                           if s is not state and s.phase == "pending" and s.spec is state.spec)
        out = {}
        for name in state.selector.eligible:
            free = snap.rungs[name].available - promised[name]
            if (state.released and state.released[0] == name
                    and view.node_alive(state.released[1])):
                free += 1  # its own placement there is being given back
            out[name] = self._team.free(snap, state, name, free) > 0
        if (running and state.placed and not self._team.going(snap, state)
                and not self._team.demoted(snap, state)):
            out[state.placed] = True  # its own placement (not when it drains or is demoted)
        return out

    def _decide(self, state: TrialState, now: float) -> str | None:
        """Best eligible rung with a free placement now (a fresh first observation)."""
        free = self._free(state, running=False)
        rung = state.selector.best_obtainable(free)
        state.free = [name for name, ok in free.items() if ok]
        if rung is not None:  # hysteresis counts from this placement
            state.selector.reset()
            state.selector.observe(free, now)
        return rung

    def _tick(self, tune_controller: Any, now: float,
              trials: list[tuple[Trial, TrialState]] | None = None) -> None:
        """Let each running trial's selector observe every new capacity snapshot."""
        trials = self._live(tune_controller) if trials is None else trials
        for trial, state in trials:
            state.phase = lifecycle.on_status(state.phase, pending=trial.status == Trial.PENDING)
        self._team.observe([state for _, state in trials], now)
        for trial, state in trials:
            view = self._view(state.spec)
            if trial.status == Trial.RUNNING and state.observed_at != view.at:
                state.selector.observe(self._free(state, running=True), now)
                state.observed_at = view.at

    def _place(self, trial: Trial, state: TrialState, rung: str, reason: str,
               cause: TransitionCause) -> None:
        previous = state.placed
        state.phase = "pending"
        if rung != previous:
            trial.update_resources(state.spec.resources(rung))
            state.placed = rung
            ladder = state.spec.trial_ladder
            direction: Direction | None = None
            if previous is not None:
                direction = "down" if ladder.index(rung) > ladder.index(previous) else "up"
            self._emit(TransitionEvent(
                self._clock(), state.spec.ladder.name, previous, rung, direction,
                f"trial {trial.trial_id}: {reason}; free: {', '.join(state.free) or 'none'}",
                cause="first" if previous is None else cause), trial.trial_id)

    def _park(self, tune_controller: Any, trial: Trial, state: TrialState) -> None:
        ray_private.set_trial_status(tune_controller, trial, Trial.PAUSED)
        state.phase = "parked"
        logger.info("ladder %s: trial %s held: no eligible rung has a free placement",
                    state.spec.ladder.name, trial.trial_id)

    def _note_result(self, state: TrialState, result: dict) -> None:
        rung = result.get("ladder/rung")
        node = result.get("ladder/node_id")
        started = result.get("ladder/started_at")
        iteration = result.get("training_iteration")
        spans = state.spans
        last = spans[-1] if spans else None
        if last is not None and last.node_id == node and last.start == started:
            if last.end is None:
                spans[-1] = replace(last, last_iteration=iteration)
        else:
            if last is not None and last.end is None:
                self._close(state, "replaced")
            name = rung or state.placed
            if name is None:
                return
            cost = state.spec.trial_ladder.rung(name).cost_per_hour
            start = started if isinstance(started, (int, float)) else self._wall()
            spans.append(RungSpan(name, float(start), None, None, node, cost,
                                  iteration, iteration))
        state.node_id = node
        if rung is not None and rung != state.placed:
            logger.warning("ladder %s: trial %s reports rung %s but was placed on %s",
                           state.spec.ladder.name, state.trial_id, rung, state.placed)
            state.placed = rung

    def _close(self, state: TrialState, why: str) -> None:
        state.phase = lifecycle.on_close(state.phase)
        if state.spans and state.spans[-1].end is None:
            state.spans[-1] = replace(state.spans[-1], end=self._wall(), ended_by=why)

    def _emit(self, event: TransitionEvent, trial_id: str) -> None:
        record_move(event, trial_id)  # the event store and the transition metrics
        if self.on_event is not None:
            self.on_event(event)
        else:
            logger.info("ladder event %s", event.to_json())
