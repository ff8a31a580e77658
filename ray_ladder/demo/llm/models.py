"""The LLM story's models: one :class:`~ray_ladder.serve.llm.NGramRung` per compute rung,
measured once in the driver (next-token accuracy on held-out docstrings).

The replicas train the same models from the same corpus and the rung's ``params`` when
they start (deterministic), so what is measured here is what each rung serves.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from ray_ladder.core.context import RungContext
from ray_ladder.core.spec import Ladder


@dataclass(frozen=True)
class RungModel:
    """A rung's model and how good it is.

    Attributes:
        rung: The rung.
        model: Its ``params.model`` (the ``model`` field of its chunks).
        order: n-gram order.
        train_fraction: Share of the training docstrings it learns from.
        tokens_per_s: Its streaming pace.
        quality: Next-token accuracy on the held-out docstrings (0..1).
        train_s: Seconds the training took here.
        engine: ``vllm`` for a rung whose replica runs a vLLM engine (``params.tiny_model``
            or ``model_path``; its quality is the rung's declared one), else empty.
    """

    rung: str
    model: str
    order: int
    train_fraction: float
    tokens_per_s: float
    quality: float
    train_s: float
    engine: str = ""

    @property
    def description(self) -> str:
        """``4-gram, 100 % of the text`` (or ``vLLM``)."""
        if self.engine:
            return "vLLM, a tiny Llama made here"
        return f"{self.order}-gram, {self.train_fraction * 100:.0f} % of the text"


def _is_engine(params: Mapping[str, object]) -> bool:
    return bool(params.get("tiny_model") or params.get("model_path"))


def measure_models(ladder: Ladder) -> dict[str, RungModel]:
    """Train each compute rung's model as its replica will and score it held-out.

    Example:
        >>> models = measure_models(load_ladder(ladder_path("llm")))  # doctest: +SKIP
        >>> models["h100"].quality > models["cpu"].quality  # doctest: +SKIP
        True
    """
    from ray_ladder.serve.llm.models import NGramRung

    out: dict[str, RungModel] = {}
    for rung in ladder.rungs:
        if not rung.is_compute:
            continue
        start = time.perf_counter()
        if _is_engine(rung.params):  # made (or found) now, so replicas find it cached
            from ray_ladder.engines.tiny import model_path

            if rung.params.get("tiny_model"):
                model_path(str(rung.params["tiny_model"]))
            out[rung.name] = RungModel(rung.name, str(rung.params.get("model") or rung.name),
                                       0, 0.0, 0.0, rung.quality,
                                       time.perf_counter() - start, engine="vllm")
            continue
        lm = NGramRung(RungContext.of(ladder, rung.name))
        took = time.perf_counter() - start
        out[rung.name] = RungModel(
            rung.name, str(rung.params.get("model") or rung.name), lm.order,
            float(rung.params.get("train_fraction", 1.0)), lm.tokens_per_s, lm.quality(),
            took)
    return out


def rung_classes(models: Mapping[str, RungModel]) -> dict[str, type]:
    """``build_app``'s ``rungs`` argument: :class:`NGramRung` on every compute rung, or
    :class:`~ray_ladder.serve.llm.VLLMRung` where the rung runs an engine."""
    from ray_ladder.serve.llm.engine_rung import VLLMRung
    from ray_ladder.serve.llm.models import NGramRung

    return {name: VLLMRung if m.engine else NGramRung for name, m in models.items()}
