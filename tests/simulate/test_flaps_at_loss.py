"""Flaps count a fall at the loss, for every policy, not at the later re-placement."""

from __future__ import annotations

from ray_ladder.simulate import Trace, simulate
from ray_ladder.simulate.baselines import GkeComputeClass
from ray_ladder.simulate.figures import count_flaps
from tests.simulate.test_baselines import TICK, bits, ladder

H, A, C = "h100", "a100", "cpu"
# cpu is traced (no node up before it is asked for); h100 is there at 2-3 only.
TRACES: dict[str, Trace | str] = {H: bits(0, 0, 1, 1, 0, 0, 0, 0, 0, 0), A: "never",
                                  C: "always"}
GKE = GkeComputeClass(start_s=0, climb_s=0, provision_fail_s=150)


def test_gke_flap_counts_from_the_loss() -> None:
    # Starts on cpu; climbs to h100 at 2; h100 is lost at 4. GKE then walks its rules,
    # 150 s on each it cannot provision (h100, a100), and re-places on cpu at 7. The
    # fall is the loss at 4, two ticks after the climb: a flap within 200 s.
    r = simulate(ladder(H, A, C), TRACES, compare=[GKE], tick_s=TICK, flap_window_s=200)
    p = r.comparison[0]
    assert p.replay.target == [(0.0, 2), (2.0, 0), (7.0, 2)]
    assert p.replay.lost == [4.0]
    assert p.flaps == 1
    # Counted at the re-placement (7, five ticks after the climb) it was 0.
    assert count_flaps(p.replay.target, 3, 2) == 0


def test_the_window_decides_by_the_loss_not_the_walk() -> None:
    got = [simulate(ladder(H, A, C), TRACES, compare=[GKE], tick_s=TICK,
                    flap_window_s=w).comparison[0].flaps for w in (100, 199, 200, 450)]
    assert got == [0, 0, 1, 1]


def test_the_ladder_falls_at_the_loss_already() -> None:
    r = simulate(ladder(H, A, C), TRACES, hysteresis=[1], tick_s=TICK, flap_window_s=200)
    p = r.policies[0]
    assert p.replay.lost == [4] and (4, 2) in p.replay.target
    assert p.flaps == 1
