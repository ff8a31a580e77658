"""A rung that keeps silent, starts late or asks to be left alone (issue 43), over the
real walk, stream driver and router state with the fake rung caller (no Ray)."""

from __future__ import annotations

import pickle
import time

from ray_ladder.core.backoff import Backoff
from ray_ladder.core.exceptions import RungUnavailableError
from ray_ladder.core.latency import LatencyTargets
from ray_ladder.serve.deadlines import SILENCE_S, deadlines
from ray_ladder.serve.errors import rung_failure
from ray_ladder.serve.fake import FakeRung, FakeRungCaller
from ray_ladder.serve.health import RungHealth
from ray_ladder.serve.load import LoadBook
from tests.serve.test_walker import Rig

TARGETS = LatencyTargets(ttft_s=0.2, inter_token_s=0.1)


def test_a_late_first_piece_moves_the_stream_and_makes_its_rung_suspect() -> None:
    caller = FakeRungCaller({"h100": FakeRung(first_s=5.0, pieces=list("abc")),
                             "a100": FakeRung(pieces=list("xyz"))})
    rig = Rig(caller)
    started = time.monotonic()
    pieces, record = rig.run(lambda: rig.stream(targets=TARGETS))
    assert pieces == [("a100", "x"), ("a100", "y"), ("a100", "z")]  # nothing from h100
    assert time.monotonic() - started < 5.0  # it did not wait for h100's first piece
    assert record.switches == []  # no text had been sent: not a move the client sees
    # Suspect at once: new requests avoid h100, as after a failure.
    assert rig.state.is_down("h100", rig.walker.now())
    assert rig.state.current == "a100"


def test_the_first_token_deadline_holds_with_no_target_at_all() -> None:
    found = deadlines(None, measured_first_s=0.0)
    assert (found.first_s, found.late_s, found.silence) == (SILENCE_S, SILENCE_S, True)
    # A rung measured slow to start gets longer: slow is not silent.
    assert deadlines(None, measured_first_s=5.0).first_s == 20.0
    # A target is the deadline, the measure does not widen it.
    assert deadlines(TARGETS, measured_first_s=5.0).first_s == 0.2


def test_a_whole_answer_moves_on_silence_as_a_stream_does() -> None:
    caller = FakeRungCaller({"h100": FakeRung(delay_s=0.5, pieces=list("abcd")),
                             "a100": FakeRung(pieces=list("xyz"))})
    rig = Rig(caller)

    async def whole() -> list[tuple[str, str]]:
        from ray_ladder.serve.llm.protocol import GenerationRequest
        from ray_ladder.serve.llm.responses import StreamRecord
        from ray_ladder.serve.llm.streams import StreamDriver

        pieces = StreamDriver(rig.walker).run(
            GenerationRequest(prompt="hi", max_tokens=3), None, StreamRecord(),
            targets=LatencyTargets(ttft_s=1.0, inter_token_s=0.1), stream=False)
        return [(p.rung, p.text) async for p in pieces]

    got = rig.run(whole)
    assert got[0] == ("h100", "a") and {r for r, _ in got[1:]} == {"a100"}
    assert "".join(t for _, t in got) == "a" + "xyz"[:2]  # the budget of 3 tokens, exact


def test_a_request_whose_target_passed_while_its_rung_kept_it_is_answered_below() -> None:
    # h100 keeps the first piece past the target and past a100's expected time: the
    # target is gone, so a100 is tried (a late answer beats a 503), never the shed rung.
    book = LoadBook({"h100": 1, "a100": 1}, answer_s=None, ttft_s=0.1, slow_after_s=10.0)
    book.stream_ended("a100", 0.3)  # a100's first piece is expected in about 0.3 s
    caller = FakeRungCaller({"h100": FakeRung(first_s=5.0, pieces=list("ab")),
                             "a100": FakeRung(pieces=list("xy"))})
    rig = Rig(caller, book=book)
    pieces, _ = rig.run(lambda: rig.stream(targets=LatencyTargets(ttft_s=0.15)))
    assert pieces == [("a100", "x"), ("a100", "y")]


def test_retry_after_survives_pickling_and_keeps_the_rung_down_that_long_capped() -> None:
    err = pickle.loads(pickle.dumps(RungUnavailableError("503", retry_after_s=5.0)))
    assert err.retry_after_s == 5.0 and str(err) == "503"
    failed = rung_failure(err)
    assert failed is not None and failed.retry_after_s == 5.0
    backoff = Backoff(base_s=1.0, cap_s=30.0)
    health = RungHealth().failed(failed.reason, 100.0, backoff, failed.retry_after_s)
    assert health.is_down(104.9) and not health.is_down(105.0)
    assert "Retry-After" in (health.reason or "")
    # Never longer than the operator's longest cooldown, never shorter than its own.
    assert RungHealth().failed("x", 0.0, backoff, 3600.0).down_until == 30.0
    assert RungHealth().failed("x", 0.0, Backoff(base_s=8.0, cap_s=30.0), 2.0
                               ).down_until == 8.0
