"""OpenAI-compatible request models and error objects (pure: pydantic, no Ray).

Requests are validated strictly: an unknown field, a wrong type, or a parameter the
ladder does not implement (``n > 1``, ``tools``, ``logprobs``, ...) is a 400 with OpenAI's
error object naming the ``param``, never a 500 (docs/llm.md lists what is supported).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ray_ladder.serve.llm.protocol import GenerationRequest, Message

DEFAULT_MAX_TOKENS = 256
#: Parameters of the OpenAI API the ladder does not implement, with the values that ask
#: for nothing (client frameworks send some on every request: an empty ``tools`` list,
#: ``tool_choice: "none"``, a text ``response_format``): those are accepted, any other
#: value is a 400 naming the parameter.
UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "tools": (None, []), "tool_choice": (None, "none"), "functions": (None, []),
    "function_call": (None, "none"), "logprobs": (None, False), "top_logprobs": (None, 0),
    "logit_bias": (None, {}), "response_format": (None, {"type": "text"}),
    "parallel_tool_calls": (None,), "audio": (None,), "modalities": (None, ["text"]),
    "prediction": (None,), "echo": (None, False), "best_of": (None, 1), "suffix": (None, ""),
    "presence_penalty": (None, 0, 0.0), "frequency_penalty": (None, 0, 0.0),
    # vLLM's extension; its own serving benchmark sends 1.0 (no penalty) on every request.
    "repetition_penalty": (None, 1, 1.0),
}


class OpenAIError(Exception):
    """A request refused with OpenAI's error object.

    Example:
        >>> OpenAIError(400, "bad", param="n").body()["error"]["param"]
        'n'
    """

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """``{"error": {"message", "type", "param", "code"}}``."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


#: No coercion: ``"0.7"`` is not a number, ``true`` not an integer, ``"yes"`` not a
#: boolean (OpenAI answers each with a 400 naming the parameter); an integer is a number.
_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


class _Strict(BaseModel):
    model_config = _STRICT


class ContentPart(_Strict):
    """One part of a message's content (text only)."""

    type: Literal["text"] = Field(description="Only 'text' parts are supported.")
    text: str = Field(description="The text.")


class ChatMessage(_Strict):
    """One message of a chat request."""

    role: Literal["system", "user", "assistant", "developer", "tool"] = Field(
        description="Who wrote it.")
    content: str | list[ContentPart] = Field(description="Text, or a list of text parts.")
    name: str | None = Field(None, description="Optional author name (ignored).")

    def text(self) -> str:
        """The content as one string."""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class StreamOptions(_Strict):
    """``stream_options``."""

    include_usage: bool = Field(False, description="Send a last chunk with usage.")


class _Common(BaseModel):
    """Fields shared by both routes; unsupported OpenAI fields are accepted here only to
    be refused with their name (see :data:`UNSUPPORTED`)."""

    model_config = _STRICT

    model: str = Field(description="The ladder's model id (GET /v1/models).")
    stream: bool = Field(False, description="Server-sent events.")
    stream_options: StreamOptions | None = Field(None, description="Streaming options.")
    max_tokens: int | None = Field(None, ge=1, le=100_000, description="Tokens to generate.")
    temperature: float = Field(1.0, ge=0, le=2, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    n: int = Field(1, ge=1, description="Choices (only 1 is supported).")
    stop: str | list[str] | None = Field(None, description="Up to 4 stop sequences.")
    seed: int | None = Field(None, description="Sampling seed.")
    user: str | None = Field(None, description="End-user id (ignored).")
    metadata: dict[str, str] | None = Field(None, description="Ignored.")
    store: bool | None = Field(None, description="Ignored.")
    ignore_eos: bool = Field(False, description=(
        "vLLM's extension: generate max_tokens tokens, past the model's end of text. "
        "Passed to vLLM rungs (load generators send it); another rung may end sooner."))
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    logprobs: Any = None
    top_logprobs: Any = None
    logit_bias: Any = None
    response_format: Any = None
    parallel_tool_calls: Any = None
    audio: Any = None
    modalities: Any = None
    prediction: Any = None
    presence_penalty: Any = None
    frequency_penalty: Any = None
    repetition_penalty: Any = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError(f"at most 4 stop sequences, got {len(value)}")
        return value

    def stops(self) -> tuple[str, ...]:
        """Stop sequences as a tuple."""
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatCompletionRequest(_Common):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1, description="The conversation.")
    max_completion_tokens: int | None = Field(None, ge=1, le=100_000,
                                              description="Same as max_tokens.")


class CompletionRequest(_Common):
    """``POST /v1/completions``."""

    prompt: str | list[str] = Field(description="The prompt (one string).")
    echo: Any = None
    best_of: Any = None
    suffix: Any = None


def parse_request(kind: Literal["chat", "completion"], body: Any,
                  model_id: str) -> tuple[_Common, GenerationRequest]:
    """Validate one request body; return it and the :class:`GenerationRequest` it means.

    Raises:
        OpenAIError: 400 for a malformed or unsupported request, 404 for another model.
    """
    if not isinstance(body, dict):
        raise OpenAIError(400, f"the request body must be a JSON object, got "
                               f"{type(body).__name__}")
    model_cls = ChatCompletionRequest if kind == "chat" else CompletionRequest
    try:
        req = model_cls.model_validate(body)
    except ValidationError as err:
        first = err.errors()[0]
        param = ".".join(str(p) for p in first.get("loc", ())) or None
        hint = " (unknown field)" if first.get("type") == "extra_forbidden" else ""
        raise OpenAIError(400, f"{param}: {first.get('msg')}{hint}", param=param) from None
    for name, no_op in UNSUPPORTED.items():
        value = getattr(req, name, None)
        if not any(value == v and type(value) is type(v) for v in no_op):
            raise OpenAIError(400, f"{name} is not supported by this ladder", param=name,
                              code="unsupported_parameter")
    if req.n != 1:
        raise OpenAIError(400, "n must be 1: the ladder generates one choice",
                          param="n", code="unsupported_parameter")
    if req.model != model_id:
        raise OpenAIError(404, f"the model {req.model!r} does not exist; this ladder "
                               f"serves {model_id!r} (GET /v1/models)",
                          param="model", code="model_not_found")
    if req.stream_options is not None and not req.stream:
        raise OpenAIError(400, "stream_options is only allowed with stream: true",
                          param="stream_options")
    common = dict(temperature=req.temperature, top_p=req.top_p, seed=req.seed,
                  stop=req.stops(), ignore_eos=req.ignore_eos)
    if isinstance(req, ChatCompletionRequest):
        max_tokens = req.max_completion_tokens or req.max_tokens or DEFAULT_MAX_TOKENS
        gen = GenerationRequest(messages=tuple(Message(m.role, m.text())
                                               for m in req.messages),
                                max_tokens=max_tokens, **common)  # type: ignore[arg-type]
    else:
        assert isinstance(req, CompletionRequest)
        prompt = req.prompt
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise OpenAIError(400, "prompt must be one string (batches of prompts are "
                                       "not supported)", param="prompt",
                                  code="unsupported_parameter")
            prompt = prompt[0]
        gen = GenerationRequest(prompt=prompt, max_tokens=req.max_tokens or DEFAULT_MAX_TOKENS,
                                **common)  # type: ignore[arg-type]
    return req, gen


def wants_usage(req: _Common) -> bool:
    """Whether a streamed answer ends with a usage chunk."""
    return bool(req.stream and req.stream_options and req.stream_options.include_usage)
