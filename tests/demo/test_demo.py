"""The demo's pure parts: models, load log, story script, summary, live table and timeline."""

from __future__ import annotations

import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from ray_ladder import RungContext, load_ladder
from ray_ladder.demo.__main__ import parse_args
from ray_ladder.demo.load import LadderWatch, LoadGenerator, RequestRecord, parse_response
from ray_ladder.demo.load_process import LoadProcess
from ray_ladder.demo.models import (
    DigitClassifier,
    load_split,
    rung_classes,
    rung_init_kwargs,
    train_models,
)
from ray_ladder.demo.plot import plot_timeline
from ray_ladder.demo.report import (
    live_view,
    percentile,
    segments,
    server_transitions,
    summarize,
    summary_view,
    write_requests_csv,
    write_summary,
)
from ray_ladder.demo.run import DemoError, to_demo_time, train
from ray_ladder.demo.story import DEFAULT_STORY, Step, StoryEvent, run_story
from ray_ladder.ladders import ladder_path
from ray_ladder.testing import node_type_for_rung, wait_until

DEMO_LADDER = ladder_path("demo")
LADDER = ["h100", "a100", "cpu", "cache", "shed"]


@pytest.fixture(scope="module")
def split():
    return load_split()


@pytest.fixture(scope="module")
def models(split):
    return train_models(split)


# --- models ------------------------------------------------------------------------------


def test_models_are_ordered_by_accuracy_like_the_ladder(models):
    acc = {name: m.accuracy for name, m in models.items()}
    assert list(acc) == ["h100", "a100", "cpu"]
    assert acc["h100"] > acc["a100"] > acc["cpu"]
    assert acc["h100"] >= 0.97  # the big model is nearly perfect on digits
    assert acc["cpu"] <= 0.9    # and falling to the small one visibly costs accuracy


def test_training_is_deterministic(split, models):
    again = train_models(split)
    for name, m in models.items():
        assert again[name].accuracy == m.accuracy
        assert (again[name].estimator.predict(split.x_test)
                == m.estimator.predict(split.x_test)).all()


def test_held_out_samples_are_json_ready_and_disjoint_from_training(split):
    samples = split.samples()
    assert len(samples) == len(split.y_test) > 300
    pixels, label = samples[0]
    json.dumps({"pixels": pixels})
    assert len(pixels) == 64 and 0 <= label <= 9
    train = {tuple(x) for x in split.x_train}
    assert sum(tuple(p) in train for p, _ in samples) < len(samples) * 0.05


def test_rung_class_answers_a_digit_and_names_its_rung(split, models):
    ladder = load_ladder(DEMO_LADDER)
    clf = DigitClassifier(RungContext.of(ladder, "cpu"), **rung_init_kwargs(models)["cpu"])
    pixels, _ = split.samples()[0]
    answer = clf({"pixels": pixels})
    assert set(answer) == {"digit", "model", "rung"}
    assert 0 <= answer["digit"] <= 9 and answer["rung"] == "cpu"
    json.dumps(answer)


@pytest.mark.parametrize("payload", [{"pixels": [0.0] * 63}, {"pix": []}, [1, 2],
                                     {"pixels": ["a"] * 64}])
def test_rung_class_rejects_bad_payloads_with_a_clear_message(models, payload):
    clf = DigitClassifier(RungContext("cpu", 2, "demo"), models["cpu"].estimator)
    with pytest.raises(ValueError, match="pixels"):
        clf(payload)


def test_train_gives_one_model_per_compute_rung_or_says_which_is_missing():
    ladder = load_ladder(DEMO_LADDER)
    split, models = train(ladder)
    assert list(models) == ["h100", "a100", "cpu"] and len(split.y_test) > 300
    other = ladder.model_copy(update={"rungs": [
        ladder.rungs[0].model_copy(update={"name": "tpu"}), *ladder.rungs[1:]]})
    with pytest.raises(DemoError, match="tpu"):
        train(other)


def test_every_compute_rung_of_the_demo_ladder_has_a_class_and_a_model(models):
    ladder = load_ladder(DEMO_LADDER)
    compute = [r.name for r in ladder.rungs if r.is_compute]
    assert sorted(rung_classes(models)) == sorted(compute)
    assert sorted(rung_init_kwargs(models)) == sorted(compute)


