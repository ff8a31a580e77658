"""@ladder_task when the ladder's own orchestrator dies, and when its driver exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import ray

from ray_ladder import Ladder, ladder_task, last_rung
from ray_ladder.task.orchestrator import recovery
from ray_ladder.task.orchestrator.registry import get_orchestrator
from ray_ladder.testing import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

LADDER = Ladder.from_dict({
    "name": "faults",
    "policy": {"probe_interval_s": 0.2, "pending_timeout_s": 20},
    "rungs": [
        {"name": "a100", "resources": {"ladder/a100": 1}, "quality": 1.0},
        {"name": "cpu", "num_cpus": 1, "label_selector": {"ladder.node-type": "head"},
         "quality": 0.5},
    ],
})
SLOW = 120


@ladder_task(LADDER)
def nap(i, seconds=0.0, *, rung):
    """Sleep, then say who ran it."""
    time.sleep(seconds)
    return i, rung.name


@pytest.fixture(scope="module")
def cluster(local_cluster):
    c = local_cluster({"a100": {"num_cpus": 8, "resources": {"ladder/a100": 8}}})
    assert ray.get(nap.remote(0)) == (0, "a100")
    return c


def orchestrator_pid() -> int:
    return ray.get(get_orchestrator().__ray_call__.remote(lambda self: os.getpid()),
                   timeout=SLOW)


def test_sigkill_of_the_orchestrator_with_40_calls_in_flight_loses_none(cluster):
    pid = orchestrator_pid()
    refs = [nap.remote(i, 1.5) for i in range(40)]
    status = get_orchestrator().status
    wait_until(lambda: ray.get(status.remote())["stats"].get("calls", 0) >= 41,
               SLOW, 0.05, "40 calls in flight")
    os.kill(pid, signal.SIGKILL)  # the ladder's own process, not a rung's
    killed_at = time.monotonic()
    answers = ray.get(refs, timeout=SLOW)
    assert sorted(a[0] for a in answers) == list(range(40))  # 0 lost, each answered once
    assert {a[1] for a in answers} <= {"a100", "cpu"}
    # A fresh orchestrator (Ray restarted the same named actor) took the calls.
    wait_until(lambda: orchestrator_pid() != pid, SLOW, 0.1, "a new orchestrator process")
    assert ray.get(status.remote())["stats"].get("recovered_tasks", 0) >= 1
    # New calls of this driver work, including last_rung on them.
    ref = nap.remote(99)
    assert ray.get(ref, timeout=SLOW) == (99, "a100")
    assert last_rung(ref) == "a100"
    assert time.monotonic() - killed_at < SLOW


def test_new_option_set_after_a_restart_registers_again(cluster):
    os.kill(orchestrator_pid(), signal.SIGKILL)
    assert ray.get(nap.options(max_attempts=2).remote(5), timeout=SLOW) == (5, "a100")
    assert ray.get(nap.remote(6), timeout=SLOW) == (6, "a100")


DRIVER = textwrap.dedent("""
    import sys, time
    import ray
    from ray_ladder import Ladder, ladder_task
    ray.init(address=sys.argv[1])
    ladder = Ladder.from_dict({{"name": "leaver", "policy": {{"pending_timeout_s": 600}},
        "rungs": [{{"name": "tpu", "resources": {{"ladder/tpu": 1}}}},
                  {{"name": "a100", "resources": {{"ladder/a100": 1}}}}]}})

    @ladder_task(ladder)
    def hold(seconds, *, rung):
        time.sleep(seconds)
        return rung.name

    assert ray.get(hold.remote(0)) == "a100"
    refs = [hold.remote(300) for _ in range(4)]  # still running when the driver leaves
    ray.wait(refs, timeout=2)
    print(ray.get_runtime_context().get_job_id(), flush=True)
    {ending}
""")


@pytest.mark.parametrize("ending", ["sys.exit(0)", "import os, signal; "
                                    "os.kill(os.getpid(), signal.SIGKILL)"],
                         ids=["exit", "sigkill"])
def test_a_driver_that_exits_leaves_nothing_behind(cluster, tmp_path: Path, ending):
    from _leftovers import leftovers

    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(ending=ending))
    before = set(leftovers(own_jobs=None)["orchestrators"])
    proc = subprocess.Popen([sys.executable, str(script), cluster.address],
                            stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=SLOW)
    job_id = out.strip().splitlines()[-1]
    name = f"ray-ladder-orchestrator-{job_id}"
    assert name not in before
    mine = {ray.get_runtime_context().get_job_id()}

    def clean():
        recovery.collect_dead_jobs()  # what the next driver's first call does
        left = leftovers(own_jobs=mine)
        return not any(left.values()), left

    wait_until(lambda: clean()[0], SLOW, 0.2, f"nothing left by the driver: {clean()[1]}")
    # The cluster still runs this driver's calls.
    assert ray.get(nap.remote(1), timeout=SLOW) == (1, "a100")
