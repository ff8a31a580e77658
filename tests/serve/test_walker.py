"""Both routes' drivers over the one walk, with the fake rung caller the library ships
(serve/fake.py): no Ray, real walk, race, stream driver and metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ray_ladder import Ladder, LadderExhaustedError
from ray_ladder.core.latency import LatencyTargets
from ray_ladder.serve import http
from ray_ladder.serve.cache import AnswerCache
from ray_ladder.serve.fake import FakeRung, FakeRungCaller
from ray_ladder.serve.llm.protocol import GenerationRequest
from ray_ladder.serve.llm.responses import StreamRecord
from ray_ladder.serve.llm.streams import StreamDriver, StreamFailed
from ray_ladder.serve.load import LoadBook
from ray_ladder.serve.metrics import LadderMetrics
from ray_ladder.serve.state import RouterState
from ray_ladder.serve.walker import Walker

LADDER = Ladder.from_yaml("""
name: walker
policy: {pending_timeout_s: 0.3, retry_after_s: 4.5}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9}
  - {name: shed, kind: shed}
""")
UP = {"h100": True, "a100": True}


class Rig:
    """A Walker over a FakeRungCaller and a RouterState fed one observation."""

    def __init__(self, caller: FakeRungCaller, placeable: dict[str, bool] = UP,
                 ladder: Ladder = LADDER, cache: AnswerCache | None = None,
                 book: LoadBook | None = None, cold: frozenset[str] = frozenset()) -> None:
        self.caller = caller
        self.state = RouterState(ladder, down_cooldown_s=60.0)
        # A cold rung: its node is up, no replica runs (no standby: obtainable, cold).
        self.state.observe({n: 0 if n in cold else 1 for n, ok in placeable.items() if ok},
                           placeable, now=0.0)
        self.metrics = LadderMetrics(ladder, enabled=False, app="walker")
        self.background: list[asyncio.Task[Any]] = []
        self.probed: asyncio.Future[None] | None = None
        self.walker = Walker(self.state, caller, self.metrics, cache=cache,
                             probed=self._probed, spawn=self._spawn,
                             llm_rungs=frozenset(r.name for r in ladder.rungs if r.is_compute),
                             book=book)

    def _probed(self) -> asyncio.Future[None]:
        if self.probed is None:
            self.probed = asyncio.get_running_loop().create_future()
        return self.probed

    def _spawn(self, coro: Any) -> None:
        self.background.append(asyncio.get_running_loop().create_task(coro))

    def run(self, make: Callable[[], Awaitable[Any]]) -> Any:
        async def go() -> Any:
            try:
                return await make()
            finally:
                for task in self.background:
                    task.cancel()
        return asyncio.run(go())

    async def stream(self, max_tokens: int = 16, targets: LatencyTargets | None = None
                     ) -> tuple[list[tuple[str, str]], StreamRecord]:
        record = StreamRecord()
        pieces = StreamDriver(self.walker).run(
            GenerationRequest(prompt="hi", max_tokens=max_tokens), None, record,
            targets=targets)
        return [(p.rung, p.text) async for p in pieces], record

    @property
    def counts(self) -> dict[str, Any]:
        return self.metrics.snapshot()


# --- the JSON route's driver (Walker.answer) -------------------------------------------------

def test_a_request_goes_to_the_selectors_rung() -> None:
    rig = Rig(FakeRungCaller({"h100": None, "a100": None}))
    result = rig.run(lambda: rig.walker.answer({"x": 1}, None))
    assert (result.value, result.rung, result.stale) == ("from h100", "h100", False)
    assert rig.counts["requests"] == {"h100": 1}


def test_a_rung_that_fails_is_marked_down_and_the_request_goes_on() -> None:
    caller = FakeRungCaller({"h100": FakeRung(fails="ActorDiedError: gone",
                                              error="ActorDiedError"), "a100": None})
    rig = Rig(caller)
    result = rig.run(lambda: rig.walker.answer({"x": 1}, None))
    assert result.rung == "a100" and rig.state.is_down("h100", rig.walker._clock())
    assert rig.state.current == "a100" and "h100" in caller.lost
    assert rig.counts["resent"] == {"h100": 1}


def test_a_request_its_rung_does_not_take_is_copied_once_and_counted() -> None:
    caller = FakeRungCaller({"h100": FakeRung(takes=False), "a100": None})
    rig = Rig(caller)
    assert rig.run(lambda: rig.walker.answer({}, None)).rung == "a100"
    assert caller.sent == ["h100", "a100"] and rig.counts["hedges"] == {"h100": 1}


def test_a_rung_slow_to_take_a_request_wakes_no_cold_rung() -> None:
    # A moment's lull on the serving rung (a busy machine): a copy to a rung with no
    # running replica could not answer sooner and would start one, so none goes there.
    caller = FakeRungCaller({"h100": FakeRung(take_s=4 * 0.05), "a100": None})
    rig = Rig(caller, cold=frozenset({"a100"}))
    assert rig.state.obtainable(0.0)["a100"] and not rig.state.is_warm("a100")
    assert rig.run(lambda: rig.walker.answer({}, None)).rung == "h100"
    assert caller.sent == ["h100"] and rig.counts["hedges"] == {}


def test_a_stream_its_rung_is_slow_to_take_waits_there_when_below_is_cold() -> None:
    caller = FakeRungCaller({"h100": FakeRung(take_s=4 * 0.05), "a100": None})
    rig = Rig(caller, cold=frozenset({"a100"}))
    pieces, _ = rig.run(rig.stream)
    assert {r for r, _ in pieces} == {"h100"} and caller.sent == ["h100"]
    assert rig.counts["hedges"] == {}


def test_a_busy_rung_is_waited_for_not_hedged() -> None:
    caller = FakeRungCaller({"h100": FakeRung(takes=False, busy=True), "a100": None})
    rig = Rig(caller)

    async def ask_then_free() -> Any:
        task = asyncio.get_running_loop().create_task(rig.walker.answer({}, None))
        await asyncio.sleep(3 * caller.assign_timeout_s)  # three windows: busy, no copy
        assert caller.sent == ["h100"]
        caller.rung("h100").busy = False  # answers nobody any more: the next window copies
        return await task

    assert rig.run(ask_then_free).rung == "a100"
    assert rig.counts["hedges"] == {"h100": 1}


def test_a_rung_still_full_at_the_deadline_sends_the_request_below_and_stays_up() -> None:
    # a100 has room but takes a moment (Serve's assignment): past the deadline it still
    # gets one assign window.
    caller = FakeRungCaller({"h100": FakeRung(takes=False, busy=True),
                             "a100": FakeRung(take_s=0.03)})
    rig = Rig(caller)
    loop_time: list[float] = []

    async def timed() -> Any:
        start = asyncio.get_running_loop().time()
        result = await rig.walker.answer({}, None)
        loop_time.append(asyncio.get_running_loop().time() - start)
        return result

    result = rig.run(timed)
    assert result.rung == "a100"
    assert caller.sent == ["h100", "a100"]
    # It waited its pending_timeout_s (0.3 s) in h100's queue, not a hedge window, no more.
    assert 0.3 <= loop_time[0] < 0.3 + 4 * caller.assign_timeout_s
    assert rig.counts["hedges"] == {}                       # a busy rung is not a slow one
    assert not rig.state.is_down("h100", rig.walker.now())  # full is not down
    assert rig.counts["requests"] == {"a100": 1}


def test_every_rung_full_is_shed_at_the_deadline_with_retry_after_not_a_long_wait() -> None:
    caller = FakeRungCaller({"h100": FakeRung(takes=False, busy=True),
                             "a100": FakeRung(takes=False, busy=True)})
    rig = Rig(caller)
    waited: list[float] = []

    async def timed() -> Any:
        start = asyncio.get_running_loop().time()
        try:
            return await rig.walker.answer({}, None)
        finally:
            waited.append(asyncio.get_running_loop().time() - start)

    with pytest.raises(LadderExhaustedError) as info:
        rig.run(timed)
    assert http.refused_by(info.value) == "shed" and info.value.retry_after_s == 4.5
    causes = [(a.rung, a.cause) for a in info.value.attempts]
    assert causes == [("h100", "busy"), ("a100", "busy"), ("shed", "shed")]
    # The deadline is the request's, not each rung's: a100 gets one window, not another 0.3 s.
    assert 0.3 <= waited[0] < 0.3 + 4 * caller.assign_timeout_s
    assert rig.counts["requests"] == {"shed": 1}


def _all_fail() -> FakeRungCaller:
    return FakeRungCaller({"h100": FakeRung(fails="rung went down"),
                           "a100": FakeRung(fails="rung went down")})


def test_with_every_rung_gone_the_shed_rung_answers_and_is_counted() -> None:
    rig = Rig(_all_fail(), placeable={"h100": False, "a100": False})
    with pytest.raises(LadderExhaustedError) as info:
        rig.run(lambda: rig.walker.answer({}, None))
    assert http.refused_by(info.value) == "shed" and info.value.retry_after_s == 4.5
    assert rig.counts["requests"] == {"shed": 1}


def test_a_request_waits_for_a_rung_that_can_come_back_then_is_shed() -> None:
    rig = Rig(_all_fail())  # nodes alive: their cooldown ends, so the request waits
    with pytest.raises(LadderExhaustedError) as info:
        rig.run(lambda: rig.walker.answer({}, None))
    causes = [(a.rung, a.cause) for a in info.value.attempts]
    assert causes == [("h100", "rung_down"), ("a100", "rung_down"), ("shed", "shed")]


def test_without_a_shed_rung_the_ladder_is_exhausted_and_counted() -> None:
    ladder = Ladder.from_yaml("""
