"""Ray native as a Serve deployment: replicas stay on fallback nodes, and Ray 2.60's
downscale stops fallback replicas first (ray-project/ray#61488), on hand-made traces."""

from __future__ import annotations

from ray_ladder import Ladder
from ray_ladder.simulate import Trace, simulate
from ray_ladder.simulate.baselines import RayNative
from tests.simulate.hand import TICK, A, C, H, L, bits


def gpu_ladder(*, train: bool = False) -> Ladder:
    top: dict[str, object] = {"name": H, "resources": {"ladder/h100": 1}}
    if train:
        top["train"] = {"workers": 2}
    return Ladder.from_dict({"name": "g", "rungs": [
        top, {"name": A, "resources": {"ladder/a100": 1}},
        {"name": L, "resources": {"ladder/l4": 1}, "quality": 0.8},
        {"name": C, "num_cpus": 1, "quality": 0.5}]})


def served(lad: Ladder, traces: dict[str, Trace | str], policy: RayNative) -> list[str | None]:
    p = simulate(lad, traces, compare=[policy], tick_s=TICK).comparison[0]
    return p.replay.served_per_tick()


CYCLE = RayNative(start_s=50, serve_cycle_s=300, downscale_delay_s=100)


def test_a_fixed_deployment_stays_on_its_fallback() -> None:
    # h100 is down at 0, so the replica starts on a100; Serve never moves it back.
    traces: dict[str, Trace | str] = {H: bits(0, 1, 1, 1, 1, 1, 1, 1, 1, 1), A: "always",
                                      L: "never", C: "never"}
    assert served(gpu_ladder(), traces, RayNative(start_s=50)) == [A] * 10


def test_the_downscale_stops_the_fallback_replica_first() -> None:
    # The peak at 3: its replica cannot go on a100's full node, so it pends and the
    # autoscaler launches h100; launched at 3.5 (50 s before the downscale at 4), it
    # runs at 4, and the downscale stops the replica on the fallback node (#61488).
    traces: dict[str, Trace | str] = {H: bits(0, 1, 1, 1, 1, 1, 1, 1, 1, 1), A: "always",
                                      L: "never", C: "never"}
    assert served(gpu_ladder(), traces, CYCLE) == [A, A, A, A, H, H, H, H, H, H]
    p = simulate(gpu_ladder(), traces, compare=[CYCLE], tick_s=TICK).comparison[0]
    assert (p.climbs, p.falls) == (1, 0)


def test_a_replica_still_starting_at_the_downscale_is_the_one_stopped() -> None:
    # h100 is lost at 4, as the peak's replica was to run: it is dropped, the deployment
    # stays on a100 until the next peak (6), whose replica runs at 7.
    traces: dict[str, Trace | str] = {H: bits(0, 1, 1, 1, 0, 1, 1, 1, 1, 1), A: "always",
                                      L: "never", C: "never"}
    assert served(gpu_ladder(), traces, CYCLE) == [A, A, A, A, A, A, A, H, H, H]
    slow = RayNative(start_s=150, serve_cycle_s=300, downscale_delay_s=100)
    assert served(gpu_ladder(), traces, slow) == [A] * 10  # never running by the downscale


def test_on_a_fallback_pool_with_room_the_drift_stays() -> None:
    # l4 is a pool you keep up (no trace): the replica lands there when h100 is lost at
    # 2, and each peak's replica lands there too (a node that is up, with room): the
    # downscale stops the newer of two fallback replicas. The deployment stays on l4.
    traces: dict[str, Trace | str] = {H: bits(1, 1, 0, 0, 1, 1, 1, 1, 1, 1), A: "never",
                                      C: "never"}
    cycle = RayNative(start_s=0, serve_cycle_s=300, downscale_delay_s=100)
    assert served(gpu_ladder(), traces, cycle) == [H, H, L, L, L, L, L, L, L, L]


def test_a_training_gang_has_no_serve_downscale() -> None:
    traces: dict[str, Trace | str] = {H: bits(0, 1, 1, 1, 1, 1, 1, 1, 1, 1), A: "always",
                                      L: "never", C: "never"}
    assert served(gpu_ladder(train=True), traces, CYCLE) == [A] * 10
