"""A rung offered in several zones: every policy sees the union, Karpenter launches and
caches per offering (instance type x zone), on hand-made traces with exact rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_ladder import Ladder
from ray_ladder.cli import main
from ray_ladder.simulate import Trace, simulate
from ray_ladder.simulate.align import align
from ray_ladder.simulate.baselines import Karpenter, PolicyContext
from ray_ladder.simulate.baselines.offerings import Offerings
from ray_ladder.simulate.zones import RungTraces, flatten_zones, union_trace

TICK = 100.0
H, A, L, C = "h100", "a100", "l4", "cpu"


def bits(*values: int) -> Trace:
    return Trace.from_steps([(i * TICK, bool(v)) for i, v in enumerate(values)],
                            duration_s=len(values) * TICK, resolution_s=TICK)


def gpu_ladder() -> Ladder:
    return Ladder.from_dict({"name": "g", "policy": {"promotion_hysteresis": 1}, "rungs": [
        {"name": H, "resources": {"ladder/h100": 1}, "cost_per_hour": 12.0},
        {"name": A, "resources": {"ladder/a100": 1}, "cost_per_hour": 4.0},
        {"name": L, "resources": {"ladder/l4": 1}, "quality": 0.8, "cost_per_hour": 1.0},
        {"name": C, "num_cpus": 1, "quality": 0.5, "cost_per_hour": 0.1},
        {"name": "shed", "kind": "shed", "quality": 0.0}]})


def test_a_zoned_rung_is_obtainable_while_any_zone_is() -> None:
    u = union_trace({"a": bits(1, 1, 0, 0, 0, 1), "b": bits(0, 1, 1, 0, 0, 0)})
    assert (u.starts, u.values) == ((0.0, 300.0, 500.0), (True, False, True))
    assert u.source == "a=<trace> | b=<trace>" and u.duration_s == 600
    flat, zones = flatten_zones({H: {"a": "x.json", "b": "y.json"}, L: "always"})
    assert flat == {"h100/a": "x.json", "h100/b": "y.json", "l4": "always"}
    assert zones == {H: ["a", "b"]}


def test_every_policy_sees_the_union_and_karpenter_moves_zone_for_free() -> None:
    # Zone a loses h100 at 2, zone b has it from 1 on: the rung never goes. Karpenter's
    # node moves to b (an offering it would launch: up, not cached), like every policy.
    traces: dict[str, RungTraces] = {
        H: {"a": bits(1, 1, 0, 0, 0, 0, 0, 0), "b": bits(0, 1, 1, 1, 1, 1, 1, 1)},
              A: "never", L: "never", C: "never"}
    r = simulate(gpu_ladder(), traces, tick_s=TICK,
                 compare=["ladder:h=1,fall=0,start=0,climb=0", "ray-native:start=0",
                          "gke-computeclass:start=0", "karpenter:start=0", "litellm:start=0"])
    assert r.rungs[0]["obtainable_fraction"] == 1.0
    assert r.rungs[0]["trace"] == "a=<trace> | b=<trace>"
    for p in r.comparison:
        assert p.replay.served_per_tick() == [H] * 8, p.policy


def test_karpenter_caches_per_offering_and_falls_where_the_union_stays() -> None:
    # 2: zone a is lost, the node moves to b and a is cached (an interruption, ice_ttl
    # 500 s: until 7). 4: b is lost while a is back, but a is cached: Karpenter launches
    # no h100 (both offerings cached), refuses a100 (never) and lands on l4, where it
    # stays (no consolidation). Every other policy stays on h100 (the union is up).
    h100 = {"a": bits(1, 1, 0, 0, 1, 1, 1, 1, 1, 1), "b": bits(0, 1, 1, 1, 0, 0, 0, 0, 1, 1)}
    traces: dict[str, RungTraces] = {H: h100, A: "never", L: "always", C: "never"}
    k = Karpenter(start_s=0, retry_s=0, ice_ttl_s=500)
    r = simulate(gpu_ladder(), traces, tick_s=TICK, compare=[k, "ladder:h=1,fall=0,start=0"])
    assert r.comparison[0].replay.served_per_tick() == [H, H, H, H, L, L, L, L, L, L]
    assert r.comparison[1].replay.served_per_tick() == [H] * 10
    # With a 100 s cache, zone a is free again at 4: the node moves there.
    quick = simulate(gpu_ladder(), traces, tick_s=TICK,
                     compare=[Karpenter(start_s=0, retry_s=0, ice_ttl_s=100)]).comparison[0]
    assert quick.replay.served_per_tick() == [H] * 10


def test_karpenter_launches_in_a_zone_with_capacity() -> None:
    # Pending on nothing at 0 (h100 refused in both zones, cached 200 s); 2: the cache
    # expires and zone b has capacity: the launch lands there, start 100 s.
    traces: dict[str, RungTraces] = {
        H: {"a": bits(0, 0, 0, 0, 0, 0), "b": bits(0, 1, 1, 1, 1, 1)},
              A: "never", L: "never", C: "never"}
    p = simulate(gpu_ladder(), traces, tick_s=TICK, compare=[Karpenter(
        start_s=100, retry_s=0, ice_ttl_s=200)]).comparison[0]
    assert p.replay.served_per_tick() == [None, None, None, H, H, H]


def test_one_zone_is_the_single_trace() -> None:
    h = bits(1, 0, 0, 1, 1, 0, 1, 1)
    one = simulate(gpu_ladder(), {H: {"z": h}, A: bits(0, 1, 1, 0, 1, 1, 0, 0)},
                   tick_s=TICK, compare="all")
    plain = simulate(gpu_ladder(), {H: h, A: bits(0, 1, 1, 0, 1, 1, 0, 0)},
                     tick_s=TICK, compare="all")
    assert ([p.replay.served for p in one.comparison]
            == [p.replay.served for p in plain.comparison])


def test_offerings_follow_the_zones_and_the_rungs() -> None:
    lad = gpu_ladder()
    rungs = align({H: bits(1, 1, 1, 1), A: bits(1, 0, 0, 1)}, tick_s=TICK, ticks=4)
    zones = align({"h100/a": bits(1, 0, 0, 0), "h100/b": bits(0, 1, 1, 1)}, tick_s=TICK,
                  ticks=4)
    off = Offerings.of(PolicyContext.build(lad, rungs, zones=zones))
    assert off.zone == ("a", "b", "", "", "", "")  # h100's two zones, a100, l4, cpu, shed
    assert off.by_rung == ((0, 1), (2,), (3,), (4,), (5,))
    assert off.starts == [0, 1, 3]
    seen: list[tuple[bool, ...]] = []
    assert [(k0, k1, ok[:2]) for k0, k1, ok in off.feed(4, seen.append)] == [
        (0, 1, (True, True)), (1, 3, (True, False)), (3, 4, (True, True))]
    assert seen[1] == (False, True, False, True, True, True)  # untraced: always up
    assert Offerings.of(PolicyContext.build(lad, rungs)).single


def test_zones_of_one_rung_need_the_same_count() -> None:
    counts = Trace.from_counts([(0, 8), (100, 2)], duration_s=200, resolution_s=100)
    with pytest.raises(ValueError, match="different counts"):
        simulate(gpu_ladder(), {H: {"a": counts.at_least(8), "b": counts.at_least(2)}},
                 tick_s=TICK)
    r = simulate(gpu_ladder(), {H: {"a": counts, "b": counts}}, tick_s=TICK, need={H: 4})
    assert r.rungs[0]["need"] == 4 and r.rungs[0]["obtainable_fraction"] == 0.5


def test_the_cli_takes_one_trace_per_zone(tmp_path: Path) -> None:
    lad = tmp_path / "l.yaml"
    lad.write_text("name: t\nrungs:\n  - {name: h100, resources: {ladder/h100: 1}}\n"
                   "  - {name: shed, kind: shed, quality: 0}\n")
    ok = CliRunner().invoke(main, ["simulate", str(lad), "--trace", "h100/us-a=outage:0-1h",
                                   "--trace", "h100/us-b=outage:1h-2h", "--duration", "3h",
                                   "--tick", "10m", "--compare", "karpenter"])
    assert ok.exit_code == 0, ok.output
    assert "us-a=outage" in ok.output and "100.0%" in ok.output
    for args, match in ((["h100/us-a=always", "h100=never"], "has a trace already"),
                        (["h100=never", "h100/us-a=always"], "has a trace already"),
                        (["h100/us-a=always", "h100/us-a=never"], "zone 'us-a'")):
        bad = CliRunner().invoke(main, ["simulate", str(lad), "--duration", "1h",
                                        *[x for a in args for x in ("--trace", a)]])
        assert bad.exit_code == 2 and match in bad.output, bad.output