def test_demo_ladder_matches_the_story():
    ladder = load_ladder(DEMO_LADDER)
    assert ladder.names == LADDER
    assert ladder.policy.promotion_hysteresis == 3
    assert ladder.policy.probe_interval_s == 0.5
    assert all(ladder.rung(n).standby_replicas == 1 for n in ("a100", "cpu"))  # warm falls
    node_types = {r.name for r in ladder.rungs if node_type_for_rung(r) is not None}
    assert node_types == {"h100", "a100"}  # cpu runs on the head
    assert {s.node_type for s in DEFAULT_STORY} <= node_types


# --- load log ----------------------------------------------------------------------------


def test_parse_response_classifies_answers():
    ok = parse_response(1.0, 0.01, 3, 200, {"X-Ladder-Rung": "a100"}, b'{"digit": 3}')
    assert ok.answered and ok.correct and not ok.failed and ok.rung == "a100"
    stale = parse_response(1.0, 0.01, 3, 200, {"X-Ladder-Rung": "cache",
                                                "X-Ladder-Stale": "true"}, b'{"digit": 5}')
    assert stale.stale and stale.answered and not stale.correct
    shed = parse_response(1.0, 0.01, 3, 503, {"X-Ladder-Rung": "shed", "Retry-After": "2"}, b"")
    assert shed.shed and not shed.failed and not shed.answered
    err = parse_response(1.0, 0.01, 3, 500, {}, b"boom")
    assert err.failed and "500" in err.error
    bad = parse_response(1.0, 0.01, 3, 200, {}, b"not json")
    assert bad.failed and "bad body" in bad.error


def test_load_generator_is_bounded_and_records_every_answer():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/-/ladder":
            return httpx.Response(200, json={"current": "h100", "events": [
                {"time": 1.0, "from": None, "to": "h100", "direction": None}]})
        seen.append(json.loads(request.content))
        n = len(seen)
        if n % 5 == 0:
            raise httpx.ConnectError("refused")
        if n % 7 == 0:
            return httpx.Response(503, headers={"Retry-After": "2", "X-Ladder-Rung": "shed"})
        return httpx.Response(200, json={"digit": 1}, headers={"X-Ladder-Rung": "h100"})

    samples = [([0.0] * 64, 1), ([1.0] * 64, 2)]
    gen = LoadGenerator("http://127.0.0.1:9", samples, rate_hz=200.0, duration_s=60.0,
                        max_requests=40, watch_interval_s=0.01,
                        transport=httpx.MockTransport(handler))
    gen.start()
    wait_until(lambda: not gen.running, 10, 0.02, "the load generator sent its 40 requests")
    assert gen.stop(timeout_s=5.0)
    records = gen.records()
    assert gen.crash is None
    assert len(records) == 40 == len(seen)
    assert sum(r.failed for r in records) == 8  # every 5th: connection error
    assert sum(r.shed for r in records) == 4  # 7, 14, 21, 28 (35 is a 5th)
    assert all(r.error.startswith("ConnectError") for r in records if r.failed)
    assert {r.label for r in records} == {1, 2}
    assert len(gen.watch.events) == 1 and gen.watch.state["current"] == "h100"


def test_load_generator_stops_on_time_when_asked():
    gen = LoadGenerator("http://127.0.0.1:9", [([0.0] * 64, 1)], rate_hz=5.0, duration_s=60,
                        watch_interval_s=None,
                        transport=httpx.MockTransport(lambda r: httpx.Response(200, json=1)))
    gen.start()
    wait_until(gen.records, 30, 0.02, "a first answer")
    assert gen.stop(timeout_s=10.0)
    assert 1 <= len(gen.records()) <= 20  # of 300 scheduled


