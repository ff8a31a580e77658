"""Serve deployments and applications as rungs, and public error bodies: no cluster needed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from ray import serve
from ray.exceptions import RayTaskError

from ray_ladder import Ladder, RungContext, RungUnavailableError
from ray_ladder.serve import build_app
from ray_ladder.serve.deployed import rung_class
from ray_ladder.serve.errors import MAX_MESSAGE_CHARS, public_error
from ray_ladder.serve.llm.openai_server import (
    OpenAIServerRung,
    is_openai_server,
    item_texts,
    openai_body,
)
from ray_ladder.serve.llm.protocol import GenerationRequest, Message

LADDER = Ladder.from_yaml("""
name: t
rungs:
  - {name: gpu, resources: {ladder/gpu: 1}, num_gpus: 1}
  - {name: cpu, num_cpus: 0.1, standby_replicas: 1}
""")


@serve.deployment(max_ongoing_requests=7, user_config={"k": 1}, num_replicas=3,
                  ray_actor_options={"num_cpus": 0.5, "runtime_env": {"env_vars": {"A": "1"}},
                                     "resources": {"mine": 1}},
                  placement_group_bundles=[{"CPU": 1, "mine": 1}, {"GPU": 1}])
class Engine:
    def __init__(self, config):
        self.config = config

    def reconfigure(self, config):
        pass

    async def chat(self, request):
        yield "data: {}"

    async def completions(self, request):
        yield "data: {}"


@serve.deployment(autoscaling_config={"max_replicas": 4, "upscale_delay_s": 2})
class Tiny:
    def __init__(self, rung, size=1):
        self.size = size

    def __call__(self, payload):
        return payload


def rung_deployments(app):
    """Rung name -> the bound deployment the ladder app deploys for it."""
    return {n: a._bound_deployment for n, a in app._bound_deployment.init_args[1].items()}


def test_an_application_keeps_its_args_and_options_under_the_rungs_placement():
    app = build_app(LADDER, {"gpu": Engine.bind({"model": "m"}), "cpu": Tiny})
    gpu = rung_deployments(app)["gpu"]
    assert gpu.name == "gpu" and gpu.init_args == ({"model": "m"},)
    assert gpu.max_ongoing_requests == 7 and gpu.user_config == {"k": 1}
    assert gpu.ray_actor_options == {"num_cpus": 0.5, "num_gpus": 1,
                                     "runtime_env": {"env_vars": {"A": "1"}},
                                     "resources": {"mine": 1, "ladder/gpu": 1.0}}
    # Serve places the replica actor in bundle 0: it must hold the rung's resources.
    assert gpu._replica_config.placement_group_bundles == [
        {"CPU": 1.0, "GPU": 1.0, "mine": 1.0, "ladder/gpu": 1.0}, {"GPU": 1}]
    scaling = gpu._deployment_config.autoscaling_config
    assert (scaling.min_replicas, scaling.initial_replicas, scaling.max_replicas) == (0, 0, 3)
    assert scaling.policy.policy_function == "ray_ladder.serve.scaling:StandbyPolicy"
    cls = gpu.func_or_class
    assert issubclass(cls, Engine.func_or_class) and cls.ladder_rung.name == "gpu"
    assert app._bound_deployment.init_args[3]["llm_rungs"] == ["gpu"]


def test_a_deployment_is_built_like_a_class_and_keeps_its_autoscaling_fields():
    app = build_app(LADDER, {"gpu": Engine.bind({}), "cpu": Tiny},
                    init_kwargs={"cpu": {"size": 2}})
    cpu = rung_deployments(app)["cpu"]
    assert cpu.init_args[0].name == "cpu" and cpu.init_kwargs == {"size": 2}
    scaling = cpu._deployment_config.autoscaling_config
    assert scaling.max_replicas == 4 and scaling.upscale_delay_s == 2
    assert scaling.min_replicas == 0 and scaling.initial_replicas == 0
    assert cpu.ray_actor_options["num_cpus"] == 0.1


def test_import_paths_may_name_deployments_and_applications():
    import tests.serve.test_deployed as me

    me.BOUND = Engine.bind({})
    app = build_app(LADDER, {"gpu": "tests.serve.test_deployed:BOUND",
                             "cpu": "tests.serve.test_deployed:Tiny"})
    assert set(rung_deployments(app)) == {"gpu", "cpu"}


def test_init_kwargs_for_an_application_and_uncallable_classes_are_refused():
    with pytest.raises(ValueError, match="bound already"):
        build_app(LADDER, {"gpu": Engine.bind({}), "cpu": Tiny},
                  init_kwargs={"gpu": {"x": 1}})

    @serve.deployment
    class Nothing:
        pass

    with pytest.raises(TypeError, match="has no __call__"):
        build_app(LADDER, {"gpu": Engine.bind({}), "cpu": Nothing})


def test_rung_class_adds_the_ladder_methods_only():
    cls = rung_class(Engine.func_or_class, RungContext.of(LADDER, "gpu"))
    assert {"ladder_ping", "ladder_generate", "generate"} <= set(dir(cls))
    assert cls.reconfigure is Engine.func_or_class.reconfigure
    assert is_openai_server(Engine.func_or_class) and not is_openai_server(cls)


def test_openai_server_items_become_text_and_errors_say_whose_fault():
    batch = ['data: {"choices": [{"delta": {"content": "a"}}]}\n\n',
             'data: {"choices": [{"text": "b"}]}\n\ndata: [DONE]\n\n']
    assert item_texts(batch) == ["a", "b"]

    class Info:
        def __init__(self, code):
            self.error = type("E", (), {"code": code, "message": "too long"})()

    with pytest.raises(ValueError, match="too long"):
        item_texts(Info(400))
    with pytest.raises(RungUnavailableError):
        item_texts(Info(503))
    kind, body = openai_body(GenerationRequest(messages=(Message("user", "hi"),),
                                               continuation="one", max_tokens=2), "m")
    assert kind == "completion" and body["prompt"].endswith("assistant: one")


def ray_error(cause: BaseException) -> BaseException:
    return RayTaskError(
        "ServeReplica:app:cpu.handle_request", "Traceback (most recent call last):\n...",
        cause, proctitle="ray::ServeReplica", pid=4242, ip="10.1.2.3",
        actor_repr="<ServeReplica object at 0x7f00>", actor_id="ab" * 16).as_instanceof_cause()


def test_public_error_is_the_users_type_and_first_line_without_internals():
    err = ray_error(ValueError("\x1b[31mprompt: not a string\x1b[0m\nsecond line"))
    assert isinstance(err, ValueError) and "pid=4242" in str(err)
    assert public_error(err) == ("ValueError", "prompt: not a string")
    kind, message = public_error(ray_error(RuntimeError("x" * 1000)))
    assert kind == "RuntimeError" and len(message) == MAX_MESSAGE_CHARS
    nested = RayTaskError("outer", "tb", ray_error(KeyError("k")))
    assert public_error(nested) == ("KeyError", "'k'")



class _TokenizingServer(OpenAIServerRung):
    """Shaped like Ray Serve LLM's ``LLMServer`` on a vLLM engine: ``tokenize`` too."""

    def __init__(self, tokenizer: str, context: int = 64) -> None:
        self.ladder_rung = RungContext("a100", 1, "a100", params={
            "model": "m", "tokenizer": tokenizer})
        self.asked: list[tuple[str, object]] = []
        self.context = context

    async def tokenize(self, request):
        self.asked.append(("tokenize", request))

        async def answer():
            yield SimpleNamespace(tokens=[1, 2, 3], max_model_len=self.context)
        return answer()

    async def chat(self, request):
        raise AssertionError("a moved stream is a completion of token ids")

    async def completions(self, request):
        self.asked.append(("completions", request))

        async def answer():
            yield ['data: {"choices": [{"text": "x", "token_ids": [9], "finish_reason": '
                   '"length"}], "usage": {"completion_tokens": 1, "prompt_tokens": 5}}\n\n'
                   'data: [DONE]\n\n']
        return answer()


