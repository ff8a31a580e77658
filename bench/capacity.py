"""Capacity view costs and reaction times on a real LocalCluster.

Prints JSON: refresh_us (one GCS round trip; no autoscaler hook runs for the ladder),
refresh_us_hook_off (the same with follow_hook=False), refresh_us_following_hook (a hook's
roles entry is published and the hook steps as often as the view refreshes: one more KV
read per refresh), refresh_us_following_hook_1s (the hook steps every second, the view
refreshes every 50 ms: the entry is re-read once a second), cached_read_us (one cached read),
kill_to_unobtainable_s (SIGKILL of the rung's only node until the view says
unobtainable), add_to_obtainable_s (add_node call until the view says obtainable),
and the goals (cached read < 5 us, kill < 1.5 s, re-add < 2.5 s).
"""

from __future__ import annotations

import json
import statistics
import time

from ray_ladder import Ladder
from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.testing import LocalCluster, wait_until

LADDER = Ladder.from_dict({
    "name": "bench-capacity",
    "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1}},
        {"name": "a100", "resources": {"ladder/a100": 1}},
        {"name": "cpu", "num_cpus": 1, "quality": 0.5},
        {"name": "shed", "kind": "shed", "quality": 0},
    ],
})
POLL_S = 0.01  # how often the bench looks; the view itself refreshes every REFRESH_S
REFRESH_S = 0.05


def _time_us(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def _refresh_following_hook_us(interval_s: float) -> float:
    """Refresh cost while a hook's roles entry exists for the ladder (published by hand)."""
    from ray_ladder.autoscale.sources import save_roles
    from ray_ladder.cluster.roles import KV_NAMESPACE, ROLES_PREFIX

    save_roles(LADDER.name, {"ladder": LADDER.name, "version": 1, "time": time.time() + 3600,
                             "interval_s": interval_s, "serving": "h100",
                             "rungs": {"h100": {"role": "serving", "status": "up"},
                                       "a100": {"role": "released", "status": "up"}}})
    try:
        view = CapacityView(LADDER, refresh_interval_s=REFRESH_S)
        assert not view.refresh().obtainable["a100"]  # the entry is followed
        return statistics.median(_time_us(view.refresh, 50) for _ in range(5))
    finally:
        from ray.experimental.internal_kv import _internal_kv_del

        _internal_kv_del(ROLES_PREFIX + LADDER.name, namespace=KV_NAMESPACE)


def main(rounds: int = 3) -> dict[str, object]:
    from _machine import MachineProbe

    probe = MachineProbe()
    with LocalCluster({"h100": {"resources": {"ladder/h100": 1}},
                       "a100": {"resources": {"ladder/a100": 1}}}) as cluster:
        view = CapacityView(LADDER, refresh_interval_s=REFRESH_S)
        view.refresh()
        refresh_us = statistics.median(_time_us(view.refresh, 50) for _ in range(5))
        off = CapacityView(LADDER, refresh_interval_s=REFRESH_S, follow_hook=False)
        refresh_off_us = statistics.median(_time_us(off.refresh, 50) for _ in range(5))
        refresh_hook_us = _refresh_following_hook_us(interval_s=0.0)
        refresh_hook_1s_us = _refresh_following_hook_us(interval_s=1.0)
        cached = CapacityView(LADDER, refresh_interval_s=3600)
        cached.refresh()
        cached_read_us = statistics.median(
            _time_us(cached.obtainable, 100_000) for _ in range(5))

        kills, adds = [], []
        for _ in range(rounds):
            node = cluster.nodes("h100")[0]
            t0 = time.monotonic()
            cluster.remove_node(node)
            wait_until(lambda: not view.obtainable()["h100"], timeout_s=30, interval_s=POLL_S)
            kills.append(time.monotonic() - t0)
            t0 = time.monotonic()
            cluster.add_node("h100", wait=False)
            wait_until(lambda: view.obtainable()["h100"], timeout_s=60, interval_s=POLL_S)
            adds.append(time.monotonic() - t0)
    out = {
        "refresh_us": round(refresh_us, 1),
        "refresh_us_hook_off": round(refresh_off_us, 1),
        "refresh_us_following_hook": round(refresh_hook_us, 1),
        "refresh_us_following_hook_1s": round(refresh_hook_1s_us, 1),
        "cached_read_us": round(cached_read_us, 3),
        "kill_to_unobtainable_s": round(statistics.median(kills), 3),
        "add_to_obtainable_s": round(statistics.median(adds), 3),
        "kill_samples_s": [round(x, 3) for x in kills],
        "add_samples_s": [round(x, 3) for x in adds],
        "view_refresh_interval_s": REFRESH_S,
        "goals": {"cached_read_us": 5, "kill_to_unobtainable_s": 1.5, "add_to_obtainable_s": 2.5},
    }
    out["met"] = {
        "cached_read_us": out["cached_read_us"] < 5,
        "kill_to_unobtainable_s": out["kill_to_unobtainable_s"] < 1.5,
        "add_to_obtainable_s": out["add_to_obtainable_s"] < 2.5,
    }
    out["machine"] = probe.report()
    return out


if __name__ == "__main__":
    from _json_out import json_stdout

    out = json_stdout()
    print(json.dumps(main()), file=out, flush=True)
