"""A ladder's promotion hysteresis is seconds (probes of probe_interval_s), not ticks.

``promotion_hysteresis: 3`` at ``probe_interval_s: 1`` is 3 s: three ticks of a 1 s trace,
one tick of a 300 s trace (rounded up, at least one), never 15 minutes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_ladder import Ladder
from ray_ladder.cli import main
from ray_ladder.simulate import simulate
from ray_ladder.simulate.replay import hysteresis_ticks, ladder_hysteresis_s

H, A, S = "h100", "a100", "shed"


def ladder(hysteresis: int = 3, probe_s: float = 1.0) -> Ladder:
    return Ladder.from_dict({
        "name": "t",
        "policy": {"promotion_hysteresis": hysteresis, "probe_interval_s": probe_s},
        "rungs": [{"name": H, "num_cpus": 1, "quality": 1.0, "cost_per_hour": 36.0},
                  {"name": A, "num_cpus": 1, "quality": 0.8, "cost_per_hour": 18.0},
                  {"name": S, "kind": "shed"}]})


def climbs(tick_s: float, lad: Ladder | None = None) -> tuple[list[float], float | None,
                                                                float | None, int | None]:
    """h100 is out for the first 10 ticks of 20 (a100 has no trace: always there).

    Returns the climb times in seconds, the hysteresis used and asked (seconds), ticks.
    """
    r = simulate(lad or ladder(), {H: f"outage:0-{10 * tick_s:g}"}, tick_s=tick_s,
                 duration_s=20 * tick_s)
    p = r.policies[0]
    ups = [t * tick_s for t, idx in p.replay.target if idx == 0 and t > 0]
    return ups, p.hysteresis_s, p.hysteresis_asked_s, p.hysteresis


def test_three_seconds_on_one_second_ticks_is_three_ticks() -> None:
    # h100 is seen at 10, 11, 12: the third observation climbs, at 12 s.
    assert climbs(1.0) == ([12.0], 3.0, 3.0, 3)


def test_three_seconds_on_300_second_ticks_is_one_tick() -> None:
    # 3 s is less than one 300 s tick: the first observation of h100 climbs, at 3000 s
    # (counted in ticks, it climbed at 3600 s: 15 minutes of damping).
    assert climbs(300.0) == ([3000.0], 300.0, 3.0, 1)


def test_seconds_round_up_to_whole_ticks() -> None:
    # 3 probes of 0.5 s: 1.5 s, two 1 s ticks (climb at 11 s); 4 x 200 s: 800 s, three
    # 300 s ticks (climb at 3600 s).
    assert climbs(1.0, ladder(3, 0.5)) == ([11.0], 2.0, 1.5, 2)
    assert climbs(300.0, ladder(4, 200.0)) == ([3600.0], 900.0, 800.0, 3)


def test_the_rule() -> None:
    assert ladder_hysteresis_s(ladder(3, 1.0)) == 3.0
    assert [hysteresis_ticks(s, 300) for s in (0.001, 3, 300, 300.5, 900)] == [1, 1, 1, 2, 3]
    assert hysteresis_ticks(0.3, 0.1) == 3  # no float noise into a fourth tick
    with pytest.raises(ValueError):
        hysteresis_ticks(3, 0)


def test_ticks_given_stay_ticks() -> None:
    # --hysteresis / hysteresis= are counted in ticks, as before; the seconds are shown.
    r = simulate(ladder(), {H: "outage:0-3000"}, tick_s=300, duration_s=6000,
                 hysteresis=[3])
    p = r.policies[0]
    assert (p.hysteresis, p.hysteresis_s, p.hysteresis_asked_s) == (3, 900, None)
    assert [t for t, idx in p.replay.target if idx == 0 and t > 0] == [12]


def test_the_compared_ladder_takes_the_seconds_too() -> None:
    r = simulate(ladder(), {H: "outage:0-3000"}, tick_s=300, duration_s=6000,
                 compare=["ladder"])
    p = r.compared("ladder")
    assert (p.hysteresis, p.hysteresis_s, p.hysteresis_asked_s) == (1, 300, 3.0)
    assert [t for t, idx in p.replay.target if idx == 0 and t > 0] == [10]
    assert r.flap_window_s == 300  # one hysteresis window, in the ticks used


def test_the_table_and_the_json_show_the_seconds(tmp_path: Path) -> None:
    f = tmp_path / "l.yaml"
    f.write_text("name: t\npolicy: {promotion_hysteresis: 3, probe_interval_s: 1.0}\n"
                 "rungs:\n  - {name: h100, num_cpus: 1}\n"
                 "  - {name: a100, num_cpus: 1, quality: 0.8}\n  - {name: shed, kind: shed}\n")
    out_json = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["simulate", str(f), "--trace", f"{H}=outage:0-50m",
                                       "--tick", "5m", "--duration", "100m",
                                       "--compare", "ladder", "--hysteresis", "2",
                                       "--json", str(out_json)])
    assert result.exit_code == 0, result.output
    assert "(asked 3s)" in result.output  # the compared ladder's row: 5m (asked 3s)
    assert "10m" in result.output  # the sweep's h=2 column: two 5-minute ticks
    report = json.loads(out_json.read_text())
    assert (report["comparison"][0]["hysteresis_s"],
            report["comparison"][0]["hysteresis_asked_s"]) == (300, 3)
    assert (report["policies"][0]["hysteresis_s"],
            report["policies"][0]["hysteresis_asked_s"]) == (600, None)