def _moved(tokenizer: str | None) -> GenerationRequest:
    return GenerationRequest(messages=(Message("user", "hi"),), continuation="one tw",
                             continuation_ids=(7, 8), tokenizer=tokenizer, max_tokens=100,
                             ignore_eos=True)


async def _pieces(server: _TokenizingServer, request: GenerationRequest) -> list:
    return [p async for p in server.generate(request)]


def _field(request: object, name: str) -> object:
    return getattr(request, name)


def test_an_engine_server_continues_from_its_own_tokens_in_its_own_template():
    # Before: a stream that moved onto an LLMServer went on from "user: hi\nassistant: one
    # tw", a prompt its model was never trained on, and its chunks were counted as tokens.
    same = _TokenizingServer(tokenizer="t")
    pieces = asyncio.run(_pieces(same, _moved("t")))
    (_, tok), (_, completion) = same.asked
    assert _field(tok, "add_generation_prompt") is True  # the chat template's own turn
    assert list(_field(completion, "prompt")) == [1, 2, 3, 7, 8]  # + the ids sent
    assert _field(completion, "max_tokens") == 59  # cut to the room in its context
    assert _field(completion, "ignore_eos") is True
    assert [(p.text, p.count) for p in pieces] == [("x", 1)]  # the engine's count
    other = _TokenizingServer(tokenizer="u")
    asyncio.run(_pieces(other, _moved("t")))
    (_, tok), (_, completion) = other.asked
    assert _field(tok, "continue_final_message") is True  # the text, as its assistant's
    assert [m["content"] for m in _field(tok, "messages")] == ["hi", "one tw"]
    assert list(_field(completion, "prompt")) == [1, 2, 3]


def test_an_answer_that_fills_the_engine_s_context_ends_with_length():
    full = _TokenizingServer(tokenizer="t", context=5)
    pieces = asyncio.run(_pieces(full, _moved("t")))
    assert [(p.count, p.finish_reason) for p in pieces] == [(0, "length")]
    assert [kind for kind, _ in full.asked] == ["tokenize"]


def test_a_server_that_cannot_tokenize_a_continuation_fails_the_rung_not_the_request():
    class NoTokens(_TokenizingServer):
        async def tokenize(self, request):
            async def answer():
                yield SimpleNamespace(error=SimpleNamespace(
                    code=400, message="This model does not support the 'tokenization' task"))
            return answer()

    with pytest.raises(RungUnavailableError, match="cannot tokenize"):
        asyncio.run(_pieces(NoTokens(tokenizer="t"), _moved("t")))
