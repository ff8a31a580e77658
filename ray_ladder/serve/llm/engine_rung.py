"""A rung whose replica runs its own vLLM engine on the rung's node: the engine lives and
dies with the node, as a GPU engine does (the ``vllm`` demo story's rungs)."""

from __future__ import annotations

from pathlib import Path

from ray_ladder.core.context import RungContext
from ray_ladder.serve.llm.backend import OpenAIBackendRung


class VLLMRung(OpenAIBackendRung):
    """Starts a vLLM OpenAI server beside the replica (its child: SIGKILLing the node takes
    it too, and it ends with the replica) and streams from it as
    :class:`~ray_ladder.serve.llm.OpenAIBackendRung` does: engine tokens, continuations in
    this model's chat template, from token ids where the tokenizer is shared.

    ``params``: ``model_path`` (the model's folder on the node) or ``tiny_model`` (a
    recipe of :mod:`ray_ladder.engines.tiny`, made on the node if it is not cached),
    ``model`` (the served name; default the rung's), ``ready_timeout_s`` (default 300),
    ``load_nice`` (the niceness the engine loads at, 0 once it answers: on one machine
    standing for several nodes, a loading engine does not starve the serving ones;
    default 0), and ``OpenAIBackendRung``'s ``timeout_s``, ``health_timeout_s``,
    ``tokenizer``.

    Example:
        >>> # rungs: - {name: h100, resources: {ladder/h100: 1},
        >>> #           params: {tiny_model: tiny-chatml, model: tiny-chatml}}
        >>> build_app(ladder, {"h100": VLLMRung})  # doctest: +SKIP
    """

    def __init__(self, rung: RungContext) -> None:
        from ray_ladder.engines.server import VLLMServer
        from ray_ladder.engines.tiny import model_path

        params = rung.params
        if not params.get("model_path") and not params.get("tiny_model"):
            raise ValueError(f"rung {rung.name}: params.model_path or params.tiny_model is "
                             "required (the model this rung's engine serves)")
        folder = Path(str(params["model_path"])) if params.get("model_path") \
            else model_path(str(params["tiny_model"]))
        name = str(params.get("model") or rung.name)
        self.server = VLLMServer(folder, name, die_with_parent=True,
                                 load_nice=int(params.get("load_nice", 0))).start()
        try:
            self.server.wait_ready(float(params.get("ready_timeout_s", 300)))
        except BaseException:
            self.server.kill()
            raise
        super().__init__(rung, base_url=self.server.base_url, model=name)

    def __del__(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            server.kill()
