"""A comparison replays each distinct model once: policies whose replays would be the same
(GKE's two ``when_unsatisfiable`` settings for an accelerator pod, one spec given twice)
share one run and get the same figures under their own labels."""

from __future__ import annotations

import pytest

from ray_ladder import Ladder
from ray_ladder.simulate import Trace, simulate
from ray_ladder.simulate.baselines import GkeComputeClass, PolicyContext
from ray_ladder.simulate.baselines.engine import Engine
from ray_ladder.simulate.report import PolicyReport

TICK = 100.0
TRACES: dict[str, Trace | str] = {
    "top": Trace.from_steps([(0, True), (200, False), (400, True), (700, False)],
                            duration_s=1000, resolution_s=TICK),
    "low": Trace.from_steps([(0, True), (300, False), (500, True)], duration_s=1000,
                            resolution_s=TICK),
}


def _ladder(accelerated: bool) -> Ladder:
    ask = {"resources": {"ladder/x": 1}} if accelerated else {"num_cpus": 1}
    return Ladder.from_dict({"name": "t", "rungs": [
        {"name": "top", **ask, "cost_per_hour": 10.0},
        {"name": "low", **ask, "quality": 0.6, "cost_per_hour": 2.0}]})


def _figures(p: PolicyReport) -> dict[str, object]:
    return {k: v for k, v in p.to_dict().items() if k not in ("policy", "params")}


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One entry per baseline replay actually run (each starts one :class:`Engine`)."""
    seen: list[str] = []
    real = Engine.__init__

    def counted(self: Engine, ctx: PolicyContext) -> None:
        seen.append("run")
        real(self, ctx)

    monkeypatch.setattr(Engine, "__init__", counted)
    return seen


def test_gke_both_ways_is_one_run_for_an_accelerator_pod(runs: list[str]) -> None:
    r = simulate(_ladder(True), TRACES, tick_s=TICK, compare=[
        "gke-computeclass", "gke-computeclass:when_unsatisfiable=ScaleUpAnyway"])
    assert len(runs) == 1
    down, anyway = r.comparison
    assert anyway.policy == "gke-computeclass (when_unsatisfiable=ScaleUpAnyway)"
    assert anyway.params["when_unsatisfiable"] == "ScaleUpAnyway"
    assert anyway.replay.policy == anyway.policy and anyway.replay is not down.replay
    assert _figures(anyway) == _figures(down)


def test_gke_both_ways_are_two_runs_for_a_cpu_pod(runs: list[str]) -> None:
    r = simulate(_ladder(False), TRACES, tick_s=TICK, compare=[
        "gke-computeclass", "gke-computeclass:when_unsatisfiable=ScaleUpAnyway"])
    assert len(runs) == 2
    down, anyway = r.comparison
    # ScaleUpAnyway's default node serves "low" while every rule is out: a different row.
    assert anyway.served_fraction > down.served_fraction


def test_a_spec_given_twice_is_one_run(runs: list[str]) -> None:
    r = simulate(_ladder(True), TRACES, tick_s=TICK,
                 compare=["karpenter", "ray-native", "karpenter"])
    assert len(runs) == 2
    assert _figures(r.comparison[0]) == _figures(r.comparison[2])


def test_the_key_names_the_model_not_the_label() -> None:
    ctx_gpu = PolicyContext.build(_ladder(True), simulate(
        _ladder(True), TRACES, tick_s=TICK).timeline)
    anyway = GkeComputeClass(when_unsatisfiable="ScaleUpAnyway")
    assert anyway.replay_key(ctx_gpu) == GkeComputeClass().replay_key(ctx_gpu)
    assert GkeComputeClass(climb_s=1).replay_key(ctx_gpu) != GkeComputeClass().replay_key(
        ctx_gpu)
