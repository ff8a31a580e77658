"""A ladder Serve app: the GPU serving ladder with stand-in models (runs on a laptop).

Run it on a heterogeneous local cluster (one fake node per GPU rung):

    python examples/serve_app.py            # serves on http://127.0.0.1:8000
    curl -s -XPOST localhost:8000/ -d '{"prompt": "hello"}' -D- -o-
    curl -s localhost:8000/-/ladder | python -m json.tool

or on any Ray cluster from the Serve config next to this file:

    serve run examples/serve_config.yaml
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict

from ray_ladder import RungContext


class Prompt(BaseModel):
    """What these rungs take: ``{"prompt": "..."}`` (anything else is a 400)."""

    model_config = ConfigDict(extra="forbid")
    prompt: str = ""


class BigModel:
    """Stands in for a 70B model on H100/A100: slow-ish, best answers."""

    def __init__(self, rung: RungContext, latency_s: float = 0.02):
        self.rung = rung
        self.latency_s = latency_s

    input_model = Prompt  # the router answers 400 to a payload that does not match

    def __call__(self, payload: Prompt) -> dict:
        time.sleep(self.latency_s)  # the "GPU" at work
        prompt = payload.prompt
        return {"answer": f"[{self.rung.params.get('model')}] a thorough reply to {prompt!r}",
                "dtype": self.rung.params.get("dtype")}


class SmallModel:
    """Stands in for an 8B int4 model on L4."""

    def __init__(self, rung: RungContext):
        self.rung = rung

    input_model = Prompt

    async def __call__(self, payload: Prompt) -> dict:  # async rung classes work too
        prompt = payload.prompt
        return {"answer": f"[{self.rung.params.get('model')}] a short reply to {prompt!r}"}


class TinyModel:
    """Stands in for a distilled CPU model."""

    def __init__(self, rung: RungContext):
        self.rung = rung

    input_model = Prompt

    def __call__(self, payload: Prompt) -> dict:
        return {"answer": f"[{self.rung.params.get('model')}] ok"}


RUNGS = {"h100": BigModel, "a100": BigModel, "l4": SmallModel, "cpu": TinyModel}


def main() -> None:
    """Start a local cluster with one node per GPU rung and serve the ladder on it."""
    import sys
    from pathlib import Path

    import cloudpickle
    from ray import serve

    from ray_ladder import load_ladder
    from ray_ladder.serve import build_app
    from ray_ladder.testing import LocalCluster

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # run as a script
    ladder = load_ladder(Path(__file__).parent / "ladders" / "gpu-serving.yaml")
    with LocalCluster.from_ladder(ladder) as cluster:
        serve.start(http_options={"host": "127.0.0.1", "port": 8000},
                    proxy_location="HeadOnly")
        serve.run(build_app(ladder, RUNGS), name="gpu-serving")
        print("serving on http://127.0.0.1:8000/  (GET /-/ladder for its state)")
        print("nodes:", {n.type: n.node_id[:8] for n in cluster.nodes()})
        print("Ctrl-C to stop")
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            serve.shutdown()


if __name__ == "__main__":
    main()
