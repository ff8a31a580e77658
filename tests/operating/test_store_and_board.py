"""The event store, the status board and the report, without Ray (a dict as the KV)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from ray_ladder import Constraints, Ladder, Selector
from ray_ladder.cluster import event_store, metrics
from ray_ladder.cluster.board import LadderBoard, RollingCounts
from ray_ladder.cluster.discovery import build_report, is_live, nodes_per_rung
from ray_ladder.cluster.event_log import record_event
from ray_ladder.cluster.event_store import (
    EventRing,
    MemoryKv,
    StoreWriter,
    prune,
    read_entries,
    read_events,
)
from ray_ladder.core.events import TRANSITION_CAUSES
from ray_ladder.core.exceptions import Attempt

LADDER = Ladder.from_dict({
    "name": "web",
    "policy": {"max_degraded_seconds": 5, "probe_interval_s": 0.5},
    "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}, "cost_per_hour": 10,
         "tags": {"jurisdiction": "us"}},
        {"name": "a100", "resources": {"ladder/a100": 1}, "quality": 0.8, "cost_per_hour": 4,
         "tags": {"jurisdiction": "eu"}},
        {"name": "shed", "kind": "shed", "quality": 0},
    ],
})


def event(wall: float, ladder: str = "web", **more) -> dict:
    return {"wall": wall, "ladder": ladder, "kind": "transition", "from": "h100",
            "to": "a100", "direction": "down", "reason": "h100 unobtainable", **more}


# --- the store ---------------------------------------------------------------------------

def test_a_writer_keeps_its_newest_events_in_a_bounded_ring() -> None:
    kv = MemoryKv()
    writer = StoreWriter(lambda: kv, "w1", start=False)
    writer._ring = EventRing("w1", chunk_events=4, chunks=3)
    for i in range(30):
        writer.add_event(event(float(i)))
        if i % 7 == 0:
            writer.flush()
    writer.flush()
    kept = read_events(kv)
    # Chunks 5, 6 and 7 (events 20-29) are left; chunk 7 took the slot of chunk 4.
    assert [e["wall"] for e in kept] == [float(i) for i in range(20, 30)]
    assert len(kv.keys("events/w1/")) == 3  # never more keys than chunks
    assert [e["id"] for e in kept] == [f"w1:{i}" for i in range(20, 30)]


def test_events_are_merged_across_writers_oldest_first_and_filtered() -> None:
    kv = MemoryKv()
    a, b = (StoreWriter(lambda: kv, name, start=False) for name in ("a", "b"))
    t = time.time()  # a new writer prunes writers older than a week
    a.add_event(event(t + 3))
    b.add_event(event(t + 1, ladder="batch"))
    a.add_event(event(t + 2, ladder="batch"))
    a.flush()
    b.flush()
    assert [e["wall"] - t for e in read_events(kv)] == [1.0, 2.0, 3.0]
    assert [e["wall"] - t for e in read_events(kv, ladder="batch")] == [1.0, 2.0]
    assert [e["wall"] - t for e in read_events(kv, since=t + 2.5)] == [3.0]


def test_a_failed_write_keeps_events_and_entries_for_the_next_one() -> None:
    kv = MemoryKv()
    reachable = [False]
    writer = StoreWriter(lambda: kv if reachable[0] else None, "w", start=False)
    writer.add_event(event(1.0))
    writer.publish("status/serve/x/app", {"time": 1.0})
    assert writer.flush() is False and kv.data == {}

    class Broken(MemoryKv):
        def put(self, key: str, value: bytes) -> None:
            raise ConnectionError("GCS restarting")

    broken = Broken()
    writer._kv = lambda: broken
    assert writer.flush() is False and writer.errors == 1
    writer._kv = lambda: kv
    reachable[0] = True
    assert writer.flush() is True
    assert [e["wall"] for e in read_events(kv)] == [1.0]
    assert read_entries(kv, "status/") == {"status/serve/x/app": {"time": 1.0}}


def test_prune_drops_old_and_surplus_writers_and_stale_entries() -> None:
    kv = MemoryKv()
    for i in range(5):
        w = StoreWriter(lambda: kv, f"w{i}", start=False)
        w._pruned = True
        w.add_event(event(1000.0 + i))
        w.flush()
    kv.put("status/task/j/old", json.dumps({"time": 0.0}).encode())
    kv.put("status/task/j/new", json.dumps({"time": 5000.0}).encode())
    gone = prune(kv, now=5000.0, keep_writer="w0", max_writers=2, retention_s=1e9)
    writers = {k.split("/")[1] for k in kv.keys("events/")}
    assert writers == {"w4", "w3", "w0"}  # the two newest, and the writer pruning
    assert gone == 2 + 1 and kv.keys("status/") == ["status/task/j/new"]
    prune(kv, now=1006.0, retention_s=2.5, keep_writer=None, max_writers=64)
    assert {k.split("/")[1] for k in kv.keys("events/")} == {"w4"}


def test_recording_needs_ray_and_never_imports_it() -> None:
    code = ("import sys; from ray_ladder.cluster.event_log import log_event;"
            "from ray_ladder.core.events import TransitionEvent as T;"
            "log_event(T(0.0, 'l', 'a', 'b', 'down', 'x'), part='serve', source='s');"
            "from ray_ladder.cluster import event_store;"
            "print('ray' in sys.modules, event_store.process_writer())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "None"]


# --- metric names and reasons ---------------------------------------------------------------

def test_a_metric_refuses_labels_the_table_does_not_list() -> None:
    with pytest.raises(ValueError, match=r"takes labels \['ladder', 'rung'\]"):
        metrics.inc("ladder_requests", ladder="web")
    metrics.inc("ladder_requests", ladder="web", rung="h100")  # no Ray here: a no-op


@pytest.mark.parametrize("cause", TRANSITION_CAUSES)
def test_a_transition_label_is_its_cause_whatever_the_words(cause: str) -> None:
    for reason in ("h100 unobtainable", "h100 obtainable for 3 observation(s)",
                   "trial t1: climb at checkpoint", "reworded: nothing like before", ""):
        ev = {"from": "h100", "to": "a100", "direction": "down", "reason": reason,
              "cause": cause}
        assert metrics.transition_label(ev) == cause


def test_a_transition_without_a_known_cause_is_other_never_parsed() -> None:
    # Written by an older version (no cause): its sentence is not read for one.
    old = {"from": "h100", "to": None, "direction": "down", "reason": "h100 unobtainable"}
    assert metrics.transition_label(old) == "other"
    assert metrics.transition_label({**old, "cause": "sideways"}) == "other"


@pytest.mark.parametrize(("cause", "error", "code"), [
    ("timeout", None, "timeout"),
    ("rung_down", None, "rung_down"),
    ("unobtainable", None, "unobtainable"),
    ("busy", None, "busy"),
    ("failed", "NodeDiedError", "NodeDiedError"),
    ("failed", None, "other"),
    ("timeout", "GetTimeoutError", "timeout"),  # the error names a class only for failed
    ("other", None, "other"),
    ("sideways", None, "other"),
])
def test_failure_labels_follow_cause_and_error(cause: str, error: str | None,
                                               code: str) -> None:
    assert metrics.failure_label(cause, error) == code


def test_rewording_a_reason_changes_no_metric_label(monkeypatch: pytest.MonkeyPatch) -> None:
    counted: list[tuple[str, dict]] = []
    monkeypatch.setattr(metrics, "inc", lambda name, value=1.0, **tags:
                        counted.append((name, tags)))
    monkeypatch.setattr(event_store, "record", lambda e: None)
    for reason in ("h100 unobtainable", "the h100 pool went away (reworded)"):
        record_event({"ladder": "web", "kind": "transition", "from": "h100", "to": "a100",
                      "direction": "down", "reason": reason, "cause": "lost"},
                     part="serve", source="app")
    board = LadderBoard("task", publish=lambda key, entry: None)
    for reason in ("NodeDiedError on node 1a2b3c4d", "the node went away, reworded"):
        board.call_finished("k", LADDER, "a100", [
            Attempt("h100", reason, 1.0, cause="failed", error="NodeDiedError"),
            Attempt("a100", "busy (reworded, no 'not used' prefix)", 1.0, cause="not_used")])
    reasons = [(name, tags["reason"]) for name, tags in counted if "reason" in tags]
    assert reasons == [("ladder_transitions", "lost")] * 2 + \
        [("ladder_attempt_failures", "NodeDiedError")] * 2


def test_an_event_stored_before_causes_were_data_reads_back_as_other() -> None:
    kv = MemoryKv()
    kv.put("events/old/00", json.dumps({"events": [event(1.0)]}).encode())
    kv.put("events/new/00", json.dumps({"events": [event(2.0, cause="lost")]}).encode())
    assert [(e["wall"], e["cause"]) for e in read_events(kv)] == [(1.0, "other"),
                                                                 (2.0, "lost")]


# --- the board -----------------------------------------------------------------------------

def test_rolling_counts_forget_what_left_the_window() -> None:
    counts = RollingCounts(window_s=10)
    counts.add("h100", 5, now=100.2)
    counts.add("a100", 2, now=105.0)
    assert counts.totals(now=109.9) == {"h100": 5, "a100": 2}
    assert counts.totals(now=110.5) == {"a100": 2}


def test_the_board_publishes_rung_degraded_time_shares_and_constraint_sets() -> None:
    published: list[tuple[str, dict]] = []
    clock = [1000.0]
    board = LadderBoard("serve", clock=lambda: clock[0],
                        publish=lambda key, entry: published.append((key, dict(entry))))
    main, eu = Selector(LADDER), Selector(LADDER, Constraints(jurisdiction="eu"))
    for sel in (main, eu):
        sel.observe({"h100": True, "a100": True}, now=1000.0)
    board.answered("app", LADDER, "h100", 3)
    entry = board.observe("app", LADDER, main, obtainable={"h100": True, "a100": True},
                          replicas={"h100": 1, "a100": 1}, others=[eu])
    assert entry is not None and entry["current"] == "h100" and entry["degraded_s"] == 0.0
    assert [c["current"] for c in entry["by_constraints"]] == ["a100"]
    assert entry["by_constraints"][0]["constraints"] == {"jurisdiction": "eu"}
    assert {r["name"]: r["served_1m"] for r in entry["rungs"]} == \
        {"h100": 3, "a100": 0, "shed": 0}
    assert published[0][0] == "ladders/web" and published[0][1]["rungs"] == LADDER.names
    assert published[-1][0].startswith("status/serve/") and published[-1][0].endswith("/app")

    clock[0] = 1000.5  # due again after 1 s, or at once when the rung changes
    assert board.observe("app", LADDER, main, obtainable={}) is None
    main.observe({"h100": False, "a100": True}, now=1001.0)
    clock[0] = 1001.0
    fell = board.observe("app", LADDER, main, obtainable={"a100": True})
    assert fell is not None and fell["current"] == "a100" and fell["alert_fired"] is False
    clock[0] = 1001.5
    assert board.observe("app", LADDER, main, obtainable={"a100": True}) is None
    main.observe({"h100": False, "a100": True}, now=1006.5)  # 5.5 s down: the alert
    clock[0] = 1006.6
    later = board.observe("app", LADDER, main, obtainable={"a100": True})
    assert later is not None and later["current"] == "a100"
    assert later["degraded_s"] == pytest.approx(5.6) and later["alert_fired"] is True


def test_an_unobtainable_rung_carries_why_where_its_observer_knows() -> None:
    board = LadderBoard("task", clock=lambda: 1000.0, publish=lambda key, entry: None)
    sel = Selector(LADDER)
    sel.observe({"h100": False, "a100": False}, now=1000.0)
    why = {"h100": {"cause": "no_node", "reason": "no alive node can host it"},
           "shed": {"cause": "other", "reason": "?"}}  # an obtainable rung shows no why
    entry = board.observe("embed", LADDER, sel, obtainable={"h100": False, "a100": False},
                          why=why)
    assert entry is not None
    assert {r["name"]: r["why"] for r in entry["rungs"]} == {
        "h100": {"cause": "no_node", "reason": "no alive node can host it"},
        "a100": None,  # unobtainable, but the observer did not say why: nothing invented
        "shed": None}
    report = build_report(entries=[{**entry, "job_id": "01"}], hooks={}, nodes=[],
                          live_jobs={"01"}, events=[], ladders={}, now=1000.5)
    assert report["ladders"][0]["rungs"][0]["why"]["cause"] == "no_node"  # `--json`


def test_a_users_first_answer_publishes_its_entry_at_once() -> None:
    # `ray-ladder status` right after a task's first answer lists it: the entry is not
    # held back for PUBLISH_S (nor does it wait for the next observation's tick).
    published: list[dict] = []
    clock = [1000.0]
    board = LadderBoard("task", clock=lambda: clock[0],
                        publish=lambda key, entry: published.append(dict(entry)))
    sel = Selector(LADDER)
    sel.observe({"h100": True}, now=1000.0)
    assert board.observe("embed", LADDER, sel, obtainable={"h100": True}) is not None
    clock[0] = 1000.2
    board.call_finished("embed", LADDER, "h100", [])
    assert board.unpublished("embed")  # the orchestrator observes at once
    first = board.observe("embed", LADDER, sel, obtainable={"h100": True})
    assert first is not None and first["rungs"][0]["served_1m"] == 1
    assert not board.unpublished("embed")
    clock[0] = 1000.4
    board.call_finished("embed", LADDER, "h100", [])  # later answers: at most every 1 s
    assert not board.unpublished("embed")
    assert board.observe("embed", LADDER, sel, obtainable={"h100": True}) is None


def test_a_call_counts_its_failed_attempts_and_how_it_ended() -> None:
    board = LadderBoard("task", publish=lambda key, entry: None)
    board.call_finished("k", LADDER, "a100", [Attempt("h100", "rung went down", 1.0,
                                                      cause="rung_down")])
    board.call_finished("k", LADDER, None, [
        Attempt("a100", "not used (absent)", 2.0, cause="not_used"),
        Attempt(None, "no eligible rung obtainable", cause="no_rung")])
    board.call_finished("k", LADDER, None, [])
    assert board._counts["k"].totals(now=time.time()) == \
        {"a100": 1, "exhausted": 1, "error": 1}


# --- the report ----------------------------------------------------------------------------

def node(node_id: str, resources: dict, alive: bool = True) -> dict:
    return {"node_id": node_id, "alive": alive, "labels": {}, "total": resources,
            "is_head": False, "metrics": "", "session_dir": ""}


def entry(part: str, source: str, t: float, **more) -> dict:
    board = LadderBoard(part, clock=lambda: t, publish=lambda key, entry: None)
    sel = Selector(LADDER)
    sel.observe({"h100": True}, now=t)
    board.answered(source, LADDER, "h100", 3)
    board.answered(source, LADDER, "exhausted", 1)
    out = board.observe(source, LADDER, sel, obtainable={"h100": True}, replicas={"h100": 2})
    assert out is not None
    return {**out, **more}


def test_the_report_keeps_live_users_and_counts_nodes_and_shares() -> None:
    nodes = [node("n1", {"ladder/h100": 1, "CPU": 1}), node("n2", {"ladder/h100": 2}),
             node("n3", {"ladder/a100": 1}, alive=False)]
    entries = [
        entry("serve", "app", 100.0),
        entry("serve", "app", 99.0, pid=1),  # an older entry of the same app
        entry("task", "embed", 100.0, job_id="01000000"),
        entry("task", "gone", 100.0, job_id="02000000"),  # its driver ended
        entry("serve", "stale", 10.0),
    ]
    hooks = {"web": {"time": 100.0, "interval_s": 1.0, "serving": "h100",
                     "rungs": {"h100": {"role": "serving", "status": "up"},
                               "a100": {"role": "released", "status": "idle"}}}}
    events = [event(99.0, part="serve", source="app"), event(99.5, part="task", source="x")]
    report = build_report(entries=entries, hooks=hooks, nodes=nodes, live_jobs={"01000000"},
                          events=events, ladders={"web": {"rungs": LADDER.names,
                                                          "spec": LADDER.model_dump()}},
                          now=101.0)
    users = [(u["part"], u["source"]) for u in report["ladders"]]
    assert users == [("serve", "app"), ("task", "embed"), ("hook", "hook")]
    assert report["gone_entries"] == 2 and report["alive_nodes"] == 2
    app = report["ladders"][0]
    assert app["pid"] != 1  # the newest entry of a user wins
    h100 = app["rungs"][0]
    assert (h100["nodes"], h100["replicas"], h100["share_1m"], h100["hook_role"]) == \
        (2, 2, 0.75, "serving")
    assert app["rungs"][1]["nodes"] == 0 and app["rungs"][1]["hook_role"] == "released"
    assert [e["wall"] for e in app["last_transitions"]] == [99.0]
    hook = report["ladders"][2]
    assert hook["current"] == "h100" and hook["current_index"] == 0
    assert {r["name"]: r["nodes"] for r in hook["rungs"]} == {"h100": 2, "a100": 0}


def test_liveness_and_nodes_per_rung() -> None:
    assert is_live({"part": "hook", "time": 0.0, "interval_s": 10.0}, set(), now=49.0)
    assert not is_live({"part": "serve", "time": 0.0, "interval_s": 1.0}, set(), now=16.0)
    assert nodes_per_rung(LADDER, [node("a", {"ladder/a100": 4})]) == {"h100": 0, "a100": 1}


def test_the_store_layout_names_are_stable() -> None:
    # `ray-ladder status` of one version reads what the parts of another wrote.
    assert (event_store.KV_NAMESPACE, event_store.EVENTS_PREFIX, event_store.STATUS_PREFIX,
            event_store.LADDERS_PREFIX) == ("ray_ladder", "events/", "status/", "ladders/")


def test_answers_are_exported_once_per_observation_not_per_call(monkeypatch) -> None:
    recorded: list[tuple[str, float, dict]] = []
    monkeypatch.setattr(metrics, "inc", lambda name, value=1.0, **tags:
                        recorded.append((name, value, tags)))
    monkeypatch.setattr(metrics, "set_gauge", lambda name, value, **tags: None)
    board = LadderBoard("serve", publish=lambda key, entry: None)
    for rung in ("h100", "h100", "a100", "shed", "exhausted"):
        board.answered("app", LADDER, rung)
    assert recorded == []  # the hot path only counts
    sel = Selector(LADDER)
    sel.observe({"h100": True}, now=time.time())
    board.observe("app", LADDER, sel, obtainable={"h100": True})
    got = {(name, tags.get("rung")): value for name, value, tags in recorded}
    assert got[("ladder_requests", "h100")] == 2 and got[("ladder_requests", "a100")] == 1
    assert got[("ladder_sheds", None)] == 1 and got[("ladder_exhausted", None)] == 1
    answers = [v for n, v, _ in recorded if n == "ladder_answers"]
    quality = [v for n, v, _ in recorded if n == "ladder_quality_points"]
    assert sum(answers) == 5 and sum(quality) == pytest.approx(2 * 1.0 + 0.8)
