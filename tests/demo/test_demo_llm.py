"""The LLM story of `make demo`: its chat clients, their log, the summary, the live table,
the timeline, the command line, and (marked ``ray``) a shortened story end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from argparse import Namespace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from ray_ladder import load_ladder
from ray_ladder.demo.__main__ import LLM_LADDER, parse_args
from ray_ladder.demo.llm.load import PROMPTS, ChatLoad, chat_body
from ray_ladder.demo.llm.models import RungModel, measure_models, rung_classes
from ray_ladder.demo.llm.plot import plot_streams
from ray_ladder.demo.llm.records import (
    ChunkParser,
    Closed,
    Opened,
    StreamLog,
    Token,
    as_json,
)
from ray_ladder.demo.llm.report import (
    RouterSeen,
    live_view,
    models_table,
    pace,
    progress_line,
    summarize,
    summary_view,
    write_streams_jsonl,
)
from ray_ladder.demo.llm.run import llm_story, verdict
from ray_ladder.demo.load_process import LoadProcess
from ray_ladder.demo.session import DemoError
from ray_ladder.demo.story import StoryEvent
from ray_ladder.ladders import ladder_path
from ray_ladder.serve.llm.responses import DONE, Answer, StreamRecord
from ray_ladder.testing import node_type_for_rung, wait_until

ROOT = Path(__file__).resolve().parents[2]
LADDER = load_ladder(LLM_LADDER)
NAMES = ["h100", "a100", "cpu", "shed"]


def sse_answer(pieces: list[tuple[str, str]], reason: str = "rung went down mid-stream",
               usage_off_by: int = 0) -> bytes:
    """A streamed chat answer in the ladder's own chunk format (serve's ``Answer``)."""
    answer = Answer("chat", LADDER, 4)
    record = StreamRecord()
    out, prev = [], None
    for rung, text in pieces:
        moved = prev if prev is not None and prev != rung else None
        record.tokens[rung] = record.tokens.get(rung, 0) + 1
        out.append(answer.chunk(rung, text, degraded_s=0.0, switched_from=moved,
                                reason=reason if moved else None))
        prev = rung
    record.finish_reason = "length"
    if usage_off_by:
        record.tokens[prev] += usage_off_by
    out += [answer.final(prev or "h100", record, degraded_s=0.0),
            answer.usage_chunk(prev or "h100", record), DONE]
    return b"".join(out)


def feed_all(body: bytes, stream: int = 0) -> tuple[ChunkParser, list[Token]]:
    parser = ChunkParser(stream)
    tokens = [tok for i, line in enumerate(body.decode().splitlines())
              if (tok := parser.feed(line, float(i))) is not None]
    return parser, tokens


# --- parsing one stream ------------------------------------------------------------------


def test_parser_reads_tokens_rungs_the_switch_and_the_usage():
    body = sse_answer([("h100", " The"), ("h100", " file"), ("a100", " is"), ("a100", ".")])
    parser, tokens = feed_all(body)
    assert [(t.rung, t.text) for t in tokens] == [("h100", " The"), ("h100", " file"),
                                                  ("a100", " is"), ("a100", ".")]
    assert [t.switched_from for t in tokens] == [None, None, "h100", None]
    assert tokens[2].reason == "rung went down mid-stream"
    closed = parser.closed(client=1, t=9.0, status=200)
    assert closed.completed and closed.finish_reason == "length"
    assert closed.usage_tokens == 4 and closed.usage_by_rung == {"h100": 2, "a100": 2}
    assert closed.models == {"h100": "docs-4gram", "a100": "docs-3gram"}


def test_parser_flags_error_events_bad_events_and_a_missing_done():
    error = Answer("chat", LADDER, 1).error_chunk("no eligible rung could continue it")
    parser, _ = feed_all(sse_answer([("h100", " a")])[:-len(DONE)] + error + DONE)
    assert "could continue" in parser.closed(0, 1.0, 200).error
    assert not parser.closed(0, 1.0, 200).completed
    parser, _ = feed_all(b"data: {not json\n\n")
    assert parser.error.startswith("bad event")
    parser, _ = feed_all(sse_answer([("h100", " a")])[:-len(DONE)])
    assert not parser.done and not parser.closed(0, 1.0, 200).completed


def test_chat_body_asks_for_a_stream_with_usage():
    body = chat_body("How?", model="llm", max_tokens=12, seed=3)
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "How?"}]
    assert body["model"] == "llm" and body["seed"] == 3 and body["max_tokens"] == 12


# --- the clients ---------------------------------------------------------------------------


def _mock_ladder(request: httpx.Request) -> httpx.Response:
    """Streams by seed: every 4th is shed, every 5th ends in an error event, every 2nd
    moves from h100 to a100 at its third token."""
    if request.url.path == "/-/ladder":
        return httpx.Response(200, json={"current": "h100", "events": []})
    body = json.loads(request.content)
    seed, n = body["seed"], body["max_tokens"]
    if seed % 4 == 3:
        return httpx.Response(503, headers={"Retry-After": "1"},
                              json={"error": {"message": "shed", "type": "ladder_exhausted"}})
    pieces = [("a100" if seed % 2 and i >= 2 else "h100", f" w{i}") for i in range(n)]
    data = sse_answer(pieces)
    if seed % 5 == 4:
        data = data[:-len(DONE)] + Answer("chat", LADDER, 1).error_chunk("lost") + DONE
    return httpx.Response(200, content=data, headers={"Content-Type": "text/event-stream"})


def test_chat_load_logs_every_stream_token_and_end_and_stays_in_its_duration():
    load = ChatLoad("http://127.0.0.1:9", PROMPTS, clients=3, duration_s=0.3, max_tokens=6,
                    stagger_s=0.01, think_s=0.01, watch_interval_s=0.05,
                    transport=httpx.MockTransport(_mock_ladder))
    load.start()
    wait_until(lambda: not load.running, 20, 0.02, "the clients' duration ran out")
    assert load.stop(timeout_s=5) and load.crash is None
    log = StreamLog(load.records())
    views = list(log.streams.values())
    assert len(views) >= 3 and not log.open()
    # nothing sent past the duration (a client checks the clock, then opens: on a busy
    # machine its thread may wait a while between the two; a generator that ignored its
    # duration would go on sending for the 20 s the test waits)
    assert all(v.opened < 0.3 + 1.0 for v in views), [v.opened for v in views]
    for v in views:
        if v.stream % 4 == 3:
            assert v.shed and not v.broken and not v.tokens
        elif v.stream % 5 == 4:
            assert v.broken and v.closed is not None and v.closed.error == "lost"
        else:
            assert v.completed and len(v.tokens) == 6 and v.usage_matches()
            assert len(v.switches()) == (1 if v.stream % 2 else 0)
    assert {v.client for v in views} == {0, 1, 2}
    assert load.watch.state["current"] == "h100"


class _SlowLadder(BaseHTTPRequestHandler):
    """A stand-in ladder on loopback: streams ``max_tokens`` pieces, 20 ms apart."""

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = sse_answer([("h100", f" t{i}") for i in range(body["max_tokens"])])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()  # HTTP/1.0: the body ends when the connection closes
        for event in data.split(b"\n\n")[:-1]:
            self.wfile.write(event + b"\n\n")
            self.wfile.flush()
            threading.Event().wait(0.02)  # the server's pace, not a test's sleep

    def do_GET(self):  # noqa: N802
        data = json.dumps({"current": "h100", "rungs": [{"name": "a100", "obtainable": True}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, *args):
        pass


@pytest.fixture()
def slow_ladder():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowLadder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_stopped_client_finishes_the_stream_it_is_reading(slow_ladder):
    load = ChatLoad(slow_ladder, PROMPTS, clients=2, duration_s=60, max_tokens=10,
                    watch_interval_s=None).start()
    wait_until(lambda: any(isinstance(e, Token) for e in load.records()), 20, 0.01,
               "a first token")
    assert load.stop(timeout_s=20)
    log = StreamLog(load.records())
    assert log.streams and not log.open()
    assert all(v.completed and len(v.tokens) == 10 for v in log.streams.values())


def test_load_process_runs_the_chat_clients_in_a_child_and_streams_back(slow_ladder):
    gen = LoadProcess(slow_ladder, PROMPTS[:2], generator=ChatLoad, clients=2,
                      duration_s=0.8, max_tokens=5, think_s=0.05,
                      watch_interval_s=0.1).start()
    wait_until(lambda: not gen.running, 30, 0.05, "the chat clients ran their duration")
    assert gen.stop(timeout_s=10) and gen.crash is None
    log = StreamLog().update(gen.records())
    assert log.streams and all(v.completed and len(v.tokens) == 5
                               for v in log.streams.values())
    assert 0 <= min(v.opened for v in log.streams.values()) < gen.now()
    assert gen.watch.state["current"] == "h100"


# --- the log, the summary, the live table, the timeline ----------------------------------

STORY = [StoryEvent(10.0, "h100 preempted", "kill", "h100", 0.01),
         StoryEvent(20.0, "h100 back", "add", "h100", 1.1)]
MODELS = {"h100": RungModel("h100", "docs-4gram", 4, 1.0, 12, 0.367, 1.5, ),
          "a100": RungModel("a100", "docs-3gram", 3, 1.0, 10, 0.313, 0.4),
          "cpu": RungModel("cpu", "docs-2gram-small", 2, 0.25, 6, 0.163, 0.1)}


def synthetic_log() -> StreamLog:
    """6 clients, 20 tokens at 10 tok/s each: h100 until the kill at 10 s (the router
    moves at 10.7 s), a100 until the climb at 24 s, h100 after; one stream breaks."""
    events: list = []
    sid = 0
    for client in range(6):
        t = client * 0.5
        while t < 30:
            events.append(Opened(sid, client, t))
            top = "a100" if 10.7 <= t < 24 else "h100"
            tt, rung, made = t + 0.1, top, 0
            for i in range(20):
                if rung == "h100" and 10.0 <= tt < 10.7:
                    tt, rung = 10.8, "a100"  # the fall: 0.8 s without a token
                    events.append(Token(sid, tt, rung, f" w{i}", "h100", "rung went down"))
                else:
                    events.append(Token(sid, tt, rung, f" w{i}"))
                made += 1
                tt += 0.1
            by = {}
            for e in events:
                if isinstance(e, Token) and e.stream == sid:
                    by[e.rung] = by.get(e.rung, 0) + 1
            broken = sid == 7
            events.append(Closed(sid, client, tt, 200, done=not broken, finish_reason="length",
                                 usage_tokens=made, usage_by_rung=by,
                                 error="lost" if broken else ""))
            sid += 1
            t = tt + 0.3
    return StreamLog(events)


def test_stream_log_reads_the_log_once_even_when_fed_the_whole_log_again():
    events = [Opened(0, 0, 1.0), Token(0, 1.2, "h100", " A"), Token(0, 1.3, "a100", " B", "h100")]
    log = StreamLog().update(events[:2]).update(events)
    assert len(log.tokens) == 2 and len(log.open()) == 1
    log.update([*events, Closed(0, 0, 1.4, 200, True, "stop", 2, {"h100": 1, "a100": 1})])
    assert log.streams[0].completed and log.streams[0].usage_matches()
    assert log.first_token_since("a100", 1.0) == 1.3 and log.first_token_since("cpu", 0) is None
    assert log.rates(now=1.5, window_s=1.0) == {"h100": 1.0, "a100": 1.0}
    line = as_json(log.streams[0])
    assert line["switches"] == [{"t": 1.3, "from": "h100", "to": "a100", "at_token": 1,
                                 "gap_s": 0.1, "told": True, "reason": None}]
    assert line["text"] == " A B"


def test_pace_is_the_token_rate_of_the_longest_run_on_a_rung():
    view = synthetic_log().streams[0]
    assert pace(view, "h100") == pytest.approx(10.0)
    assert pace(view, "a100") is None


def test_summary_counts_streams_switches_gaps_quality_and_the_climb(tmp_path):
    log = synthetic_log()
    s = summarize(log, ladder=NAMES, story=STORY, models=MODELS, climbed_at=24.1, clients=6,
                  max_tokens=20)
    assert s["load"] == {"clients": 6, "max_tokens": 20}
    st = s["streams"]
    assert st["started"] == len(log.streams) and st["broken"] == 1 and st["open"] == 0
    assert st["completed"] == st["started"] - 1 and st["shed"] == 0
    at_kill = [v for v in log.streams.values() if v.opened <= 10 < v.closed.t]
    assert s["open_at_kill"] == len(at_kill) >= 4
    assert s["moved_rung_mid_stream"] == s["switches"] == len(at_kill)
    assert s["switches_told_in_chunk"] == s["switches"]
    assert s["max_gap_across_kill_s"] == pytest.approx(0.8, abs=0.11)
    assert s["climb_back_s"] == pytest.approx(4.1)
    assert s["per_rung"]["h100"]["model_quality"] == 0.367
    assert s["per_rung"]["a100"]["stream_tokens_per_s_p50"] == pytest.approx(10.0)
    assert s["tokens"]["total"] == sum(s["tokens"]["per_rung"].values()) == 20 * st["started"]
    assert s["ttft_ms"]["p50"] == pytest.approx(100.0, abs=1)
    assert s["usage_mismatches"] == 0
    assert [b["stream"] for b in s["broken_streams"]] == [7]
    ex = s["switch_example"]
    assert (ex["from"], ex["to"]) == ("h100", "a100") and ex["before"] and ex["after"]
    json.dumps(s)
    lines = write_streams_jsonl(log, tmp_path / "streams.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == st["started"] and [r["stream"] for r in rows if r["broken"]] == [7]
    assert [r["t"] for r in rows] == sorted(r["t"] for r in rows)


def test_summary_sees_a_usage_that_does_not_match_what_was_received():
    _, tokens = feed_all(sse_answer([("h100", " a"), ("h100", " b")], usage_off_by=1))
    parser, _ = feed_all(sse_answer([("h100", " a"), ("h100", " b")], usage_off_by=1))
    log = StreamLog([Opened(0, 0, 0.0), *tokens, parser.closed(0, 3.0, 200)])
    assert summarize(log, ladder=NAMES, story=[], models={})["usage_mismatches"] == 1


def test_live_table_summary_and_models_render(tmp_path):
    console = Console(record=True, width=140, file=open(tmp_path / "out.txt", "w"))  # noqa: SIM115
    log = synthetic_log()
    state = {"current": "a100", "rungs": [
        {"name": "h100", "obtainable": False, "running_replicas": 0},
        {"name": "a100", "obtainable": True, "running_replicas": 1}]}
    console.print(models_table(MODELS))
    console.print(live_view(log, now=15.0, ladder=NAMES, models=MODELS, story=STORY[:1],
                            state=state, next_step="+20s h100 back"))
    trans = [{"t": 10.7, "from": "h100", "to": "a100", "direction": "down",
              "reason": "h100 unobtainable", "kind": "transition"}]
    console.print(summary_view(summarize(log, ladder=NAMES, story=STORY, models=MODELS,
                                         router=RouterSeen(trans), climbed_at=24.1)))
    text = console.export_text()
    for words in ("docs-4gram", "36.7%", "tok/s", "streams open", "moved rung mid-stream",
                  "broken: 1", "next: +20s h100 back", "unobtainable (0 replicas)",
                  "up (1 replica)", "tokens per rung", "moved rung mid-generation",
                  "max gap between two tokens across the kill", "climb back 4.1 s",
                  "h100 -> a100", "broken: stream 7"):
        assert words in text, words
    assert "t= 30.0s" in progress_line(log, 30.0) and "broken=1" in progress_line(log, 30.0)


def test_timeline_png_is_written(tmp_path):
    path = plot_streams(synthetic_log(), STORY, NAMES, tmp_path / "out" / "timeline.png",
                        models={"h100": "docs-4gram"},
                        transitions=[{"t": 10.7, "kind": "transition"}])
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    empty = plot_streams(StreamLog(), [], NAMES, tmp_path / "empty.png")
    assert empty.read_bytes()[:4] == b"\x89PNG"


# --- the ladder, the models, the command line, the verdict -------------------------------


def test_llm_ladder_matches_the_story():
    assert LADDER.names == NAMES and LADDER.name == "llm"
    orders = [LADDER.rung(n).params["order"] for n in NAMES[:3]]
    assert orders == [4, 3, 2] and LADDER.rung("cpu").params["train_fraction"] < 1
    assert [LADDER.rung(n).params["model"] for n in NAMES[:3]] == [
        "docs-4gram", "docs-3gram", "docs-2gram-small"]
    assert LADDER.rung("a100").standby_replicas == 1  # the fall waits for no replica start
    assert all(LADDER.rung(n).params["tokens_per_s"] > 0 for n in NAMES[:3])
    assert {r.name for r in LADDER.rungs if node_type_for_rung(r) is not None} == {
        "h100", "a100"}
    assert [s.node_type for s in llm_story(LADDER, 12, 27)] == ["h100", "h100"]
    with pytest.raises(DemoError, match="before the return"):
        llm_story(LADDER, 30, 27)


def test_models_are_ordered_by_quality_like_the_ladder():
    models = measure_models(LADDER)
    assert list(models) == ["h100", "a100", "cpu"]
    q = [models[n].quality for n in models]
    assert q[0] > q[1] > q[2] > 0.05
    assert models["h100"].model == "docs-4gram" and models["cpu"].order == 2
    assert set(rung_classes(models)) == set(models)


def test_cli_defaults_tell_the_llm_story():
    args = parse_args([])
    assert args.story == "llm" and args.ladder == LLM_LADDER and args.clients == 20
    assert args.kill_at < args.back_at and args.out == Path("demo-out") and args.tail == 10
    digits = parse_args(["--story", "digits"])
    assert digits.ladder.name == "demo.yaml" and digits.tail == 5
    with pytest.raises(SystemExit):
        parse_args(["--clients", "0"])


def test_the_vllm_story_gets_its_engine_limits_unless_told_otherwise():
    args = parse_args(["--story", "vllm"])
    assert args.ladder.name == "vllm.yaml" and args.climb_timeout == 240.0
    assert args.max_tokens == 400 and args.clients == 12
    told = parse_args(["--story", "vllm", "--clients", "3", "--climb-timeout", "60"])
    assert told.clients == 3 and told.climb_timeout == 60.0 and told.max_tokens == 400
    assert parse_args(["--story", "llm"]).climb_timeout == 45.0  # the others keep theirs


def test_the_vllm_story_s_rungs_run_engines():
    ladder = load_ladder(ladder_path("vllm"))
    models = {r.name: RungModel(r.name, str(r.params["model"]), 0, 0.0, 0.0, r.quality, 0.0,
                                engine="vllm") for r in ladder.rungs if r.is_compute}
    from ray_ladder.serve.llm.engine_rung import VLLMRung

    assert set(rung_classes(models).values()) == {VLLMRung}
    assert ladder.rung("h100").params["tiny_model"] == ladder.rung("a100").params["tiny_model"]
    assert ladder.rung("cpu").params["tiny_model"] != ladder.rung("h100").params["tiny_model"]


def _summary(**over):
    base = {"streams": {"broken": 0, "open": 0}, "moved_rung_mid_stream": 5,
            "climb_back_s": 4.0}
    return {**base, **over}


def test_verdict_needs_no_broken_stream_a_fall_and_a_climb():
    args = Namespace(out=Path("demo-out"), climb_timeout=45.0)
    assert verdict(_summary(), "h100", args) == 0
    with pytest.raises(DemoError, match="broke"):
        verdict(_summary(streams={"broken": 1, "open": 0}), "h100", args)
    with pytest.raises(DemoError, match="mid-generation"):
        verdict(_summary(moved_rung_mid_stream=0), "h100", args)
    with pytest.raises(DemoError, match="no token came from h100"):
        verdict(_summary(climb_back_s=None), "h100", args)


# --- end to end ----------------------------------------------------------------------------


@pytest.mark.ray
@pytest.mark.long
@pytest.mark.timeout(480)
def test_the_llm_story_end_to_end(tmp_path):
    """A shortened story: 8 clients, 48 tokens each, kill at +5 s, back at +12 s."""
    out = tmp_path / "demo-out"
    proc = subprocess.run(
        [sys.executable, "-m", "ray_ladder.demo", "--out", str(out), "--clients", "8",
         "--max-tokens", "48", "--kill-at", "5", "--back-at", "12", "--tail", "2",
         "--deadline", "360"], capture_output=True, text=True, timeout=420, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["streams"]["broken"] == 0 and s["streams"]["open"] == 0
    assert s["streams"]["completed"] == s["streams"]["started"] > 8
    assert s["moved_rung_mid_stream"] >= 1
    assert s["switches_told_in_chunk"] == s["switches"] and s["usage_mismatches"] == 0
    assert s["tokens"]["per_rung"]["h100"] > 0 and s["tokens"]["per_rung"]["a100"] > 0
    assert s["climb_back_s"] is not None and s["per_rung"]["h100"]["model_quality"] > 0
    streams = [json.loads(line) for line in (out / "streams.jsonl").read_text().splitlines()]
    moved = [x for x in streams if x["switches"]]
    assert moved and all(sw["from"] == "h100" and sw["to"] == "a100"
                         for x in moved for sw in x["switches"])
    assert all(x["tokens"] == 48 for x in streams)
    assert (out / "timeline.png").read_bytes()[:4] == b"\x89PNG"
