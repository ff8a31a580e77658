"""Real engines for a test module: the tiny models made here, one vLLM server each,
started together and stopped with the module (docs/testing.md, "Real engines")."""

from __future__ import annotations

import importlib.util
import os

import pytest

from ray_ladder.engines.server import VLLMServer
from ray_ladder.engines.tiny import model_path

#: How long a vLLM server may take to answer: 43-70 s alone on 2 cores, more beside the
#: suite's other worker.
READY_S = 420.0


def engines_or_skip(models: dict[str, str], also: tuple[str, ...] = ()
                    ) -> dict[str, VLLMServer]:
    """``{key: recipe}`` -> a ready vLLM server per key (``also``: recipes to make, for
    engines the cluster starts). Without vLLM installed the module skips, except under CI
    (``CI`` set), where ``make test`` installs it: there it fails."""
    if importlib.util.find_spec("vllm") is None:
        message = "vLLM is not installed (make engine, or python -m ray_ladder.engines.install)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    for recipe in also:
        model_path(recipe)
    servers = {key: VLLMServer(model_path(recipe), recipe) for key, recipe in models.items()}
    try:
        for server in servers.values():
            server.start()
        for server in servers.values():
            server.wait_ready(READY_S)
    except BaseException:
        for server in servers.values():
            server.kill()
        raise
    return servers
