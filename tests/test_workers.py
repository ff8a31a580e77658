"""`make test`'s worker count: two only where two cores are there, mostly idle, and no
other Ray cluster runs beside the suite."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.workers import MAX_BUSY_PERCENT, ray_daemons, workers


@pytest.mark.parametrize(("cores", "busy", "other_ray", "expected"), [
    (2, 5.0, False, 2), (16, MAX_BUSY_PERCENT, False, 2),  # quiet: two workers
    (2, MAX_BUSY_PERCENT + 1, False, 0), (2, 100.0, False, 0),  # the CPUs are held
    (16, 0.0, True, 0),  # another Ray cluster runs here, idle or not
    (1, 0.0, False, 0), (None, 0.0, False, 0),  # one core, or unknown
])
def test_two_workers_only_on_two_quiet_cores_without_another_ray(cores, busy, other_ray,
                                                                 expected):
    assert workers(cores, busy, other_ray) == expected


def test_a_process_named_like_a_ray_daemon_counts_as_another_ray_cluster(tmp_path):
    fake = tmp_path / "raylet"  # the process name is the executable's file name
    fake.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    fake.chmod(0o755)
    proc = subprocess.Popen([str(fake)])
    try:
        from ray_ladder.testing import wait_until

        wait_until(lambda: proc.pid in ray_daemons(), 10, 0.05, "the fake raylet seen")
    finally:
        proc.kill()
        proc.wait()
