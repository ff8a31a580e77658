"""The pure parts of the Train ladder: gang capacity, the planner's decisions, the history."""

from __future__ import annotations

import pytest

from ray_ladder import Constraints, InvalidConstraintsError, Ladder, LadderExhaustedError, Rung
from ray_ladder.core.placement import NodeState
from ray_ladder.train import (
    GangCapacity,
    GangPlanner,
    LadderSummary,
    TrainSpan,
    gang_capacity,
    train_ladder,
    worker_demand,
)
from ray_ladder.train.worker import WorkerSpec, rung_of

LADDER = Ladder.from_yaml("""
name: gang
policy: {promotion_hysteresis: 2}
rungs:
  - {name: h100x16, resources: {ladder/h100: 4}, train: {workers: 4}, cost_per_hour: 200}
  - {name: h100x8, resources: {ladder/h100: 2}, train: {workers: 4}, cost_per_hour: 98.4,
     tags: {jurisdiction: us}}
  - {name: a100x8, resources: {ladder/a100: 2}, train: {workers: 4}, cost_per_hour: 32.8,
     tags: {jurisdiction: eu}}
  - {name: a100x4, resources: {ladder/a100: 2}, train: {workers: 2}, cost_per_hour: 16.4,
     tags: {jurisdiction: eu}, params: {grad_accum_steps: 2}}
  - {name: cpu, num_cpus: 1}
""")


def node(node_id: str, total: dict[str, float], available: dict[str, float] | None = None,
         alive: bool = True, labels: dict[str, str] | None = None) -> NodeState:
    return NodeState(node_id, alive, total, total if available is None else available,
                     labels or {})


BIG = node("big", {"ladder/h100": 8, "CPU": 1})
A1 = node("a1", {"ladder/a100": 4, "CPU": 1})
A2 = node("a2", {"ladder/a100": 4, "CPU": 1})


def test_a_worker_is_one_placement_of_the_rung_unless_the_shape_says_otherwise() -> None:
    assert worker_demand(LADDER.rung("h100x8")) == {"ladder/h100": 2.0}
    rung = Rung(name="x", resources={"ladder/h100": 1}, num_cpus=2, num_gpus=1,
                accelerator_type="H100", train={"workers": 2})
    assert worker_demand(rung) == {"ladder/h100": 1.0, "CPU": 2.0, "GPU": 1.0,
                                   "accelerator_type:H100": 0.001}
    own = Rung(name="y", num_cpus=1, train={"workers": 2, "resources_per_worker": {"GPU": 1}})
    assert worker_demand(own) == {"GPU": 1.0}
    with pytest.raises(ValueError, match="no training shape"):
        worker_demand(LADDER.rung("cpu"))


def test_the_whole_gang_must_fit_not_one_bundle() -> None:
    h100x8 = LADDER.rung("h100x8")
    assert gang_capacity(h100x8, [BIG]) == GangCapacity(4, 4, 4)
    busy = node("big", {"ladder/h100": 8}, {"ladder/h100": 6})  # 3 bundles of 2 free
    cap = gang_capacity(h100x8, [busy])
    assert (cap.fit_now, cap.obtainable, cap.state) == (3, False, "busy")
    never = gang_capacity(LADDER.rung("h100x16"), [BIG])
    assert (never.fit_empty, never.state) == (2, "never")
    assert "never: 4 workers needed, 2 fit now, 2 on empty nodes" in never.why()


def test_bundles_spread_over_nodes_unless_the_strategy_is_strict() -> None:
    a100x8 = LADDER.rung("a100x8")
    assert gang_capacity(a100x8, [A1, A2]).obtainable  # 2 + 2
    assert not gang_capacity(a100x8, [A1]).obtainable
    assert not gang_capacity(a100x8, [A1, A2], strategy="STRICT_PACK").obtainable
    assert gang_capacity(LADDER.rung("a100x4"), [A1, A2], strategy="STRICT_SPREAD").obtainable
    assert not gang_capacity(a100x8, [A1, A2], strategy="STRICT_SPREAD").obtainable
    with pytest.raises(ValueError, match="valid"):
        gang_capacity(a100x8, [A1], strategy="SOMEWHERE")


