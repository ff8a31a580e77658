"""LadderScheduler decisions, driven by fake trials and injected capacity (no Ray cluster)."""

from __future__ import annotations

import pytest
import ray.cloudpickle
from hypothesis import given, settings
from hypothesis import strategies as st
from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from ray_ladder import Ladder
from ray_ladder.core.events import TransitionEvent
from ray_ladder.core.exceptions import InvalidConstraintsError
from ray_ladder.testing import FakeNodes
from ray_ladder.tune import (
    LadderScheduler,
    RungSpan,
    Tuner,
    current_rung,
    ladder_configs,
    rung_history,
    with_ladder,
)
from ray_ladder.tune import board as tune_board

LADDER = Ladder.from_dict({
    "name": "t",
    "policy": {"promotion_hysteresis": 2, "probe_interval_s": 3600},
    "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}, "label_selector": {"ladder.rung": "h100"},
         "cost_per_hour": 12.0, "tags": {"jurisdiction": "eu"}},
        {"name": "a100", "resources": {"ladder/a100": 1}, "cost_per_hour": 4.0,
         "tags": {"jurisdiction": "us"}},
        {"name": "cpu", "num_cpus": 2, "cost_per_hour": 0.1, "tags": {"jurisdiction": "eu"},
         "quality": 0.5},
        {"name": "shed", "kind": "shed", "quality": 0.0},
    ],
})


def train_fn(config):
    return None


def fake_nodes(*rungs: str) -> FakeNodes:
    """One node per rung named (ids ``<rung>-<n>``); a trial's placement uses its units."""
    nodes = FakeNodes(LADDER)
    for rung in rungs:
        nodes.add(rung)
    return nodes


class FakeTrial:
    """The few Trial attributes the scheduler reads."""

    def __init__(self, trainable, trial_id: str = "t0", config: dict | None = None) -> None:
        self.trial_id = trial_id
        self.config = config or {}
        self.status = Trial.PENDING
        self._trainable = trainable
        self.placement_group_factory = trainable._ladder_spec.resources("h100")

    def get_trainable_cls(self):
        # Tune unpickles the registered trainable on every call: never the same object.
        return ray.cloudpickle.loads(ray.cloudpickle.dumps(self._trainable))

    def update_resources(self, resources) -> None:
        assert self.status != Trial.RUNNING, "Tune refuses to change a running trial"
        self.placement_group_factory = resources

    @property
    def rung(self) -> str:
        return self._trainable._ladder_spec.rung_of(self.placement_group_factory.bundles)


class Controller:
    def __init__(self) -> None:
        self.trials: list[FakeTrial] = []

    def get_trials(self):
        return list(self.trials)

    def _set_trial_status(self, trial, status) -> None:
        trial.status = status


class Harness:
    """A scheduler, a fake controller and an injected cluster and clocks."""

    def __init__(self, cluster: FakeNodes, constraints=None, base=None) -> None:
        self.cluster = cluster
        self.now = [100.0]
        self.events = []
        self.sched = LadderScheduler(base, on_event=self.events.append,
                                     clock=lambda: self.now[0], wall_clock=lambda: self.now[0],
                                     node_source=cluster)
        self.ctrl = Controller()
        self.trainable = with_ladder(train_fn, LADDER, constraints)
        self.iteration: dict[str, int] = {}
        self.node: dict[str, str] = {}
        self.bundle: dict[str, dict] = {}

    def add(self, trial_id: str = "t0", config: dict | None = None) -> FakeTrial:
        trial = FakeTrial(self.trainable, trial_id, config)
        self.ctrl.trials.append(trial)
        self.sched.on_trial_add(self.ctrl, trial)
        return trial

    def choose(self):
        """One controller step: a PAUSED trial the scheduler picks becomes PENDING."""
        trial = self.sched.choose_trial_to_run(self.ctrl)
        if trial is not None and trial.status == Trial.PAUSED:
            trial.status = Trial.PENDING
        return trial

    def start(self, trial: FakeTrial) -> str:
        """The trial's actor starts on a node of its rung, which then is busy (its last
        actor, stopped by now, gave its node back)."""
        if trial.trial_id in self.node:
            self.cluster.free(self.node[trial.trial_id], self.bundle[trial.trial_id])
        node_id = self.cluster.node_ids(trial.rung)[0]
        bundle = trial.placement_group_factory.bundles[0]
        self.cluster.use(node_id, bundle)
        trial.status = Trial.RUNNING
        self.node[trial.trial_id], self.bundle[trial.trial_id] = node_id, bundle
        self.started = self.now[0]
        self.sched.refresh()
        return node_id

    def result(self, trial: FakeTrial, checkpoint: bool = False, **extra) -> str:
        it = self.iteration[trial.trial_id] = self.iteration.get(trial.trial_id, 0) + 1
        flat = {"training_iteration": it, "should_checkpoint": checkpoint, "done": False,
                "ladder/rung": trial.rung, "ladder/node_id": self.node[trial.trial_id],
                "ladder/started_at": self.started, **extra}
        decision = self.sched.on_trial_result(self.ctrl, trial, flat)
        if decision == TrialScheduler.PAUSE:
            trial.status = Trial.PAUSED  # Tune saves the checkpoint and stops the actor
        return decision

    def observe(self, seconds: float = 1.0) -> None:
        """Time passes and a new capacity snapshot arrives."""
        self.now[0] += seconds
        self.sched.refresh()
        self.choose()

    def fail(self, trial: FakeTrial) -> None:
        """Tune's recovery path: on_trial_error, status PENDING, on_trial_add."""
        self.sched.on_trial_error(self.ctrl, trial)
        trial.status = Trial.PENDING
        self.sched.on_trial_add(self.ctrl, trial)


