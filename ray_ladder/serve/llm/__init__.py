"""The LLM ladder: OpenAI-compatible routes on the ladder app, the LLM rung protocol, and
models that run anywhere (see docs/llm.md).

``GenerationRequest`` and the request/response models are pure; rung classes and the
routes load on first use.
"""

from __future__ import annotations

from ray_ladder._lazy import lazy_getattr
from ray_ladder.serve.llm.protocol import GenerationRequest, Message, Tokens, count_tokens

_LAZY = {
    "CounterRung": "ray_ladder.serve.llm.models",
    "NGramRung": "ray_ladder.serve.llm.models",
    "NGramLM": "ray_ladder.serve.llm.ngram",
    "OpenAIBackendRung": "ray_ladder.serve.llm.backend",
    "VLLMRung": "ray_ladder.serve.llm.engine_rung",
}

__all__ = ["CounterRung", "GenerationRequest", "Message", "NGramLM", "NGramRung",
           "OpenAIBackendRung", "Tokens", "VLLMRung", "count_tokens"]

# OpenAIBackendRung names the llm extra itself (httpx); the rest needs Ray Serve.
__getattr__ = lazy_getattr("ray_ladder.serve.llm", _LAZY, globals(), extra="serve")