def test_the_runs_own_group_counts_free_and_suspect_or_dead_nodes_do_not() -> None:
    a100x8 = LADDER.rung("a100x8")
    a1_used = node("a1", {"ladder/a100": 4}, {"ladder/a100": 0})
    assert not gang_capacity(a100x8, [a1_used, A2]).obtainable
    held = {"a1": {"ladder/a100": 4.0}}
    assert gang_capacity(a100x8, [a1_used, A2], held=held).obtainable
    cap = gang_capacity(a100x8, [A1, A2], exclude={"a2"})
    assert (cap.obtainable, cap.excluded) == (False, 1)
    dead = node("a2", {"ladder/a100": 4}, alive=False)
    assert not gang_capacity(a100x8, [A1, dead]).obtainable


def test_label_selectors_pick_the_nodes() -> None:
    rung = Rung(name="eu", resources={"ladder/a100": 2}, label_selector={"region": "eu"},
                train={"workers": 2})
    eu = node("e", {"ladder/a100": 4}, labels={"region": "eu"})
    us = node("u", {"ladder/a100": 4}, labels={"region": "us"})
    assert gang_capacity(rung, [eu]).obtainable
    assert not gang_capacity(rung, [us]).obtainable


def test_only_rungs_with_a_training_shape_are_train_rungs() -> None:
    assert train_ladder(LADDER).names == ["h100x16", "h100x8", "a100x8", "a100x4"]
    plain = Ladder.from_yaml("name: p\nrungs:\n  - {name: cpu, num_cpus: 1}\n")
    with pytest.raises(ValueError, match="no rung with a training shape"):
        train_ladder(plain)


def test_placement_takes_the_best_gang_that_fits_and_skips_one_that_never_fits() -> None:
    planner = GangPlanner(LADDER)
    placement = planner.place([BIG, A1, A2], now=0.0)
    assert placement.rung == "h100x8"
    assert placement.capacity["h100x16"].state == "never"
    assert placement.free() == ["h100x8", "a100x8", "a100x4"]
    assert planner.place([A1, A2], now=1.0).rung == "a100x8"
    assert planner.place([A1], now=2.0).rung == "a100x4"
    assert planner.place([], now=3.0).rung is None


def test_constraints_are_hard_and_checked_up_front() -> None:
    eu = GangPlanner(LADDER, Constraints(jurisdiction="eu"))
    assert eu.eligible == ["a100x8", "a100x4"]
    assert eu.place([BIG, A1, A2], now=0.0).rung == "a100x8"
    assert eu.place([BIG], now=1.0).rung is None  # the us node is free: never used
    assert eu.observe([BIG, A1, A2], 2.0, placed="a100x4") == "a100x8"
    assert GangPlanner(LADDER, Constraints(max_cost_per_hour=50)).top == "a100x8"
    with pytest.raises(InvalidConstraintsError, match="unknown jurisdiction"):
        GangPlanner(LADDER, Constraints(jurisdiction="mars"))
    with pytest.raises(InvalidConstraintsError, match="training shape"):
        GangPlanner(LADDER, Constraints(min_quality=1.0, max_cost_per_hour=1))


def test_a_running_group_climbs_only_after_the_hysteresis() -> None:
    planner = GangPlanner(LADDER)  # promotion_hysteresis: 2
    assert planner.place([A1, A2], now=0.0).rung == "a100x8"
    group = {"a1": {"ladder/a100": 4.0}, "a2": {"ladder/a100": 4.0}}
    used = [node("a1", {"ladder/a100": 4}, {}), node("a2", {"ladder/a100": 4}, {})]
    # Its own rung counts obtainable while it runs, though its bundles use the nodes.
    assert planner.observe(used, 1.0, placed="a100x8") is None
    assert planner.observe([BIG, *used], 2.0, placed="a100x8", held=group) is None
    assert planner.observe([BIG, *used], 3.0, placed="a100x8", held=group) == "h100x8"
    # The better gang went away: the streak starts again.
    assert planner.observe(used, 4.0, placed="a100x8") is None
    assert planner.observe([BIG, *used], 5.0, placed="a100x8") is None


