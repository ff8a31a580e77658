"""The engine helpers without an engine: the guard that takes a server's whole process
group with it when its starter dies, and the tiny models' recipes (no vLLM, no Ray)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap

import psutil
import pytest

from ray_ladder.engines.install import SKIPPED, wanted
from ray_ladder.engines.tiny import RECIPES, model_path
from ray_ladder.testing import wait_until


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("guard_killed_too", [False, True])
def test_the_guard_kills_the_whole_group_when_its_starter_dies(tmp_path, guard_killed_too):
    # A starter (the rung's replica) runs a guarded command that forks a child of its own
    # (the engine core); the starter is SIGKILLed (and, as Ray does to a dead worker's
    # children, the guard too): every process of the group goes.
    pids = tmp_path / "pids"
    starter = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, sys, time
        cmd = [sys.executable, "-c", "import subprocess, sys, time; "
               "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
               "open({str(pids)!r}, 'w').write(str(c.pid)); time.sleep(120)"]
        g = subprocess.Popen([sys.executable, "-m", "ray_ladder.engines.guard", *cmd],
                             start_new_session=True)
        time.sleep(120)
        """)])
    try:
        wait_until(lambda: pids.exists() and pids.read_text(), 30, 0.05, "the group started")
        child = int(pids.read_text())
        group = os.getpgid(child)
        assert group != os.getpgid(0)
        if guard_killed_too:
            guard = psutil.Process(starter.pid).children()[0]
            guard.kill()
        starter.kill()
        starter.wait()
        wait_until(lambda: _gone(child), 30, 0.05, "the engine's own child gone too")
    finally:
        starter.kill()


def test_the_engine_s_requirements_leave_out_the_torch_family():
    reqs = wanted(["torch==2.13.0+cpu", "torchvision", "numpy",
                   'six; python_version > "99"', "ray[llm]; extra == 'llm'"], SKIPPED)
    assert reqs == ["numpy"]


def test_an_unknown_recipe_names_the_known_ones():
    with pytest.raises(KeyError, match="tiny-chatml"):
        model_path("no-such-model")
    chatml, inst = RECIPES["tiny-chatml"], RECIPES["tiny-inst"]
    assert chatml.vocab_size != inst.vocab_size and chatml.chat_template != inst.chat_template
    # vLLM's CPU attention wants a head size of 32 or 64.
    assert {r.hidden_size // r.heads for r in RECIPES.values()} <= {32, 64}


def test_an_llm_server_s_model_tokenizes_a_continuation_in_its_own_template():
    # LLMServer.tokenize fails on this Ray/vLLM pair ("does not support the 'tokenization'
    # task"): its rung tokenizes with the served model's own tokenizer in the replica.
    pytest.importorskip("transformers", reason="the real engine (make engine)")
    from types import SimpleNamespace

    from ray_ladder.serve.llm.model_tokens import served_model

    class Server:  # what an LLMServer's llm_config() says
        async def llm_config(self):
            return SimpleNamespace(
                model_loading_config=SimpleNamespace(model_id="tiny-chatml",
                                                     model_source=str(model_path("tiny-chatml"))),
                engine_kwargs={"max_model_len": 1024})

    tokenizer, context = asyncio.run(served_model(Server()))
    assert context == 1024
    turn = [{"role": "user", "content": "hi"}]
    fresh = tokenizer.ids({"messages": turn, "add_generation_prompt": True})
    tok = tokenizer._tokenizer
    assert tok.decode(fresh).endswith("<|im_start|>assistant\n")  # ChatML's own turn
    cont = tokenizer.ids({"messages": [*turn, {"role": "assistant", "content": "one tw"}],
                          "add_generation_prompt": False, "continue_final_message": True})
    assert tok.decode(cont).endswith("<|im_start|>assistant\none tw")  # left open
    assert asyncio.run(served_model(object())) is None  # not an LLMServer


def test_an_engine_loads_niced_and_serves_at_full_priority(tmp_path):
    # The vllm demo story's nodes share two cores: a new engine loading beside the
    # traffic starved the serving engines; it loads at load_nice, then goes back to 0.
    from ray_ladder.engines.server import VLLMServer

    class Sleeper(VLLMServer):
        def command(self) -> list[str]:
            return [sys.executable, "-c", "import time; time.sleep(60)"]

    server = Sleeper(tmp_path, "m", log=tmp_path / "log", load_nice=7).start()
    try:
        proc = psutil.Process(server.process.pid)
        assert proc.nice() == 7
        server._unnice()  # what wait_ready does once the server answers
        assert proc.nice() == 0 or os.geteuid() != 0  # raising it back needs the right
    finally:
        server.kill()
