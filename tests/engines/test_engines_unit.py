"""The engine helpers without an engine: the guard that takes a server's whole process
group with it when its starter dies, and the tiny models' recipes (no vLLM, no Ray)."""

from __future__ import annotations

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