name: bare
policy: {pending_timeout_s: 0.2}
rungs: [{name: h100, resources: {ladder/h100: 1}}]
""")
    rig = Rig(FakeRungCaller({"h100": None}), placeable={"h100": False}, ladder=ladder)
    with pytest.raises(LadderExhaustedError) as info:
        rig.run(lambda: rig.walker.answer({}, None))
    assert [a.cause for a in info.value.attempts] == ["no_rung"]
    assert rig.counts["requests"] == {http.EXHAUSTED: 1}


# --- the OpenAI routes' driver (StreamDriver) counts the same things --------------------------

def test_a_stream_counts_its_answer_like_a_request() -> None:
    rig = Rig(FakeRungCaller({"h100": None, "a100": None}))
    pieces, record = rig.run(rig.stream)
    assert pieces == [("h100", "a"), ("h100", "b"), ("h100", "c")]
    assert record.finish_reason == "stop" and rig.counts["requests"] == {"h100": 1}


def test_a_stream_continues_on_the_next_rung_mid_generation() -> None:
    caller = FakeRungCaller({"h100": FakeRung(fail_after=2), "a100": FakeRung(pieces=["z"])})
    rig = Rig(caller)
    pieces, record = rig.run(rig.stream)
    assert pieces == [("h100", "a"), ("h100", "b"), ("a100", "z")]
    assert record.switches[0]["from"] == "h100" and record.switches[0]["to"] == "a100"
    assert rig.state.is_down("h100", rig.walker._clock())
    assert rig.counts["requests"] == {"a100": 1}


def test_a_move_names_the_rung_that_sent_the_text_not_one_that_failed_before_sending():
    # The engine test's a100 kill: the stream's next rung refused its first try (the probe
    # saw it down a moment) and took the second; the client was told "switched from cpu".
    ladder = Ladder.from_yaml("""