def test_new_trial_takes_the_best_free_rung():
    h = Harness(fake_nodes("h100", "a100", "cpu"))
    assert h.add().rung == "h100"
    assert h.events[-1].cause == "first"


def test_a_move_is_recorded_for_its_trial_by_id_not_by_its_words(monkeypatch):
    logged = []
    monkeypatch.setattr(tune_board, "log_event",
                        lambda event, **kw: logged.append((event, kw)))
    h = Harness(fake_nodes("h100", "a100", "cpu"))
    h.add("t7")
    tune_board.record_move(TransitionEvent(0.0, "t", None, "h100", None, "reworded"), "t8")
    assert [(kw["source"], kw["trial"]) for _, kw in logged] == [("trial t7", "t7"),
                                                                ("trial t8", "t8")]


def test_busy_top_rung_sends_a_new_trial_lower():
    cluster = fake_nodes("h100", "a100", "cpu")
    cluster.use("h100-1", {"CPU": 1.0, "ladder/h100": 1.0})
    h = Harness(cluster)
    assert h.add().rung == "a100"


def test_a_burst_of_trials_spreads_over_free_rungs():
    h = Harness(fake_nodes("h100", "a100", "cpu"))
    rungs = [h.add(f"t{i}").rung for i in range(3)]
    assert rungs == ["h100", "a100", "cpu"]


def test_no_free_rung_holds_the_trial_until_one_frees():
    cluster = fake_nodes("h100")
    cluster.use("h100-1", {"CPU": 1.0, "ladder/h100": 1.0})
    h = Harness(cluster)
    trial = h.add()
    assert h.choose() is None
    assert trial.status == Trial.PAUSED  # held: not queued on one rung
    cluster.add("a100")
    h.sched.refresh()
    assert h.choose() is trial and trial.rung == "a100"
    assert trial.status == Trial.PENDING


def test_fall_on_lost_node_goes_to_best_obtainable_rung():
    h = Harness(fake_nodes("h100", "a100", "cpu"))
    trial = h.add()
    h.start(trial)
    h.result(trial, checkpoint=True)
    h.now[0] += 30
    h.cluster.kill("h100-1")
    h.fail(trial)
    assert trial.rung == "a100" and trial.status == Trial.PENDING
    span = h.sched.history("t0")[0]
    assert (span.rung, span.ended_by, span.seconds()) == ("h100", "node lost", 30.0)
    assert h.events[-1].to_dict()["from"] == "h100" and h.events[-1].direction == "down"
    assert h.events[-1].cause == "lost"


def test_failure_on_a_healthy_node_stays_on_its_rung():
    h = Harness(fake_nodes("h100", "a100"))
    trial = h.add()
    h.start(trial)  # h100 now shows busy: the failed trial's own placement
    h.result(trial)
    h.fail(trial)
    assert trial.rung == "h100"
    assert h.sched.history("t0")[0].ended_by == "trial failed"


def climbing_harness() -> tuple[Harness, FakeTrial]:
    h = Harness(fake_nodes("a100", "cpu"))
    trial = h.add()
    assert trial.rung == "a100"
    h.start(trial)
    h.result(trial, checkpoint=True)
    h.cluster.add("h100")
    return h, trial


