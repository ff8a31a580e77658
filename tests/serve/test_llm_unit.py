"""The LLM ladder's pure parts: requests, continuation, stop sequences, answers, models."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_ladder import Ladder
from ray_ladder.serve.llm.ngram import NGramLM, piece, tokenize
from ray_ladder.serve.llm.protocol import GenerationRequest, Message, count_tokens, first_stop
from ray_ladder.serve.llm.responses import Answer, StreamRecord, models_list, sse
from ray_ladder.serve.llm.routes import route_of
from ray_ladder.serve.llm.schema import OpenAIError, parse_request, wants_usage

LADDER = Ladder.from_dict({"name": "llm", "rungs": [
    {"name": "h100", "resources": {"ladder/h100": 1}, "params": {"model": "big"}},
    {"name": "cpu", "num_cpus": 1, "params": {"model": "tiny"}},
    {"name": "shed", "kind": "shed"}]})
CHAT = {"model": "llm", "messages": [{"role": "user", "content": "hi there"}]}


def test_a_chat_request_becomes_a_generation_request() -> None:
    req, gen = parse_request("chat", {**CHAT, "max_tokens": 7, "stop": ".", "seed": 3},
                             "llm")
    assert gen.messages == (Message("user", "hi there"),) and gen.max_tokens == 7
    assert gen.stop == (".",) and gen.seed == 3 and gen.is_chat
    assert gen.context_text() == "user: hi there\nassistant: "
    assert not wants_usage(req)


def test_a_completion_request_and_text_parts() -> None:
    _, gen = parse_request("completion", {"model": "llm", "prompt": ["Once"]}, "llm")
    assert gen.prompt == "Once" and not gen.is_chat
    _, chat = parse_request("chat", {"model": "llm", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"},
                                     {"type": "text", "text": "b"}]}]}, "llm")
    assert chat.messages[0].content == "ab"


@pytest.mark.parametrize(("body", "status", "param"), [
    ([1, 2, 3], 400, None),
    ("text", 400, None),
    ({**CHAT, "messages": []}, 400, "messages"),
    ({**CHAT, "temperature": "hot"}, 400, "temperature"),
    ({**CHAT, "temperature": 3}, 400, "temperature"),
    ({**CHAT, "max_tokens": 0}, 400, "max_tokens"),
    ({**CHAT, "surprise": 1}, 400, "surprise"),
    ({**CHAT, "n": 2}, 400, "n"),
    ({**CHAT, "tools": [{"type": "function"}]}, 400, "tools"),
    ({**CHAT, "logprobs": True}, 400, "logprobs"),
    ({**CHAT, "presence_penalty": 0.5}, 400, "presence_penalty"),
    ({**CHAT, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ({**CHAT, "stream_options": {"include_usage": True}}, 400, "stream_options"),
    ({**CHAT, "messages": [{"role": "robot", "content": "x"}]}, 400, "messages.0.role"),
    ({**CHAT, "model": "gpt-4"}, 404, "model"),
    # Wrong types are refused, not coerced (OpenAI answers them with a 400 too); before,
    # each of these answered 200, the last two with an event stream of one token.
    ({**CHAT, "temperature": "0.7"}, 400, "temperature"),
    ({**CHAT, "max_tokens": "5"}, 400, "max_tokens"),
    ({**CHAT, "stream": "yes"}, 400, "stream"),
    ({**CHAT, "max_tokens": True}, 400, "max_tokens"),
    ({**CHAT, "seed": 1.5}, 400, "seed"),
    # What is not a no-op stays refused, naming the parameter.
    ({**CHAT, "response_format": {"type": "json_object"}}, 400, "response_format"),
    ({**CHAT, "tool_choice": "auto"}, 400, "tool_choice"),
    ({**CHAT, "logit_bias": {"50256": -100}}, 400, "logit_bias"),
    ({**CHAT, "logprobs": 0}, 400, "logprobs"),
    ({**CHAT, "repetition_penalty": 1.2}, 400, "repetition_penalty"),
    ({**CHAT, "ignore_eos": "yes"}, 400, "ignore_eos"),
])
def test_malformed_or_unsupported_requests_are_4xx_naming_the_param(
        body: object, status: int, param: str | None) -> None:
    with pytest.raises(OpenAIError) as caught:
        parse_request("chat", body, "llm")
    assert caught.value.status == status
    assert caught.value.param == param
    error = caught.value.body()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]


def test_the_defaults_of_unsupported_parameters_are_accepted() -> None:
    parse_request("chat", {**CHAT, "presence_penalty": 0, "logprobs": False, "n": 1,
                           "stream": True, "stream_options": {"include_usage": True}}, "llm")


def test_no_op_values_client_frameworks_send_on_every_request_are_accepted() -> None:
    # Before: each was a 400 although it asks for nothing the ladder does not do.
    _, gen = parse_request("chat", {
        **CHAT, "response_format": {"type": "text"}, "tools": [], "tool_choice": "none",
        "logit_bias": {}, "functions": [], "modalities": ["text"], "top_logprobs": 0,
        "frequency_penalty": 0.0, "temperature": 0, "top_p": 1}, "llm")
    assert gen.temperature == 0.0 and gen.top_p == 1.0  # an integer is a number
    parse_request("completion", {"model": "llm", "prompt": "x", "echo": False,
                                 "best_of": 1, "suffix": ""}, "llm")


def test_vllm_s_load_generator_fields_are_accepted_and_ignore_eos_is_carried() -> None:
    # vLLM's serving benchmark sends both on every request (random prompts: ignore_eos);
    # before, each was a 400 "unknown field", so every request of its run failed.
    _, gen = parse_request("completion", {"model": "llm", "prompt": "x", "max_tokens": 4,
                                          "repetition_penalty": 1.0, "ignore_eos": True,
                                          "stream": True}, "llm")
    assert gen.ignore_eos
    assert GenerationRequest.from_dict(gen.continuing("a", 1).to_dict()).ignore_eos
    _, plain = parse_request("chat", CHAT, "llm")
    assert not plain.ignore_eos


def test_a_continuation_carries_the_text_sent_and_the_tokens_left() -> None:
    gen = GenerationRequest(prompt="Count:", max_tokens=10)
    nxt = gen.continuing(" 1 2", 2)
    assert nxt.context_text() == "Count: 1 2" and nxt.max_tokens == 8
    assert GenerationRequest.from_dict(nxt.to_dict()) == nxt
    chat = GenerationRequest(messages=(Message("user", "q"),), max_tokens=3).continuing("a", 1)
    assert chat.context_text().endswith("assistant: a")


def test_payloads_of_the_json_route() -> None:
    assert GenerationRequest.from_payload({"prompt": "x", "max_tokens": 2}).max_tokens == 2
    for bad in ([1], {"prompt": 3}, {"messages": "x"}, {"prompt": "x", "max_tokens": -1}):
        with pytest.raises(ValueError):
            GenerationRequest.from_payload(bad)


def test_stop_sequences_are_found_across_piece_boundaries() -> None:
    assert first_stop("abc END", ("END",), start=5) == 4  # the stop straddles old and new
    assert first_stop("abc", ("x",)) is None
    assert first_stop("a.b!c", (".", "!")) == 1


def test_token_counts() -> None:
    assert count_tokens("Hello, world!") == 4
    assert GenerationRequest(messages=(Message("user", "a b"), Message("user", "c"))
                             ).prompt_tokens() == 3


def test_answers_name_the_real_model_and_the_rung() -> None:
    answer = Answer("chat", LADDER, prompt_tokens=2)
    first = json.loads(answer.chunk("h100", " 1", degraded_s=0.0)[len(b"data: "):])
    assert first["model"] == "big" and first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": " 1"}
    moved = json.loads(answer.chunk("cpu", " 2", degraded_s=1.5, switched_from="h100",
                                    reason="node died")[6:])
    assert moved["model"] == "tiny" and moved["ladder"]["switched_from"] == "h100"
    assert "role" not in moved["choices"][0]["delta"]
    record = StreamRecord(" 1 2", {"h100": 1, "cpu": 1}, [], "stop")
    whole = Answer("completion", LADDER, 2).whole("cpu", record, degraded_s=0.0)
    assert whole["choices"][0]["text"] == " 1 2" and whole["usage"]["total_tokens"] == 4
    assert [r["model"] for r in whole["ladder"]["tokens_by_rung"]] == ["big", "tiny"]
    usage = json.loads(answer.usage_chunk("cpu", record)[6:])
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 2


def test_models_list_the_ladder_and_its_rungs() -> None:
    data = models_list(LADDER)["data"]
    assert [m["id"] for m in data] == ["llm"]
    assert [r["model"] for r in data[0]["ladder"]["rungs"]] == ["big", "tiny", "shed"]
    assert sse({"a": 1}).endswith(b"\n\n")


def test_routes_are_found_under_any_prefix() -> None:
    assert route_of("/v1/models/") == "/v1/models"
    assert route_of("/app/v1/completions") == "/v1/completions"
    assert route_of("/-/ladder") is None


def test_ngram_models_continue_their_context_deterministically() -> None:
    lm = NGramLM.train(["the cat sat on the mat", "the dog sat on the log"], order=3)
    assert "".join(lm.generate("the cat", 3, temperature=0)) == " sat on the"
    assert list(lm.generate("x", 4, 0.8, seed=1)) == list(lm.generate("x", 4, 0.8, seed=1))
    # After "the" alone four words tie (ties go to the last in sort order: "mat"); the
    # other four predictions have the context to be right.
    assert lm.accuracy(["the cat sat on the mat"]) == pytest.approx(4 / 5)


@given(st.lists(st.sampled_from(["word", "x", ",", ".", "(", ")", "7"]), max_size=20))
def test_pieces_rejoin_into_text_that_tokenizes_back(tokens: list[str]) -> None:
    text, previous = "", None
    for token in tokens:
        text += piece(token, previous)
        previous = token
    assert tokenize(text) == [t for t in tokens]
