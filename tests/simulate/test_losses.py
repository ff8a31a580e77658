"""Where the ladder loses, the report says so and why: every figure a peer beats it on,
both values and a cause derived from the figures, on hand-made traces (exact rows)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_ladder import Ladder
from ray_ladder.cli import main
from ray_ladder.simulate import Trace, simulate

TICK = 100.0
LADDER = Ladder.from_dict({"name": "g", "policy": {"promotion_hysteresis": 1}, "rungs": [
    {"name": "h100", "resources": {"ladder/h100": 1}, "cost_per_hour": 12.0},
    {"name": "a100", "resources": {"ladder/a100": 1}, "cost_per_hour": 4.0},
    {"name": "cpu", "num_cpus": 1, "quality": 0.5, "cost_per_hour": 0.1},
    {"name": "shed", "kind": "shed", "quality": 0.0}]})
FREE = "ladder:h=1,fall=0,start=0,climb=0,warm=none"


def bits(*values: int) -> Trace:
    return Trace.from_steps([(i * TICK, bool(v)) for i, v in enumerate(values)],
                            duration_s=len(values) * TICK, resolution_s=TICK)


def flapping() -> dict[str, Trace | str]:
    return {"h100": bits(1, 1, 0, 1, 0, 1, 1, 1, 1, 1), "a100": "always", "cpu": "never"}


def test_each_figure_a_peer_wins_with_its_cause() -> None:
    # The ladder: h100 but at 2 and 4 (a100): 8 x 12 + 2 x 4 per 10 ticks, 10.40 per
    # served hour; its climb at 3 falls at 4: a flap. Karpenter lands on a100 at 2 and
    # stays (no climb by weight): 5.60, no flap. Ray native waits for h100 (nothing at 2
    # and 4): no flap either, but 12.00 and less served, which is no loss of the ladder's.
    r = simulate(LADDER, flapping(), tick_s=TICK,
                 compare=[FREE, "ray-native:start=0", "karpenter:start=0"])
    lad = r.comparison[0].label
    got = [(x.figure, x.ladder, x.peer, x.ladder_value, x.peer_value, x.cause, x.rung,
            x.why, x.overlap) for x in r.losses]
    assert got == [
        ("flaps", lad, "ray-native (start=0)", 1.0, 0.0, "climbs", None,
         "fewer flaps: climbs 0.00/day vs 172.80/day", None),
        ("flaps", lad, "karpenter (start=0)", 1.0, 0.0, "climbs", None,
         "fewer flaps: climbs 0.00/day vs 172.80/day", None),
        ("cost_per_served_hour", lad, "karpenter (start=0)", pytest.approx(10.4),
         pytest.approx(5.6), "less_time_on", "h100",
         "cheaper per served hour: serves on h100 20.0% vs 80.0% of the time", False),
    ]
    assert json.loads(r.to_json())["losses"][2]["cause"] == "less_time_on"


def test_the_standby_bill_is_named_when_it_is_the_difference() -> None:
    # Everyone on h100 all along; the ladder keeps a100 warm (standby 4/h), so its bill
    # per served hour is 16 against Ray native's 12.
    traces: dict[str, Trace | str] = {"h100": "always", "a100": "always", "cpu": "never"}
    r = simulate(LADDER, traces, tick_s=TICK, duration_s=1000,
                 compare=["ladder:h=1,fall=0,start=0,climb=0,warm=a100", "ray-native:start=0"])
    [loss] = r.losses
    assert (loss.figure, loss.cause, loss.ladder_value, loss.peer_value) == (
        "cost_per_served_hour", "standby", pytest.approx(16.0), pytest.approx(12.0))
    assert loss.why.startswith("cheaper per served hour: no standby bill like the ladder's")


def test_quality_and_service_losses_name_the_rung_and_the_shed_time() -> None:
    # The ladder at hysteresis 3 (300 s) sheds 1-3 while h100 comes back at 2; GKE with
    # no backoff has nothing at 1 and h100 from 2: better quality, on h100 longer, served
    # more.
    traces: dict[str, Trace | str] = {"h100": bits(1, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                      "a100": "never", "cpu": "never"}
    r = simulate(LADDER, traces, tick_s=TICK,
                 compare=["ladder:h=3,fall=0,start=0,climb=0,warm=none",
                          "gke-computeclass:start=0,climb=0,provision_fail=0,"
                          "backoff_initial=0,backoff_max=0"])
    by = {x.figure: x for x in r.losses}
    assert set(by) >= {"quality_weighted_availability", "not_served"}
    q = by["quality_weighted_availability"]
    assert (q.cause, q.rung, q.ladder_value, q.peer_value) == ("more_time_on", "h100",
                                                               0.7, 0.9)
    assert q.why == "better q x avail: serves on h100 90.0% vs 70.0% of the time"
    assert by["not_served"].why == ("serves more of the time: the ladder sheds 30.0% and "
                                    "has no rung 0.0%, vs 0.0% and 10.0%")


def test_where_the_ladder_loses_nothing_the_report_says_so(tmp_path: Path) -> None:
    traces: dict[str, Trace | str] = {"h100": "always", "a100": "never", "cpu": "never"}
    r = simulate(LADDER, traces, tick_s=TICK, duration_s=1000,
                 compare=[FREE, "ray-native:start=0", "karpenter:start=0"])
    assert r.losses == []
    lad = tmp_path / "l.yaml"
    lad.write_text("name: g\npolicy: {promotion_hysteresis: 1}\nrungs:\n"
                   "  - {name: h100, resources: {ladder/h100: 1}, cost_per_hour: 12}\n"
                   "  - {name: shed, kind: shed, quality: 0}\n")
    out = CliRunner().invoke(main, ["simulate", str(lad), "--trace", "h100=always",
                                    "--duration", "1h", "--tick", "10m", "--compare",
                                    "ladder:h=1,fall=0,start=0,climb=0,warm=none,karpenter"])
    assert out.exit_code == 0, out.output
    assert "Where the ladder loses" in out.output and "nowhere: no peer beats" in out.output


def test_the_cli_prints_each_loss(tmp_path: Path) -> None:
    lad = tmp_path / "l.yaml"
    lad.write_text("name: g\npolicy: {promotion_hysteresis: 1}\nrungs:\n"
                   "  - {name: h100, resources: {ladder/h100: 1}, cost_per_hour: 12}\n"
                   "  - {name: a100, resources: {ladder/a100: 1}, cost_per_hour: 4}\n"
                   "  - {name: shed, kind: shed, quality: 0}\n")
    out = CliRunner().invoke(main, ["simulate", str(lad), "--trace", "h100=outage:20m-30m",
                                    "--duration", "2h", "--tick", "10m", "--compare",
                                    f"{FREE},karpenter:start=0"],
                             env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert ("karpenter (start=0): $ per served h 5.33 vs the ladder's 11.33 (90% intervals "
            "apart): cheaper per served hour: serves on h100 16.7% vs 91.7% of the time"
            in out.output)