def test_climb_waits_for_hysteresis():
    h, trial = climbing_harness()
    h.observe()  # 1st observation of a free h100 (promotion_hysteresis is 2)
    assert h.result(trial, checkpoint=True) == TrialScheduler.CONTINUE
    h.observe()
    assert h.result(trial, checkpoint=True) == TrialScheduler.PAUSE


def test_climb_happens_only_at_a_result_with_a_checkpoint():
    h, trial = climbing_harness()
    h.observe()
    h.observe()
    assert h.result(trial) == TrialScheduler.CONTINUE  # mid-interval: keep training
    assert h.result(trial, checkpoint=True) == TrialScheduler.PAUSE
    assert h.choose() is trial and trial.rung == "h100"
    assert [s.ended_by for s in h.sched.history("t0")] == ["climbed to h100"]
    assert (h.events[-1].direction, h.events[-1].cause) == ("up", "promoted")


def test_climb_target_lost_before_the_move_resumes_where_it_was():
    h, trial = climbing_harness()
    h.observe()
    h.observe()
    assert h.result(trial, checkpoint=True) == TrialScheduler.PAUSE
    h.cluster.kill("h100-1")
    h.sched.refresh()
    assert h.choose() is trial and trial.rung == "a100"  # its own slot counts as free


def test_base_scheduler_decisions_stand():
    class Stopper(TrialScheduler):
        def on_trial_add(self, *a): pass
        def on_trial_result(self, *a): return TrialScheduler.STOP
        def choose_trial_to_run(self, *a): return None

    h = Harness(fake_nodes("a100", "cpu", "h100"), base=Stopper())
    h.cluster.use("h100-1", {"CPU": 1.0, "ladder/h100": 1.0})
    trial = h.add()
    h.start(trial)
    assert h.result(trial, checkpoint=True) == TrialScheduler.STOP


def test_residency_eu_trial_skips_the_us_rung():
    h = Harness(fake_nodes("h100", "a100", "cpu"), constraints={"jurisdiction": "eu"})
    trial = h.add()
    h.start(trial)
    h.result(trial, checkpoint=True)
    h.cluster.kill("h100-1")
    h.fail(trial)
    assert trial.rung == "cpu"


def test_preempted_trial_with_no_free_rung_is_held_then_placed():
    cluster = fake_nodes("h100", "a100", "cpu")
    cluster.use("cpu-1", {"CPU": 2.0})  # the only other EU rung is busy
    h = Harness(cluster, constraints={"jurisdiction": "eu"})
    trial = h.add()
    h.start(trial)
    h.result(trial, checkpoint=True)
    cluster.kill("h100-1")
    h.fail(trial)
    assert trial.status == Trial.PAUSED  # held, not queued on the dead h100
    assert h.choose() is None
    cluster.free("cpu-1")  # the CPU rung frees up
    h.sched.refresh()
    assert h.choose() is trial and trial.rung == "cpu"


def test_per_trial_constraints_from_config():
    h = Harness(fake_nodes("a100", "cpu"),
                constraints=lambda config: {"jurisdiction": config["region"]})
    assert h.add("eu", {"region": "eu"}).rung == "cpu"
    assert h.add("us", {"region": "us"}).rung == "a100"


def alive(h: Harness, rung: str) -> bool:
    return bool(h.cluster.node_ids(rung))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["kill", "add", "result", "checkpoint", "fail"]),
                          st.sampled_from(["h100", "a100", "cpu"])), max_size=25))
def test_residency_holds_whatever_capacity_does(steps):
    """Kills, adds, results, checkpoints and failures in any order: never off the EU rungs."""
    h = Harness(fake_nodes("h100", "a100", "cpu"), constraints={"jurisdiction": "eu"})
    trial = h.add()
    for op, rung in steps:
        if op == "kill" and alive(h, rung):
            h.cluster.kill(h.cluster.node_ids(rung)[0])
        elif op == "add":
            h.cluster.add(rung)
        elif op in ("result", "checkpoint") and trial.status == Trial.RUNNING:
            h.result(trial, checkpoint=op == "checkpoint")
        elif op == "fail" and trial.status == Trial.RUNNING:
            h.fail(trial)
        h.observe()
        if trial.status == Trial.PENDING and alive(h, trial.rung):
            h.start(trial)
        assert trial.rung in ("h100", "cpu")
        assert {s.rung for s in h.sched.history("t0")} <= {"h100", "cpu"}


