"""Queued capacity (flex-start) in the simulator: "queue for H100, serve from A100 meanwhile"
against "take A100 on demand", on hand-made traces with exact fractions and bills."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_ladder import Ladder
from ray_ladder.cli import main
from ray_ladder.simulate import parse_trace_spec, queued_trace, simulate

HOUR = 3600.0
# Queue for H100 flex-start ($6/h, quality 1) or take A100 on demand ($4/h, quality 0.8).
LADDER = Ladder.from_dict({"name": "flex", "policy": {"promotion_hysteresis": 1}, "rungs": [
    {"name": "h100-flex", "resources": {"ladder/h100-flex": 1}, "quality": 1.0,
     "cost_per_hour": 6.0, "capacity": {"type": "flex-start", "max_wait_s": 7200}},
    {"name": "a100", "resources": {"ladder/a100": 1}, "quality": 0.8, "cost_per_hour": 4.0}]})
# Ten hours. The queue is granted after 2 h and the grant runs 6 h; queued again at 8 h,
# granted again at 10 h (the end). Per 2 h tick:  0h 2h 4h 6h 8h
#                                   h100-flex    -  1  1  1  -
QUEUED = "queued:wait=2h,run=6h"


def run(spec: str, **kw: object):
    return simulate(LADDER, {"h100-flex": spec}, duration_s=10 * HOUR, **kw)  # type: ignore[arg-type]


def test_the_queued_trace_is_a_wait_then_a_granted_window_then_the_queue_again() -> None:
    t = parse_trace_spec(QUEUED, duration_s=10 * HOUR)
    assert t.starts == (0.0, 2 * HOUR, 8 * HOUR) and t.values == (False, True, False)
    assert t.resolution_s == 2 * HOUR and t.obtainable_fraction() == 0.6
    assert t.source == "queued:wait=7200,run=21600"
    again = parse_trace_spec("queued:wait=1h,run=2h", duration_s=10 * HOUR)
    assert again.starts == tuple(h * HOUR for h in (0, 1, 3, 4, 6, 7, 9))
    once = queued_trace(HOUR, 2 * HOUR, at_s=HOUR, requeue=False, duration_s=10 * HOUR)
    assert once.starts == (0.0, 2 * HOUR, 4 * HOUR) and once.values == (False, True, False)
    forever = parse_trace_spec("queued:wait=30m")  # granted for good after the wait
    assert forever.starts == (0.0, 1800.0) and forever.duration_s is None


@pytest.mark.parametrize(("spec", "match"), [
    ("queued:run=1h", "missing wait"),
    ("queued:wait=1h,grant=2h", "bad argument 'grant=2h'; valid keys: wait, run, at, requeue"),
    ("queued:wait=1h,requeue=maybe", "requeue must be on or off"),
    ("queued:wait=1h,run=0", "run_s must be > 0"),
    ("queued:wait=soon", "not a duration"),
])
def test_bad_queued_specs_name_the_fix(spec: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_trace_spec(spec, duration_s=10 * HOUR)


def test_a_queue_granted_again_and_again_needs_a_horizon() -> None:
    with pytest.raises(ValueError, match="needs a duration"):
        parse_trace_spec("queued:wait=1h,run=2h")


def test_queue_for_flex_start_and_serve_from_a100_meanwhile() -> None:
    p = run(QUEUED).policies[0]
    assert p.rung_fraction == {"h100-flex": 0.6, "a100": 0.4}
    assert p.unserved_fraction == 0 and (p.climbs, p.falls) == (1, 1)
    assert p.quality_weighted_availability == pytest.approx(0.6 * 1.0 + 0.4 * 0.8)  # 0.92
    assert p.cost == pytest.approx(6 * 6.0 + 4 * 4.0)  # 52: nothing is billed while queued
    assert p.degraded_s_total == 4 * HOUR and p.degraded_episodes == 2


def test_take_a100_on_demand() -> None:
    p = run("never").policies[0]
    assert p.rung_fraction == {"h100-flex": 0.0, "a100": 1.0}
    assert p.quality_weighted_availability == pytest.approx(0.8)
    assert p.cost == pytest.approx(10 * 4.0)  # 40


def test_hysteresis_and_a_replica_start_delay_the_climb_onto_the_granted_capacity() -> None:
    h2 = run(QUEUED, hysteresis=2).policies[0]  # seen at 2h and 4h: climbs at 4h
    assert h2.rung_fraction == {"h100-flex": 0.4, "a100": 0.6}
    assert h2.cost == pytest.approx(4 * 6.0 + 6 * 4.0)  # 48
    slow = run(QUEUED, promotion_delay_s=HOUR).policies[0]  # climbs at 2h, serves from 3h
    assert slow.rung_fraction == {"h100-flex": 0.5, "a100": 0.5}
    assert slow.quality_weighted_availability == pytest.approx(0.5 + 0.5 * 0.8)
    # a100 serves 5 h, h100-flex 5 h, plus the hour its replica starts (billed while it boots)
    assert slow.cost == pytest.approx(5 * 4.0 + 5 * 6.0 + 1 * 6.0)
    assert slow.cost_starting == pytest.approx(6.0)


def test_the_cli_takes_a_queued_trace(tmp_path: Path) -> None:
    ladder = tmp_path / "flex.yaml"
    ladder.write_text(LADDER.to_yaml())
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["simulate", str(ladder), "--trace",
                                       f"h100-flex={QUEUED}", "--duration", "10h",
                                       "--json", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["policies"][0]["rung_fraction"] == {"h100-flex": 0.6, "a100": 0.4}
    assert report["rungs"][0]["trace"] == "queued:wait=7200,run=21600"
