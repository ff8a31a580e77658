"""`ray-ladder autoscale` against an address where no cluster answers: exit 3 in seconds."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ray_ladder.cli.status_cmd import EXIT_NO_CLUSTER
from ray_ladder.testing import free_port

ROOT = Path(__file__).resolve().parents[2]
LADDER = ROOT / "examples" / "ladders" / "gpu-serving.yaml"


@pytest.mark.parametrize("args", [
    ["status"], ["status", "--json", "--ladder", "gpu-serving"],
    ["stop", "--ladder", "gpu-serving"], ["start", str(LADDER)],
], ids=["status", "status-json", "stop", "start"])
def test_no_cluster_at_the_address_exits_3_within_seconds(args: list[str]) -> None:
    # Before: `ray.init(address=...)` waited for the GCS forever (9 minutes and counting).
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ray_ladder.cli", "autoscale", *args,
                           "--address", address], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    took = time.monotonic() - started
    assert proc.returncode == EXIT_NO_CLUSTER == 3, proc.stderr
    assert f"nothing answers at {address}" in proc.stderr
    assert proc.stdout == ""
    assert took < 15, took


def test_start_checks_the_ladder_file_before_the_cluster(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nrungs: []\n")
    proc = subprocess.run([sys.executable, "-m", "ray_ladder.cli", "autoscale", "start",
                           str(bad), "--address", f"127.0.0.1:{free_port()}"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and f"invalid ladder in {bad}" in proc.stderr


def test_hook_states_reads_the_published_states_from_the_kv() -> None:
    from ray_ladder.autoscale.sources import STATE_PREFIX
    from ray_ladder.cli.autoscale_cmd import hook_states
    from ray_ladder.cluster.event_store import MemoryKv

    kv = MemoryKv()
    kv.put(STATE_PREFIX + "a", b'{"serving": "h100"}')
    kv.put(STATE_PREFIX + "ab", b'{"serving": "l4"}')
    assert hook_states(kv) == {"a": {"serving": "h100"}, "ab": {"serving": "l4"}}
    assert hook_states(kv, "a") == {"a": {"serving": "h100"}}
    assert hook_states(kv, "b") == {}