def test_summary_has_time_and_cost_per_rung():
    h = Harness(fake_nodes("h100", "a100"))
    trial = h.add()
    h.start(trial)
    h.result(trial, checkpoint=True)
    h.now[0] += 1800
    h.cluster.kill("h100-1")
    h.fail(trial)
    h.start(trial)
    h.result(trial)
    h.now[0] += 900
    block = h.sched.summary("t0")
    assert block["per_rung"] == {"h100": {"seconds": 1800.0, "cost": 6.0},
                                 "a100": {"seconds": 900.0, "cost": 1.0}}
    assert block["moves"] == 1 and block["cost"] == 7.0
    assert block["seconds_below_top"] == 900.0
    spans = rung_history({"ladder": block})
    assert [s.rung for s in spans] == ["h100", "a100"]
    assert spans[1].end is None  # still running


def test_rung_history_reads_lists_and_results():
    span = RungSpan("a100", 1.0, 2.0, "completed", "n", 4.0, 1, 3)
    metrics = {"trial_id": "x", "ladder": {"history": [span.to_dict()]}}
    assert rung_history(metrics) == [span]

    class Result:
        pass

    r = Result()
    r.metrics = metrics
    assert rung_history(r) == [span]
    assert rung_history([r]) == {"x": [span]}


def test_with_ladder_rejects_constraints_no_rung_knows():
    with pytest.raises(InvalidConstraintsError, match="jurisdiction"):
        with_ladder(train_fn, LADDER, {"jurisdiction": "mars"})
    with pytest.raises(InvalidConstraintsError, match="no compute rung"):
        with_ladder(train_fn, LADDER, {"max_cost_per_hour": 0.01})
    with pytest.raises(TypeError, match="function of config"):
        with_ladder("train", LADDER)


def test_resources_follow_the_rung():
    spec = with_ladder(train_fn, LADDER, num_cpus=1)._ladder_spec
    h100 = spec.resources("h100")
    assert h100.bundles == [{"ladder/h100": 1.0, "CPU": 1.0}]
    assert h100._bound.kwargs["bundle_label_selector"] == [{"ladder.rung": "h100"}]
    assert spec.resources("cpu").bundles == [{"CPU": 2.0}]  # the rung's own num_cpus
    assert spec.trial_ladder.names == ["h100", "a100", "cpu"]  # compute rungs only
    assert spec.rung_of([{"CPU": 1, "ladder/a100": 1}]) == "a100"
    assert spec.rung_of([{"CPU": 1, "ladder/h100": 1}], labels={"ladder.rung": "x"}) is None


def test_current_rung_outside_a_trial_says_so():
    with pytest.raises(RuntimeError, match="with_ladder"):
        current_rung()


def test_ladder_configs_wire_scheduler_and_callback(tmp_path):
    tune_config, run_config = ladder_configs(
        tune.TuneConfig(num_samples=2),
        tune.RunConfig(storage_path=str(tmp_path),
                       failure_config=tune.FailureConfig(max_failures=2)))
    assert isinstance(tune_config.scheduler, LadderScheduler)
    assert tune_config.num_samples == 2
    assert run_config.callbacks == [tune_config.scheduler.callback]
    again, run_again = ladder_configs(tune_config, run_config)
    assert again.scheduler is tune_config.scheduler and len(run_again.callbacks) == 1
    with pytest.raises(ValueError, match="reuse_actors"):
        ladder_configs(tune.TuneConfig(reuse_actors=True))


def test_tuner_is_a_tune_tuner(tmp_path):
    tuner = Tuner(with_ladder(train_fn, LADDER), param_space={"x": 1},
                  run_config=tune.RunConfig(storage_path=str(tmp_path), name="t"))
    assert isinstance(tuner, tune.Tuner)
    internal = tuner._local_tuner
    assert isinstance(internal._tune_config.scheduler, LadderScheduler)
    assert internal._run_config.callbacks[-1] is internal._tune_config.scheduler.callback


def test_the_old_capacity_source_keyword_still_works_for_a_release_and_warns():
    nodes = fake_nodes("a100")
    with pytest.warns(DeprecationWarning, match=r"LadderScheduler\(capacity_source=.*node_source="):
        sched = LadderScheduler(capacity_source=nodes)
    assert sched._node_source is nodes
