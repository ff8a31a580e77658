"""The job-across-clusters decision (ray_ladder.jobs.policy): one attempt at a time, falls
when the rung or cluster is lost, climbs at a checkpoint after the hysteresis."""

from __future__ import annotations

import pytest

from ray_ladder import Ladder
from ray_ladder.core.selector import Selector
from ray_ladder.jobs.policy import Run, Seen, decide

LADDER = Ladder.from_yaml("""
name: train
policy: {promotion_hysteresis: 2}
clusters:
  onprem: {address: "http://onprem:8265", site: onprem}
  cloud: {address: "http://cloud:8265", site: cloud}
rungs:
  - {name: onprem-gpu, cluster: onprem, resources: {ladder/gpu: 1}}
  - {name: cloud-gpu, cluster: cloud, resources: {ladder/gpu: 1}}
""")
BOTH = {"onprem-gpu": True, "cloud-gpu": True}
CLOUD = {"onprem-gpu": False, "cloud-gpu": True}
NONE = {"onprem-gpu": False, "cloud-gpu": False}


@pytest.fixture
def selector() -> Selector:
    return Selector(LADDER)


def kinds(acts):
    return [(a.kind, a.rung, a.cause) for a in acts]


def test_the_first_attempt_goes_to_the_best_obtainable_cluster_rung(selector):
    run, acts = decide(Run(), Seen(0, CLOUD), selector)
    assert kinds(acts) == [("submit", "cloud-gpu", "start")] and run.attempt == 1


def test_nothing_obtainable_waits_and_submits_nothing(selector):
    run, acts = decide(Run(), Seen(0, NONE), selector)
    assert [a.kind for a in acts] == ["wait"] and run.attempt == 0 and run.rung is None


def test_a_lost_rung_stops_the_attempt_and_the_next_goes_only_after_it_is_over(selector):
    run, _ = decide(Run(), Seen(0, BOTH), selector)
    run, acts = decide(run, Seen(1, CLOUD, "RUNNING"), selector)
    assert kinds(acts) == [("stop", "onprem-gpu", None)]
    run, acts = decide(run, Seen(2, CLOUD, "RUNNING"), selector)  # still stopping
    assert acts == []
    run, acts = decide(run, Seen(3, CLOUD, "STOPPED"), selector)
    assert kinds(acts) == [("submit", "cloud-gpu", "fall")] and run.attempt == 2


def test_a_lost_cluster_is_placed_again_at_once(selector):
    run, _ = decide(Run(), Seen(0, BOTH), selector)
    run, acts = decide(run, Seen(1, CLOUD, "LOST"), selector)
    assert kinds(acts) == [("submit", "cloud-gpu", "lost")]


def test_the_climb_waits_for_the_hysteresis_then_for_the_job_to_yield(selector):
    run, _ = decide(Run(), Seen(0, CLOUD), selector)
    run, acts = decide(run, Seen(1, BOTH, "RUNNING"), selector)
    assert acts == []  # one observation: under the hysteresis of 2
    run, acts = decide(run, Seen(2, BOTH, "RUNNING"), selector)
    assert kinds(acts) == [("ask_climb", "onprem-gpu", None)]
    run, acts = decide(run, Seen(3, BOTH, "RUNNING"), selector)
    assert acts == []  # asked once; the job stops at its next checkpoint
    run, acts = decide(run, Seen(4, BOTH, "SUCCEEDED", yielded=True), selector)
    assert kinds(acts) == [("submit", "onprem-gpu", "climb")] and run.attempt == 2


def test_success_without_a_yield_finishes_the_run(selector):
    run, _ = decide(Run(), Seen(0, BOTH), selector)
    run, acts = decide(run, Seen(1, BOTH, "SUCCEEDED"), selector)
    assert kinds(acts) == [("finish", "onprem-gpu", None)] and run.done == "SUCCEEDED"
    assert decide(run, Seen(2, BOTH, "RUNNING"), selector)[1] == []


def test_failures_on_an_obtainable_rung_are_retried_then_fail_the_run(selector):
    run, _ = decide(Run(), Seen(0, BOTH), selector)
    run, acts = decide(run, Seen(1, BOTH, "FAILED"), selector, max_failures=2)
    assert kinds(acts) == [("submit", "onprem-gpu", "retry")]
    run, acts = decide(run, Seen(2, BOTH, "FAILED"), selector, max_failures=2)
    assert [a.kind for a in acts] == ["finish"] and run.done == "FAILED"


def test_a_rung_lost_while_a_climb_is_asked_still_stops_the_attempt(selector):
    run, _ = decide(Run(), Seen(0, CLOUD), selector)
    for t in (1, 2):
        run, _ = decide(run, Seen(t, BOTH, "RUNNING"), selector)
    assert run.climb_to == "onprem-gpu"
    run, acts = decide(run, Seen(3, {"onprem-gpu": True, "cloud-gpu": False}, "RUNNING"),
                       selector)
    assert kinds(acts) == [("stop", "cloud-gpu", None)]
