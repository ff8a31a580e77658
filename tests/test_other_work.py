"""OtherWork counts the CPU time taken outside the test's process tree, not inside it."""

from __future__ import annotations

import subprocess
import sys

import psutil

from ray_ladder.testing import wait_until
from tests._other_work import OtherWork

#: A loop that stops after one second of its own CPU time, however busy the machine is.
SPIN = "import time\nwhile time.process_time() < 1.0: pass\n"


def test_a_childs_cpu_time_is_this_trees_and_an_outside_process_is_other_work() -> None:
    with OtherWork() as own:
        subprocess.run([sys.executable, "-c", SPIN], check=True)
    assert own.own_s >= 1.0, str(own)
    # A process whose parent exits at once is no descendant of this one (init adopts it).
    launcher = ("import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', "
                f"{SPIN!r}], start_new_session=True).pid)")
    with OtherWork() as other:
        pid = int(subprocess.run([sys.executable, "-c", launcher], check=True,
                                 capture_output=True, text=True).stdout)
        wait_until(lambda: not psutil.pid_exists(pid)
                   or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE,
                   60, 0.05, "the outside loop's second of CPU")
    assert other.other_s >= 0.9, str(other)
