"""The served model's own tokenizer and chat template, in the rung's replica.

For an ``LLMServer`` rung whose engine does not tokenize (Ray 2.60's ``LLMServer.tokenize``
looks for a vLLM attribute that vLLM 0.32 renamed: "This model does not support the
'tokenization' task"), a moved stream's prompt is tokenized here the way vLLM's
``/tokenize`` does it: a prompt with the tokenizer's special tokens, a conversation
rendered by the model's chat template then tokenized without them.
"""

from __future__ import annotations

import asyncio
from typing import Any


class ModelTokenizer:
    """A model's Hugging Face tokenizer (``transformers``, which every engine brings).

    Args:
        source: The model's folder or hub id (``LLMConfig.model_loading_config``).
    """

    def __init__(self, source: str) -> None:
        from transformers import AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(source)

    def ids(self, body: dict[str, Any]) -> list[int]:
        """The token ids of a tokenize request's ``body`` (``prompt``, or ``messages``
        with ``add_generation_prompt`` / ``continue_final_message``)."""
        tok = self._tokenizer
        if "messages" not in body:
            return list(tok(body["prompt"])["input_ids"])
        text = tok.apply_chat_template(
            body["messages"], tokenize=False,
            add_generation_prompt=bool(body.get("add_generation_prompt", True)),
            continue_final_message=bool(body.get("continue_final_message", False)))
        return list(tok(text, add_special_tokens=False)["input_ids"])


async def served_model(server: Any) -> tuple[ModelTokenizer, int | None] | None:
    """The tokenizer and context length of the model ``server`` serves, from its
    ``llm_config()`` (Ray Serve LLM's ``LLMServer``); ``None`` for another server."""
    config_of = getattr(server, "llm_config", None)
    if not callable(config_of):
        return None
    config = config_of()
    if asyncio.iscoroutine(config):
        config = await config
    loading = getattr(config, "model_loading_config", None)
    source = getattr(loading, "model_source", None) or getattr(loading, "model_id", None)
    if not isinstance(source, str):
        return None
    context = (getattr(config, "engine_kwargs", None) or {}).get("max_model_len")
    tokenizer = await asyncio.to_thread(ModelTokenizer, source)
    return tokenizer, context if isinstance(context, int) else None
