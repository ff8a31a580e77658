"""Starting again what Ray gave up on: the processes a failed try left are stopped (no Ray)."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from ray_ladder.cluster.local_processes import ForkWatch, start_with_retries
from ray_ladder.testing import wait_until

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_failed_try_s_processes_are_stopped_and_the_next_try_answers():
    left: list[subprocess.Popen] = []

    def start() -> str:
        left.append(subprocess.Popen(SLEEPER))
        if len(left) == 1:
            raise RuntimeError("the raylet did not register in time")
        return "started"

    try:
        assert start_with_retries(start, "a node") == "started"
        # The first try's process was killed (SIGKILL lands asynchronously: a loaded
        # machine shows the process running for a moment after the kill).
        wait_until(lambda: _gone(left[0].pid), 10, 0.05, "the first try's process gone")
        assert left[1].poll() is None         # the successful try's process runs on
    finally:
        for proc in left:
            proc.kill()
            proc.wait()


def test_processes_started_before_the_try_are_left_alone_and_the_last_error_is_raised():
    earlier = subprocess.Popen(SLEEPER)
    calls: list[int] = []

    def never() -> None:
        calls.append(1)
        raise TimeoutError(f"try {len(calls)}")

    try:
        with pytest.raises(TimeoutError, match="try 3"):
            start_with_retries(never, "a node", attempts=3)
        assert len(calls) == 3
        assert earlier.poll() is None
    finally:
        earlier.kill()
        earlier.wait()


def test_what_an_earlier_process_forks_during_the_try_is_left_alone():
    # A vLLM server started before the cluster forks its engine core while the cluster
    # starts: the retry once killed that grandchild (and the server with it).
    forker = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "sys.stdin.readline()\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "time.sleep(120)\n")], stdin=subprocess.PIPE)
    me = psutil.Process()
    calls: list[int] = []

    def fails_once() -> str:
        calls.append(1)
        if len(calls) == 1:
            assert forker.stdin is not None
            forker.stdin.write(b"go\n")
            forker.stdin.flush()
            wait_until(lambda: len(psutil.Process(forker.pid).children()) == 1, 20, 0.05,
                       "the earlier process forked its child")
            raise RuntimeError("the raylet did not register in time")
        return "started"

    try:
        assert start_with_retries(fails_once, "a node") == "started"
        grandchild = psutil.Process(forker.pid).children()[0]
        assert grandchild.status() != psutil.STATUS_ZOMBIE
        assert forker.poll() is None
        assert forker.pid in {p.pid for p in me.children()}
    finally:
        for proc in psutil.Process(forker.pid).children():
            proc.kill()
        forker.kill()
        forker.wait()


def test_an_argument_error_is_not_tried_again():
    calls: list[int] = []

    def bad() -> None:
        calls.append(1)
        raise ValueError("num_cpus must be >= 0")

    with pytest.raises(ValueError, match="num_cpus"):
        start_with_retries(bad, "a node")
    assert calls == [1]


def _stuck_before_exec() -> None:
    time.sleep(120)  # a preexec_fn that never returns: the fork never reaches its exec


def test_a_fork_stuck_before_its_exec_is_killed_and_the_popen_returns():
    started = time.monotonic()
    with ForkWatch(stuck_s=1.0, every_s=0.2) as watch:
        proc = subprocess.Popen(SLEEPER, preexec_fn=_stuck_before_exec)  # noqa: PLW1509
        proc.wait(timeout=30)  # killed before its exec: it never ran the sleeper
    assert watch.killed == 1 and time.monotonic() - started < 30


def test_children_that_reached_their_exec_are_left_alone():
    with ForkWatch(stuck_s=0.2, every_s=0.1) as watch:
        proc = subprocess.Popen(SLEEPER)  # forked inside the watch, and exec'd
        try:
            wait_until(lambda: psutil.Process(proc.pid).cmdline() == SLEEPER, 10, 0.05,
                       "the child's exec")
            time.sleep(1.0)  # a window the watch runs over: nothing to wait for
            assert watch.killed == 0 and proc.poll() is None
        finally:
            proc.kill()
            proc.wait()
