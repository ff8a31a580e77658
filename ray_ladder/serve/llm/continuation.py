"""A moved stream's prompt on an engine that tokenizes (pure: no Ray, no I/O).

Both ways an engine runs on a rung continue a stream the same way: an external vLLM
server (``POST /tokenize``, :class:`~ray_ladder.serve.llm.backend.OpenAIBackendRung`) and
Ray Serve LLM's ``LLMServer`` in the rung's deployment (its ``tokenize`` method,
:mod:`~ray_ladder.serve.llm.openai_server`). The conversation is rendered with the
engine's own chat template; the text already sent follows it as the engine's own token
ids where its tokenizer made them all (a word cut in two re-tokenizes otherwise), else as
text that continues the assistant's message. The completion of those ids is the rest.
"""

from __future__ import annotations

from typing import Any

from ray_ladder.serve.llm.protocol import GenerationRequest

#: What a vLLM engine is asked for on every stream: its token ids and a running usage
#: with each chunk, so that tokens are counted as the engine counts them.
VLLM_STREAM: dict[str, Any] = {
    "return_token_ids": True,
    "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def stream_body(request: GenerationRequest, model: str, vllm: bool) -> dict[str, Any]:
    """The sampling fields of a streamed OpenAI request for ``request`` (``vllm``: an
    engine of vLLM's, asked for its token counts and given ``ignore_eos``).

    Example:
        >>> stream_body(GenerationRequest(prompt="x", max_tokens=3), "m", False)["max_tokens"]
        3
    """
    body: dict[str, Any] = {"model": model, "stream": True, "max_tokens": request.max_tokens,
                            "temperature": request.temperature, "top_p": request.top_p}
    if request.seed is not None:
        body["seed"] = request.seed
    if request.stop:
        body["stop"] = list(request.stop)
    if vllm:
        body.update(VLLM_STREAM)
        if request.ignore_eos:
            body["ignore_eos"] = True
    return body


def same_tokenizer(request: GenerationRequest, tokenizer: str | None) -> bool:
    """Whether the text already sent is in ``tokenizer``'s own token ids."""
    return bool(request.continuation_ids) and request.tokenizer is not None \
        and request.tokenizer == tokenizer


def tokenize_body(request: GenerationRequest, same: bool
                  ) -> tuple[dict[str, Any], tuple[int, ...]]:
    """What to tokenize for a moved stream's prompt, and the ids that follow its tokens.

    Example:
        >>> req = GenerationRequest(prompt="Once", continuation=" upon",
        ...                         continuation_ids=(7, 8), tokenizer="t")
        >>> tokenize_body(req, same=True)
        ({'prompt': 'Once'}, (7, 8))
        >>> tokenize_body(req, same=False)
        ({'prompt': 'Once upon'}, ())
    """
    if request.prompt is not None:
        if same:
            return {"prompt": request.prompt}, request.continuation_ids
        return {"prompt": request.prompt + request.continuation}, ()
    messages = [{"role": m.role, "content": m.content} for m in request.messages]
    if same:
        return {"messages": messages, "add_generation_prompt": True}, \
            request.continuation_ids
    return {"messages": [*messages, {"role": "assistant", "content": request.continuation}],
            "add_generation_prompt": False, "continue_final_message": True}, ()


def completion_of(body: dict[str, Any], prompt: list[int],
                  max_model_len: int | None) -> dict[str, Any] | None:
    """The streamed completion request of ``prompt`` (token ids) from a chat or
    completion ``body``: its budget cut to what the context has room for; ``None`` when
    the text already fills the context (the stream ends ``length``, as the engine ends
    an answer that fills it).

    Example:
        >>> completion_of({"messages": [], "max_tokens": 50}, [1, 2, 3], 10)
        {'max_tokens': 7, 'prompt': [1, 2, 3]}
        >>> completion_of({"max_tokens": 5}, [1, 2, 3], 3) is None
        True
    """
    rest = {k: v for k, v in body.items()
            if k not in ("messages", "continue_final_message", "add_generation_prompt")}
    room = None if max_model_len is None else max_model_len - len(prompt)
    if room is not None and room <= 0:
        return None
    if room is not None:
        rest["max_tokens"] = min(int(rest["max_tokens"]), room)
    return {**rest, "prompt": prompt}
