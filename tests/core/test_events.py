"""Transition events: one JSON line per change, with time, ladder, from, to, reason, cause."""

from __future__ import annotations

import dataclasses
import json
from typing import get_args

import pytest

from ray_ladder import Ladder, Selector, TransitionEvent
from ray_ladder.core.events import TRANSITION_CAUSES, TransitionCause

KEYS = ["time", "ladder", "from", "to", "direction", "reason", "kind", "cause"]


def test_to_json_is_one_line_with_the_documented_keys() -> None:
    event = TransitionEvent(12.5, "gpu", "h100", "a100", "down", "h100 unobtainable")
    line = event.to_json()
    assert "\n" not in line
    assert list(json.loads(line)) == KEYS
    assert json.loads(line) == {
        "time": 12.5, "ladder": "gpu", "from": "h100", "to": "a100", "direction": "down",
        "reason": "h100 unobtainable", "kind": "transition", "cause": "other",
    }


def test_cause_is_data_next_to_the_sentence() -> None:
    event = TransitionEvent(1.0, "gpu", "h100", "a100", "down", "any words", cause="lost")
    assert event.to_dict()["cause"] == "lost" and event.to_dict()["reason"] == "any words"
    assert set(get_args(TransitionCause)) == set(TRANSITION_CAUSES)


def test_none_rungs_and_direction_become_null() -> None:
    first = TransitionEvent(0.0, "gpu", None, "h100", None, "first observation")
    assert json.loads(first.to_json())["from"] is None
    assert json.loads(first.to_json())["direction"] is None
    exhausted = TransitionEvent(1.0, "gpu", "cpu", None, "down", "cpu unobtainable")
    assert json.loads(exhausted.to_json())["to"] is None


def test_a_reason_with_newlines_stays_on_one_line() -> None:
    line = TransitionEvent(0.0, "gpu", "a", "b", "down", "node died:\nOOM\r\n").to_json()
    assert "\n" not in line and "\r" not in line
    assert json.loads(line)["reason"] == "node died:\nOOM\r\n"


def test_to_dict_matches_to_json() -> None:
    event = TransitionEvent(3.0, "gpu", "l4", "h100", "up", "h100 obtainable for 3")
    assert event.to_dict() == json.loads(event.to_json())


def test_events_are_frozen_values() -> None:
    event = TransitionEvent(3.0, "gpu", "l4", "h100", "up", "r")
    assert event == TransitionEvent(3.0, "gpu", "l4", "h100", "up", "r")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.reason = "x"  # type: ignore[misc]


def test_every_changed_decision_becomes_a_json_line() -> None:
    ladder = Ladder.from_yaml(
        """
name: gpu
policy: {promotion_hysteresis: 2, max_degraded_seconds: 1}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: cpu, num_cpus: 1, quality: 0.5}
  - {name: shed, kind: shed, quality: 0}
"""
    )
    lines: list[str] = []
    sel = Selector(ladder, on_event=lambda e: lines.append(e.to_json()))
    steps = [{"h100": True}, {"cpu": True}, {"cpu": True}, {"h100": True, "cpu": True},
             {"h100": True}]
    decisions = [sel.observe(obs, float(t)) for t, obs in enumerate(steps)]
    records = [json.loads(line) for line in lines]
    transitions = [r for r in records if r["kind"] == "transition"]
    changed = [d for d in decisions if d.changed]
    assert len(transitions) == len(changed) == 3
    for record, decision in zip(transitions, changed, strict=True):
        assert record == decision.event("gpu").to_dict()  # type: ignore[union-attr]
        assert (record["time"], record["from"], record["to"], record["direction"],
                record["cause"]) == (decision.time, decision.previous, decision.rung,
                                     decision.direction, decision.cause)
    assert [r["cause"] for r in transitions] == ["first", "lost", "lost"]  # cpu lost at t=4
    [alert] = [r for r in records if r["kind"] == "alert"]
    assert (alert["time"], alert["from"], alert["to"], alert["direction"]) == (
        3.0, "cpu", "cpu", None)  # degraded 2 s > 1 s (at t=2 it was 1 s: not above)
    assert "degraded for 2.0s" in alert["reason"]