def test_exhausted_lists_every_eligible_rung_and_why() -> None:
    planner = GangPlanner(LADDER)
    placement = planner.place([], now=0.0)
    err = planner.exhausted(placement.capacity, 12.0, now=100.0)
    assert isinstance(err, LadderExhaustedError)
    assert [a.rung for a in err.attempts] == ["h100x16", "h100x8", "a100x8", "a100x4"]
    assert "never: 4 workers needed, 0 fit now" in err.attempts[1].reason
    assert "waited 12s" in str(err)


def test_the_summary_adds_up_time_cost_and_moves() -> None:
    spans = [TrainSpan("h100x8", 0.0, 1800.0, "node lost", 4, ("big",) * 4, 98.4),
             TrainSpan("a100x8", 1810.0, 3610.0, "climbed to h100x8", 4, (), 32.8),
             TrainSpan("h100x8", 3620.0, 5420.0, "completed", 4, (), 98.4)]
    summary = LadderSummary("gang", "h100x8", spans, [{"to": "h100x8"}])
    assert summary.path == ["h100x8", "a100x8", "h100x8"]
    assert summary.moves == 2
    assert summary.per_rung == {"h100x8": {"seconds": 3600.0, "cost": pytest.approx(98.4)},
                                "a100x8": {"seconds": 1800.0, "cost": pytest.approx(16.4)}}
    assert summary.seconds_below_top == 1800.0
    assert summary.cost == pytest.approx(98.4 + 16.4)
    again = LadderSummary.from_dict(summary.to_dict())
    assert again == summary
    assert "a100x8: 1800.0s $16.40000 4 workers, left: climbed to h100x8" in summary.text()


def test_a_worker_finds_its_rung_from_its_resources_world_size_and_labels() -> None:
    spec = WorkerSpec(LADDER, None, "run")
    assert rung_of(spec, {"ladder/a100": 2.0}, 4, {}) == "a100x8"
    assert rung_of(spec, {"ladder/a100": 2.0}, 2, {}) == "a100x4"
    assert rung_of(spec, {"ladder/h100": 4.0}, 4, {}) == "h100x16"
    assert rung_of(spec, {"ladder/a100": 1.0}, 4, {}) is None
    eu = WorkerSpec(LADDER, Constraints(jurisdiction="eu"), "run")
    assert rung_of(eu, {"ladder/h100": 2.0}, 4, {}) is None  # never a rung it may not use


def test_a_ladder_result_reads_through_to_rays_and_pickles() -> None:
    import pickle

    from ray_ladder.train.trainer import LadderResult

    ray_result = type("Result", (), {"metrics": {"loss": 0.5}, "error": None})()
    result = LadderResult(ray_result, LadderSummary("l", "h"))
    assert result.metrics == {"loss": 0.5} and result.error is None
    assert result.ladder.path == []
    with pytest.raises(AttributeError):
        _ = result.no_such_thing
    copy = pickle.loads(pickle.dumps(LadderResult({"k": 1}, LadderSummary("l", "h"))))
    assert copy.result == {"k": 1}


def test_a_draining_node_takes_no_new_gang_and_is_never_climbed_to() -> None:
    draining = NodeState("big", True, {"ladder/h100": 8}, {"ladder/h100": 8}, {},
                         draining=True, drain_deadline=100.0)
    cap = gang_capacity(LADDER.rung("h100x8"), [draining])
    assert (cap.obtainable, cap.state, cap.draining) == (False, "busy", 1)
    assert "(1 node(s) draining)" in cap.why()
    planner = GangPlanner(LADDER)
    assert planner.place([draining, A1, A2], now=0.0).rung == "a100x8"
    for t in range(1, 5):  # hysteresis 2, and still never: the big node is going away
        assert planner.observe([draining, A1, A2], float(t), placed="a100x8") is None