class _DigitHandler(BaseHTTPRequestHandler):
    """A stand-in ladder on loopback: POST / answers a digit; GET /-/ladder a state."""

    def _send(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._send(200, {"digit": int(body["pixels"][0])}, [("X-Ladder-Rung", "cpu")])

    def do_GET(self):  # noqa: N802
        self._send(200, {"current": "cpu", "events": [{"time": 1.0, "to": "cpu"}],
                         "rungs": [{"name": "h100", "down_reason": "gone"}]})

    def log_message(self, *args):
        pass


def test_load_process_runs_the_generator_in_a_child_and_streams_back(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DigitHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        gen = LoadProcess(url, [([3.0] * 64, 3), ([5.0] * 64, 4)], rate_hz=40.0,
                          duration_s=1.0, watch_interval_s=0.1).start()
        wait_until(lambda: not gen.running, 30, 0.05, "the load process ran its second")
        assert gen.stop(timeout_s=10)
    finally:
        server.shutdown()
    records = gen.records()
    assert gen.crash is None
    assert 1 <= len(records) <= 40  # 40 Hz for 1 s at most (fewer on a busy machine)
    assert all(r.answered and r.rung == "cpu" for r in records)
    assert sum(r.correct for r in records) == len([r for r in records if r.label == 3])
    assert 0 <= min(r.t for r in records) <= max(r.t for r in records) < gen.now()
    assert gen.watch.state["current"] == "cpu" and gen.watch.downs[0]["rung"] == "h100"


def test_ladder_watch_deduplicates_repeated_events():
    w = LadderWatch()
    e1 = {"time": 1.0, "from": "h100", "to": "a100"}
    e2 = {"time": 2.0, "from": "a100", "to": "cpu"}
    w.ingest({"events": [e1], "degraded_s": 0.5}, t=1.5)
    w.ingest({"events": [e1, e2], "degraded_s": 1.5}, t=2.5)
    w.ingest({"events": [e2], "degraded_s": 0.0}, t=3.5)
    assert [(e["to"], e["seen_t"]) for e in w.events] == [("a100", 1.5), ("cpu", 2.5)]
    assert w.max_degraded_s == 1.5


def test_ladder_watch_records_when_and_why_a_rung_was_marked_down():
    w = LadderWatch()
    up = {"name": "cpu", "down_reason": None}
    down = {"name": "cpu", "down_reason": "no replica took the request within 0.5s"}
    for t, rung in [(1.0, up), (2.0, down), (2.5, down), (3.0, up), (4.0, down)]:
        w.ingest({"rungs": [rung]}, t=t)
    assert [(d["t"], d["rung"]) for d in w.downs] == [(2.0, "cpu"), (4.0, "cpu")]
    assert w.downs[0]["reason"].startswith("no replica took")


def test_router_event_times_map_onto_demo_time():
    convert = to_demo_time(wall_t0=1_700_000_000.0, mono_t0=500.0)
    assert convert({"time": 1_700_000_012.5}) == pytest.approx(12.5)
    assert convert({"time": 512.5}) == pytest.approx(12.5)
    assert convert({"time": "?", "seen_t": 7.0}) == 7.0


# --- story -------------------------------------------------------------------------------


class FakeCluster:
    def __init__(self, clock):
        self.clock = clock
        self.alive = {"h100": 1, "a100": 1}
        self.log = []

    def nodes(self, type=None):
        return [type] * self.alive.get(type, 0)

    def add_node(self, type, *, wait=True):
        self.log.append((round(self.clock(), 2), "add", type))
        self.alive[type] = self.alive.get(type, 0) + 1
        return type

    def remove_node(self, handle, graceful=False):
        self.log.append((round(self.clock(), 2), "kill", handle))
        self.alive[handle] -= 1


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += max(s, 0.01)


def test_story_plays_its_steps_in_order_then_waits_for_the_climb():
    clock = FakeClock()
    cluster = FakeCluster(clock)
    seen = []
    result = run_story(cluster, DEFAULT_STORY, now=clock, top_rung="h100",
                       top_answer_since=lambda since: since + 3.0 if clock() > since + 3 else None,
                       climb_timeout_s=30, tail_s=5, on_event=seen.append, sleep=clock.sleep)
    assert [(a, n) for _, a, n in cluster.log] == [("kill", "h100"), ("kill", "a100"),
                                                   ("add", "h100")]
    assert [t for t, _, _ in cluster.log] == pytest.approx([10, 25, 40], abs=0.11)
    assert [e.label for e in seen] == [s.label for s in DEFAULT_STORY]
    assert result.climbed_at == pytest.approx(43.0, abs=0.2)
    assert result.ended_at == pytest.approx(48.0, abs=0.3)


def test_story_ends_at_its_deadline_when_the_climb_never_comes():
    clock = FakeClock()
    result = run_story(FakeCluster(clock), DEFAULT_STORY, now=clock, top_rung="h100",
                       top_answer_since=lambda since: None, climb_timeout_s=20, tail_s=2,
                       sleep=clock.sleep)
    assert result.climbed_at is None
    assert result.ended_at == pytest.approx(40 + 20 + 2, abs=0.5)


def test_story_fails_loudly_when_a_step_cannot_be_done():
    clock = FakeClock()
    steps = [Step(1.0, "kill", "h100", "first"), Step(2.0, "kill", "h100", "again")]
    with pytest.raises(RuntimeError, match="again"):
        run_story(FakeCluster(clock), steps, now=clock, top_rung="h100",
                  top_answer_since=lambda since: None, sleep=clock.sleep)


def test_story_aborts_when_told_to():
    clock = FakeClock()
    with pytest.raises(RuntimeError, match="load generator died"):
        run_story(FakeCluster(clock), DEFAULT_STORY, now=clock, top_rung="h100",
                  top_answer_since=lambda since: None,
                  should_abort=lambda: "load generator died" if clock() > 12 else None,
                  sleep=clock.sleep)


# --- report ------------------------------------------------------------------------------

STORY = [StoryEvent(10.0, "h100 preempted", "kill", "h100", 0.01),
         StoryEvent(25.0, "a100 preempted", "kill", "a100", 0.01),
         StoryEvent(40.0, "h100 back", "add", "h100", 1.2)]


def synthetic_log(seed: int = 0) -> list[RequestRecord]:
    """20 req/s for 50 s: h100, a100 from 11 s, cpu from 26 s, h100 again from 44 s."""
    rng = random.Random(seed)
    out = []
    for i in range(1000):
        t = i / 20
        rung = "h100" if t < 11 or t >= 44 else ("a100" if t < 26 else "cpu")
        label = rng.randrange(10)
        digit = label if (rung != "cpu" or i % 4) else (label + 1) % 10  # cpu: 75 % right
        out.append(RequestRecord(t, 0.005 if rung != "cpu" else 0.02, 200, rung, False, digit,
                                 label))
    out.append(RequestRecord(30.01, 5.0, None, None, False, None, 3, "ReadTimeout: x"))
    out.append(RequestRecord(30.02, 0.001, 503, "shed", False, None, 3))
    return out


def test_percentile_nearest_rank():
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0


def test_segments_ignore_a_few_requests_in_flight_across_a_switch():
    rungs = ["h100"] * 5 + ["a100", "h100", "a100", "a100", "a100"] + ["a100"] * 5
    recs = [RequestRecord(float(i), 0.01, 200, r, False, 1, 1) for i, r in enumerate(rungs)]
    assert [(s.rung, s.start, s.end) for s in segments(recs)] == [("h100", 0, 7),
                                                                  ("a100", 7, 14)]


def test_summary_counts_rungs_failures_accuracy_and_degraded_time():
    s = summarize(synthetic_log(), ladder=LADDER, story=STORY,
                  model_accuracy={"h100": 0.99, "a100": 0.97, "cpu": 0.77}, climbed_at=44.0,
                  rate_hz=20)
    assert s["requests"] == {"sent": 1002, "answered": 1000, "shed": 1, "failed": 1}
    per = s["per_rung"]
    assert [per[n]["requests"] for n in LADDER] == [220 + 120, 300, 360, 0, 1]
    assert per["error"]["requests"] == 1
    assert per["h100"]["served_accuracy"] == 1.0 and per["cpu"]["served_accuracy"] == 0.75
    assert per["cpu"]["model_accuracy"] == 0.77
    assert s["served_accuracy"] == pytest.approx((1000 - 90) / 1000)
    assert s["degraded_s"] == pytest.approx(44.0 - 11.0)
    assert s["climb_back_s"] == pytest.approx(4.0)
    assert [(t["from"], t["to"], t["after"]) for t in s["observed_transitions"]] == [
        ("h100", "a100", "+1.0 s after h100 preempted"),
        ("a100", "cpu", "+1.0 s after a100 preempted"),
        ("cpu", "h100", "+4.0 s after h100 back")]
    assert s["failures"] == ["t=30.01s ReadTimeout: x"]
    json.dumps(s)


def test_summary_carries_router_transitions_relative_to_the_story(tmp_path):
    events = [{"time": 1_000_010.6, "from": "h100", "to": "a100", "direction": "down",
               "reason": "h100 unobtainable", "seen_t": 11.0}]
    trans = server_transitions(events, lambda e: e["time"] - 1_000_000.0)
    s = summarize(synthetic_log(), ladder=LADDER, story=STORY, model_accuracy={},
                  transitions=trans)
    assert s["transitions"] == [{"t": 10.6, "from": "h100", "to": "a100", "direction": "down",
                                 "reason": "h100 unobtainable", "kind": "transition",
                                 "after": "+0.6 s after h100 preempted"}]
    path = write_summary(s, tmp_path / "out" / "summary.json")
    assert json.loads(path.read_text())["transitions"][0]["to"] == "a100"
    rows = write_requests_csv(synthetic_log(), tmp_path / "out" / "requests.csv").read_text()
    lines = rows.splitlines()
    assert lines[0] == "t,latency_s,status,rung,stale,digit,label,error"
    assert len(lines) == 1 + 1002 and "ReadTimeout: x" in rows


def test_summary_of_an_empty_log():
    s = summarize([], ladder=LADDER, story=[], model_accuracy={})
    assert s["served_accuracy"] is None and s["degraded_s"] == 0 and s["climb_back_s"] is None


def test_live_table_and_summary_render(tmp_path):
    console = Console(record=True, width=120, file=open(tmp_path / "out.txt", "w"))  # noqa: SIM115
    log = synthetic_log()
    state = {"current": "cpu", "degraded_s": 19.0, "rungs": [
        {"name": "h100", "obtainable": False, "running_replicas": 0},
        {"name": "a100", "obtainable": False, "down_reason": "no replica took the request"},
        {"name": "cpu", "obtainable": True, "running_replicas": 1}]}
    console.print(live_view(log, now=30.0, ladder=LADDER, story=STORY[:2], state=state,
                            next_step="h100 back"))
    trans = [{"t": 12.79, "from": "h100", "to": "a100", "direction": "down",
              "reason": "h100 unobtainable", "kind": "transition"},
             {"t": 33.9, "from": "cpu", "to": "cpu", "direction": None,
              "reason": "degraded for 21.1s", "kind": "alert"}]
    downs = [{"t": 30.5, "rung": "cpu", "reason": "no replica took the request"}]
    summary = summarize(log, ladder=LADDER, story=STORY, model_accuracy={}, transitions=trans,
                        marked_down=downs)
    assert summary["marked_down"][0]["after"] == "+5.5 s after a100 preempted"
    console.print(summary_view(summary))
    text = console.export_text()
    order = ["h100 preempted", "h100 -> a100", "a100 preempted", "cpu marked down", "alert",
             "h100 back"]
    timeline = text[text.index("timeline"):]
    assert [timeline.index(w) for w in order] == sorted(timeline.index(w) for w in order)
    for word in ("cpu", "failed: 1", "router rung", "a100 preempted", "next: h100 back",
                 "requests per rung", "transitions", "up (1 replica)",
                 "down: no replica took", "unobtainable (0 replicas)"):
        assert word in text


def test_timeline_png_is_written(tmp_path):
    path = plot_timeline(synthetic_log(), STORY, LADDER, tmp_path / "demo-out" / "timeline.png",
                         transitions=[{"t": 10.6, "kind": "transition"}])
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_cli_defaults_of_the_digits_story():
    args = parse_args(["--story", "digits"])
    assert args.ladder == DEMO_LADDER and args.rate == 20.0 and args.out == Path("demo-out")


def test_ray_notices_go_to_a_file_and_the_printer_is_restored(tmp_path):
    import ray._private.worker as ray_worker

    from ray_ladder.demo.run import ray_messages_to

    original = ray_worker.print_to_stdstream
    with ray_messages_to(tmp_path / "ray.log") as count:
        ray_worker.print_to_stdstream({"lines": ["Raylet is terminated."], "pid": "raylet",
                                       "is_err": False}, ignore_prefix=False)
    assert ray_worker.print_to_stdstream is original
    assert count == [1] and "Raylet is terminated." in (tmp_path / "ray.log").read_text()
