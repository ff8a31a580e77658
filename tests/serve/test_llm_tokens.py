"""Engine tokens, not chunks (no Ray): pieces that carry several tokens or part of a
character, the token ids a continuation starts from, and a backend stream that stops
short of its answer."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from ray_ladder import RungContext
from ray_ladder.core.exceptions import RungUnavailableError
from ray_ladder.serve.llm.backend import OpenAIBackendRung
from ray_ladder.serve.llm.chunks import ChunkReader, TruncatedStream
from ray_ladder.serve.llm.protocol import GenerationRequest, Message, Tokens
from ray_ladder.serve.llm.replica import stream_pieces
from ray_ladder.serve.llm.responses import StreamRecord


def test_a_piece_crosses_the_wire_as_it_was_made():
    piece = Tokens("ab", 2, (5, 6), "tok", None, 9)
    assert Tokens.of(piece.wire()) == piece
    assert Tokens.of("x") == Tokens("x")  # a plain str piece is one token, no ids


def test_a_record_counts_engine_tokens_and_holds_those_without_text():
    record = StreamRecord()
    assert record.take("h100", Tokens("He", 1, (1,), "t", prompt_tokens=7)) == "He"
    record.text += "He"
    assert record.take("h100", Tokens("", 1, (2,), "t")) == ""  # half a character
    assert record.completion_tokens == 1  # held: no text was sent for it yet
    assert record.take("h100", Tokens("é!", 2, (3, 4), "t")) == "é!"
    record.text += "é!"
    assert record.completion_tokens == 4
    assert record.continued_ids() == ((1, 2, 3, 4), "t")
    assert record.prompt_tokens == 7
    record.take("h100", Tokens("", 1, (5,), "t"))
    record.drop_held()  # the rung was lost: what it held is regenerated below
    assert record.completion_tokens == 4 and record.continued_ids() == ((1, 2, 3, 4), "t")


def test_ids_are_kept_only_while_one_tokenizer_made_them_all():
    record = StreamRecord()
    record.take("h100", Tokens("a", 1, (1,), "x"))
    record.take("a100", Tokens("b", 1, (9,), "y"))
    assert record.continued_ids() == ((), None)
    plain = StreamRecord()
    plain.take("cpu", Tokens("word"))  # a rung that gives no ids
    assert plain.continued_ids() == ((), None)


def test_a_continuation_carries_ids_only_for_the_tokenizer_that_made_them():
    request = GenerationRequest(messages=(Message("user", "hi"),), max_tokens=10)
    rest = request.continuing("abc", 3, (1, 2, 3), "x")
    assert (rest.continuation, rest.continuation_ids, rest.tokenizer, rest.max_tokens) == (
        "abc", (1, 2, 3), "x", 7)
    assert GenerationRequest.from_dict(rest.to_dict()) == rest
    assert request.continuing("abc", 3).continuation_ids == ()
    assert rest.continuing("d", 1, (4,), "y").continuation_ids == ()


def test_the_replica_caps_a_generation_at_max_tokens_in_engine_tokens():
    async def generate(request):
        for i in range(10):
            yield Tokens(f"{i}", 3, (i, i, i), "t")

    async def collect():
        req = GenerationRequest(prompt="p", max_tokens=7)
        return [p async for p in stream_pieces(generate, req.to_dict())]

    pieces = asyncio.run(collect())
    assert sum(Tokens.of(p).count for p in pieces) == 9  # three pieces reach 7


def test_a_reader_counts_from_usage_and_knows_a_finished_stream():
    reader = ChunkReader("b", "t", usage_counts=True)
    first = reader.line('data: {"choices": [{"delta": {"role": "assistant", "content": ""}}],'
                        ' "usage": {"prompt_tokens": 4, "completion_tokens": 0}}')
    assert first is not None and first.prompt_tokens == 4 and first.count == 0
    two = reader.line('data: {"choices": [{"delta": {"content": "ab"}, "token_ids": [1, 2]}],'
                      ' "usage": {"completion_tokens": 2}}')
    assert two is not None and (two.count, two.ids) == (2, (1, 2))
    last = reader.line('data: {"choices": [{"delta": {}, "finish_reason": "length"}],'
                       ' "usage": {"completion_tokens": 2}}')
    assert last is not None and last.finish_reason == "length" and last.count == 0
    reader.end()  # a finish_reason: the answer ended


@pytest.mark.parametrize("lines", [
    ['data: {"choices": [{"text": "a"}]}'],                       # no [DONE], no finish
    ["<html><body>502 Bad Gateway</body></html>"],                # not a stream at all
    [],                                                           # an empty answer
])
def test_a_stream_that_stops_short_is_the_rung_s_failure(lines):
    reader = ChunkReader("b")
    for line in lines:
        reader.line(line)
    with pytest.raises(TruncatedStream):
        reader.end()
    assert issubclass(TruncatedStream, RungUnavailableError)


def test_a_malformed_line_is_the_rung_s_failure_not_the_request_s():
    with pytest.raises(TruncatedStream, match="not JSON"):
        ChunkReader("b").line("data: {not json")


def _rung(handler, engine: str = "openai") -> OpenAIBackendRung:
    rung = OpenAIBackendRung(RungContext("ext", 0, "x", params={
        "base_url": "http://backend.invalid/v1", "model": "m", "engine": engine}))
    rung._client = httpx.AsyncClient(base_url=rung.base_url,
                                     transport=httpx.MockTransport(handler))
    return rung


async def _drain(rung: OpenAIBackendRung) -> list[Tokens]:
    return [p async for p in rung.generate(GenerationRequest(prompt="p", max_tokens=4))]


@pytest.mark.parametrize("status", [401, 403, 404, 408, 429, 500, 503])
def test_a_backend_s_own_fault_is_a_fall(status):
    rung = _rung(lambda request: httpx.Response(status, text="no"))
    with pytest.raises(RungUnavailableError, match=str(status)):
        asyncio.run(_drain(rung))


@pytest.mark.parametrize("status", [400, 413, 422])
def test_the_request_s_own_fault_is_a_400(status):
    rung = _rung(lambda request: httpx.Response(status, text="context too long"))
    with pytest.raises(ValueError, match="refused the request"):
        asyncio.run(_drain(rung))


def test_a_200_that_is_a_proxy_s_error_page_is_a_fall():
    rung = _rung(lambda request: httpx.Response(200, text="<html>upstream error</html>"))
    with pytest.raises(TruncatedStream):
        asyncio.run(_drain(rung))


def test_a_finished_stream_yields_its_text():
    body = ('data: {"choices": [{"text": "a"}]}\n\n'
            'data: {"choices": [{"text": "b", "finish_reason": "length"}]}\n\n'
            "data: [DONE]\n\n")
    rung = _rung(lambda request: httpx.Response(200, text=body))
    assert "".join(p.text for p in asyncio.run(_drain(rung))) == "ab"


@pytest.mark.parametrize(("engine", "sent"), [("vllm", True), ("openai", False)])
def test_ignore_eos_goes_to_a_vllm_engine_only(engine, sent):
    bodies: list[dict] = []
    done = 'data: {"choices": [{"text": "a", "finish_reason": "length"}]}\n\ndata: [DONE]\n\n'

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":  # vLLM's /models: its context length
            return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 64}]})
        bodies.append(json.loads(request.content))
        return httpx.Response(200, text=done)

    rung = _rung(handler, engine)
    asyncio.run(_collect(rung.generate(GenerationRequest(prompt="p", max_tokens=4,
                                                         ignore_eos=True))))
    assert bodies and bodies[-1].get("ignore_eos", False) is sent  # a plain OpenAI API
    # would answer an unknown field with a 400


async def _collect(pieces) -> list[Tokens]:
    return [p async for p in pieces]


# --- the stream driver over a fake caller: engine tokens across a move --------------------

def _wire(text: str, ids: tuple[int, ...], tok: str = "t") -> dict:
    return Tokens(text, len(ids), ids, tok).wire()


def test_a_move_asks_the_next_rung_for_the_tokens_left_and_gives_it_the_ids():
    from ray_ladder.serve.fake import FakeRung, FakeRungCaller
    from tests.serve.test_walker import Rig

    h100 = FakeRung(pieces=[_wire("ab", (1, 2)), _wire("", (3,)), _wire("c", (4, 5))],
                    fail_after=2)  # lost with token 3 held (half a character)
    a100 = FakeRung(pieces=[_wire("xyz", (7, 8, 9)),
                            Tokens("", 0, finish_reason="length").wire()])
    caller = FakeRungCaller({"h100": h100, "a100": a100})
    rig = Rig(caller)
    pieces, record = rig.run(lambda: rig.stream(max_tokens=5))
    assert "".join(t for _, t in pieces) == "abxyz"
    rung, sent = caller.streamed[-1]
    assert rung == "a100" and sent["max_tokens"] == 3  # 5 less the 2 sent, not the pieces
    assert sent["continuation"] == "ab" and sent["continuation_ids"] == (1, 2)
    assert record.tokens == {"h100": 2, "a100": 3} and record.finish_reason == "length"


def test_an_answer_with_no_text_is_its_rung_s():
    from ray_ladder.serve.fake import FakeRung, FakeRungCaller
    from tests.serve.test_walker import Rig

    done = Tokens("", 0, finish_reason="stop").wire()
    rig = Rig(FakeRungCaller({"h100": FakeRung(pieces=[done]), "a100": None}))
    pieces, record = rig.run(rig.stream)
    assert pieces == [] and record.rung == "h100" and record.finish_reason == "stop"


# --- pieces that queued go together --------------------------------------------------------

def test_tokens_that_queued_go_as_one_piece_and_a_held_tail_stays_apart():
    from ray_ladder.serve.llm.coalesce import joined

    batch = [Tokens("a", 1, (1,), "t", prompt_tokens=4), Tokens("b", 2, (2, 3), "t"),
             Tokens("", 1, (4,), "t")]  # the last: half a character, no text yet
    head, tail = joined(batch)
    assert (head.text, head.count, head.ids, head.prompt_tokens) == ("ab", 3, (1, 2, 3), 4)
    assert (tail.text, tail.count, tail.ids) == ("", 1, (4,))
    assert joined(["x", "y"]) == ["x", "y"]  # a str piece is a rung's own unit: kept
    mixed = joined([Tokens("a", 1, (1,), "t"), Tokens("b", 1)])  # ids for one of two
    assert mixed[0].count == 2 and mixed[0].ids == ()


def test_a_batch_is_what_waited_and_an_error_comes_after_the_pieces_before_it():
    from ray_ladder.serve.llm.coalesce import ready_batches

    async def source():
        yield 1
        yield 2
        await asyncio.sleep(0.05)
        yield 3
        raise RuntimeError("lost")

    async def collect():
        seen = []
        with pytest.raises(RuntimeError, match="lost"):
            async for batch in ready_batches(source()):
                seen.append(batch)
        return seen

    batches = asyncio.run(collect())
    assert [p for b in batches for p in b] == [1, 2, 3]  # nothing lost, in order
    assert batches[0] == [1, 2]  # ready together: one batch


def test_done_alone_is_an_empty_answer_and_the_rung_s_failure():
    rung = _rung(lambda request: httpx.Response(
        200, text="data: [DONE]\n\n", headers={"content-type": "text/event-stream"}))
    with pytest.raises(TruncatedStream, match="empty answer"):
        asyncio.run(_drain(rung))


@pytest.mark.parametrize("status", [429, 503])
def test_a_backend_s_retry_after_travels_with_its_fall(status):
    rung = _rung(lambda request: httpx.Response(status, text="busy",
                                                headers={"Retry-After": "7"}))
    with pytest.raises(RungUnavailableError) as caught:
        asyncio.run(_drain(rung))
    assert caught.value.retry_after_s == 7.0
    rung = _rung(lambda request: httpx.Response(status, text="busy"))
    with pytest.raises(RungUnavailableError) as caught:
        asyncio.run(_drain(rung))
    assert caught.value.retry_after_s is None


def test_an_html_page_with_its_content_type_falls_before_any_body_is_read():
    rung = _rung(lambda request: httpx.Response(
        200, text="<html>502</html>", headers={"content-type": "text/html"}))
    with pytest.raises(TruncatedStream, match="not an event stream"):
        asyncio.run(_drain(rung))