name: walker
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9}
  - {name: cpu, num_cpus: 1, quality: 0.5}
  - {name: shed, kind: shed}
""")
    caller = FakeRungCaller({"h100": FakeRung(fail_after=2), "a100": FakeRung(fail_after=0),
                             "cpu": FakeRung(pieces=["z"])})
    rig = Rig(caller, placeable={"h100": True, "a100": True, "cpu": True}, ladder=ladder)
    pieces, record = rig.run(rig.stream)
    assert pieces == [("h100", "a"), ("h100", "b"), ("cpu", "z")]
    assert [(s["from"], s["to"]) for s in record.switches] == [("h100", "cpu")]


def test_a_notice_moves_an_open_stream_before_the_kill_without_marking_the_rung_down():
    caller = FakeRungCaller({"h100": None, "a100": FakeRung(pieces=["y", "z"])})
    caller.signal_leaving(["h100"])  # its node drains; the rung below is warm
    rig = Rig(caller)
    pieces, record = rig.run(rig.stream)
    assert pieces == [("h100", "a"), ("a100", "y"), ("a100", "z")]  # nothing lost
    assert [(s["from"], s["to"]) for s in record.switches] == [("h100", "a100")]
    assert "preemption notice" in record.switches[0]["reason"]
    assert not rig.state.is_down("h100", rig.walker._clock())  # going away, not failed


def test_a_stream_its_rung_does_not_take_starts_elsewhere_and_counts_a_hedge() -> None:
    rig = Rig(FakeRungCaller({"h100": FakeRung(takes=False), "a100": None}))
    pieces, _ = rig.run(rig.stream)
    assert {r for r, _ in pieces} == {"a100"}
    assert rig.counts["hedges"] == {"h100": 1}
    assert not rig.state.is_down("h100", rig.walker._clock())  # slow, not gone


def test_a_stream_every_rung_is_slow_to_take_waits_on_its_last_rung() -> None:
    # A busy machine: no replica takes a stream within the hedge wait and none answered
    # anyone lately. The stream leaves h100 for a100 once, then waits for a100 (nowhere
    # else is left), rather than giving up on it for h100 again until its deadline (503).
    slow = 3 * 0.05
    caller = FakeRungCaller({"h100": FakeRung(take_s=slow), "a100": FakeRung(take_s=slow)})
    rig = Rig(caller)
    pieces, _ = rig.run(rig.stream)
    assert {r for r, _ in pieces} == {"a100"} and caller.sent == ["h100", "a100"]
    assert rig.counts["requests"] == {"a100": 1} and rig.counts["hedges"] == {"h100": 1}


def test_a_stream_with_every_rung_gone_is_shed_and_counted_as_the_json_route_does() -> None:
    rig = Rig(_all_fail(), placeable={"h100": False, "a100": False})
    with pytest.raises(LadderExhaustedError) as info:
        rig.run(rig.stream)
    assert http.refused_by(info.value) == "shed"
    assert rig.counts["requests"] == {"shed": 1}


def test_a_stream_that_loses_its_last_rung_after_text_fails_and_is_counted() -> None:
    caller = FakeRungCaller({"h100": FakeRung(fail_after=1),
                             "a100": FakeRung(fails="rung went down")})
    rig = Rig(caller, placeable={"h100": True, "a100": True})
    seen: list[str] = []

    async def read() -> None:
        record = StreamRecord()
        async for piece in StreamDriver(rig.walker).run(GenerationRequest(prompt="hi"),
                                                        None, record):
            seen.append(piece.text)

    with pytest.raises(StreamFailed):
        rig.run(read)
    assert seen == ["a"] and rig.counts["requests"] == {"shed": 1}


def test_a_stream_stops_at_max_tokens_across_a_move() -> None:
    caller = FakeRungCaller({"h100": FakeRung(fail_after=2), "a100": FakeRung(pieces=list("xyz"))})
    rig = Rig(caller)
    pieces, record = rig.run(lambda: rig.stream(max_tokens=3))
    assert "".join(t for _, t in pieces) == "abx" and record.finish_reason == "length"


def test_a_rung_that_fails_after_its_last_piece_ends_the_stream_whole() -> None:
    # A backend (another cluster's app) that drops the connection after the last piece:
    # nothing is left to continue, so no rung is needed and the stream is not broken.
    caller = FakeRungCaller({"h100": FakeRung(fail_after=3), "a100": FakeRung()})
    rig = Rig(caller, placeable={"h100": True, "a100": False})  # no rung below it
    pieces, record = rig.run(lambda: rig.stream(max_tokens=3))
    assert "".join(t for _, t in pieces) == "abc" and record.finish_reason == "length"


# --- late pieces (an inter-token target) ------------------------------------------------------

LATE = LatencyTargets(inter_token_s=0.05, ttft_s=1.0)


def test_a_late_piece_moves_the_stream_once_and_leaves_its_rung_up() -> None:
    caller = FakeRungCaller({"h100": FakeRung(delay_s=0.2, pieces=list("abcdef")),
                             "a100": FakeRung(delay_s=0.2, pieces=list("xyz"))})
    rig = Rig(caller)
    pieces, record = rig.run(lambda: rig.stream(targets=LATE))
    # h100 sends "a", then is late; a100 continues, late too, but the one move is spent.
    assert pieces == [("h100", "a"), ("a100", "x"), ("a100", "y"), ("a100", "z")]
    assert record.switches[0]["from"] == "h100" and "inter-token" in \
        record.switches[0]["reason"]
    assert not rig.state.is_down("h100", rig.walker.now())  # late is not gone


def test_no_move_without_moves_left_or_to_a_rung_that_would_be_slower() -> None:
    def run(targets: LatencyTargets, book: LoadBook | None = None) -> set[str]:
        caller = FakeRungCaller({"h100": FakeRung(delay_s=0.1, pieces=list("abc")),
                                 "a100": None})
        rig = Rig(caller, book=book)
        pieces, _ = rig.run(lambda: rig.stream(targets=targets))
        return {r for r, _ in pieces}

    assert run(LATE.model_copy(update={"late_moves": 0})) == {"h100"}
    slow_below = LoadBook({"h100": 1, "a100": 1}, answer_s=None, ttft_s=None,
                          slow_after_s=10.0)
    slow_below.stream_ended("a100", 5.0)  # a100 holds a place 5 s: its first piece is late
    assert run(LATE, slow_below) == {"h100"}
    assert run(LATE) == {"h100", "a100"}
