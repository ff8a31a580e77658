"""The hook against Ray's real autoscaler and a fake cloud that runs out of h100 nodes."""

from __future__ import annotations

import json

import pytest

from ray_ladder import Ladder
from ray_ladder.testing import wait_until
from tests.autoscale._fake import Consumer, alive_node_types, fake_cluster
from tests.autoscale._fake import hook_state as _state

pytestmark = pytest.mark.ray

LADDER = Ladder.from_yaml("""
name: fake-as
policy: {promotion_hysteresis: 2, probe_interval_s: 0.5}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9}
  - {name: cpu, num_cpus: 0, resources: {ladder/cpu: 1}, quality: 0.5}
""")
OPTIONS = {"retry_initial_s": 2.0, "retry_max_s": 4.0, "provision_timeout_s": 60.0,
           "drain_s": 1.0, "interval_s": 0.5}


@pytest.fixture(scope="module")
def cluster():
    with fake_cluster(("h100", "a100"), "h100 unavailable") as c:
        yield c


@pytest.fixture(scope="module")
def hook(cluster, tmp_path_factory):
    """The hook, started the way users do: `ray-ladder autoscale start`."""
    from click.testing import CliRunner

    from ray_ladder.autoscale import get_hook
    from ray_ladder.cli import main

    path = tmp_path_factory.mktemp("ladder") / "ladder.yaml"
    path.write_text(LADDER.to_yaml())
    args = ["autoscale", "start", str(path), "--address", cluster.address]
    for key, value in OPTIONS.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    return get_hook("fake-as")


def test_stockout_falls_back_then_climbs_back_without_losing_work(cluster, hook):
    import ray

    from ray_ladder.autoscale import HookWatcher

    @ray.remote(num_cpus=0)
    class Subscriber:  # what a Serve ladder or task pool plugs in
        def __init__(self) -> None:
            self.roles: list[dict] = []

        def on_autoscale(self, state: dict) -> None:
            self.roles.append({n: r["role"] for n, r in state["rungs"].items()})

        def seen(self) -> list[dict]:
            return self.roles

    sub = Subscriber.remote()
    ray.get(hook.subscribe.remote(sub), timeout=60)
    watched: list[str | None] = []
    watcher = HookWatcher("fake-as", lambda s: watched.append(s["serving"])).start()
    try:
        _climb(cluster, hook, sub, watcher, watched)
    finally:
        watcher.stop()


def _climb(cluster, hook, sub, watcher, watched) -> None:
    import ray

    with Consumer(hook, LADDER) as consumer:
        # 1. h100 refused: the hook asks for a100 without a human, and work runs there.
        wait_until(lambda: _state(hook).get("serving") == "a100", 120,
                   message="serving on a100 after the h100 stock-out")
        state = _state(hook)
        h100 = state["rungs"]["h100"]
        assert h100["status"] in ("stocked_out", "probing") and h100["failures"] >= 1
        assert "InsufficientInstanceCapacity" in h100["last_stockout_reason"]
        assert h100["next_retry"] is not None
        events = cluster.events()
        first_refusal = next(e["time"] for e in events if e["event"] == "refused")
        a100_launch = next(e["time"] for e in events
                           if e["event"] == "launching" and e["node_type"] == "a100")
        stockout = next(e["time"] for e in state["events"]
                        if e["kind"] == "stockout" and e["rung"] == "h100")
        assert first_refusal < stockout <= a100_launch  # a100 came because the hook asked
        assert not any(e["event"] == "launching" and e["node_type"] == "h100" for e in events)
        # The standing request for h100 is damped: refusals come in bursts, not every second.
        # 2. h100 comes back: the next probe gets it, traffic moves after the hysteresis.
        cluster.set_schedule(None)
        wait_until(lambda: _state(hook).get("serving") == "h100", 120,
                   message="serving on h100 once it is allowed again")
        # 3. The a100 request is released and Ray's idle timeout returns its node.
        wait_until(lambda: "a100" not in alive_node_types(), 120,
                   message="a100 node released after the climb")
        climbed = len(consumer.sent)
        wait_until(lambda: sum(r == "h100" for _, r, _ in consumer.sent[climbed:]) >= 3, 30,
                   message="the consumer sent tasks to h100 after the climb")
    results = consumer.results()  # raises if any task was lost
    assert len(results) == len(consumer.sent) > 20
    assert all(rung is not None for _, rung, _ in consumer.sent)
    ran_on = [(rung, node) for rung, node in results]
    # Every task ran on a node of its rung (cpu runs on the head).
    assert all(node == (rung if rung != "cpu" else "head") for rung, node in ran_on)
    order = [r for i, (r, _) in enumerate(ran_on) if i == 0 or ran_on[i - 1][0] != r]
    assert order[-2:] == ["a100", "h100"]
    kinds = [(e["kind"], e["rung"], e["direction"]) for e in _state(hook)["events"]]
    assert ("stockout", "h100", None) in kinds and ("transition", "h100", "up") in kinds
    assert ("released", "a100", None) in kinds
    terminated = [e for e in cluster.events() if e["event"] == "terminated"]
    assert [e["node_type"] for e in terminated] == ["a100"]
    # Subscribers saw every step: h100 warmed before it served; a100 drained, then released.
    watcher.stop()
    assert watched[-1] == "h100" and "a100" in watched
    roles = ray.get(sub.seen.remote(), timeout=30)
    h100 = [r["h100"] for r in roles]
    a100 = [r["a100"] for r in roles]
    assert h100.index("warming") < len(h100) - 1 - h100[::-1].index("serving")
    assert h100[-1] == "serving"
    last_serving = len(a100) - 1 - a100[::-1].index("serving")
    assert a100[last_serving:].index("draining") < a100[last_serving:].index("released")


def test_cli_status_prints_the_hook_state(cluster, hook):
    from click.testing import CliRunner

    from ray_ladder.cli import main

    out = CliRunner().invoke(main, ["autoscale", "status", "--address", cluster.address,
                                    "--ladder", "fake-as", "--json"])
    assert out.exit_code == 0, out.output
    state = json.loads(out.output)["fake-as"]
    assert state["serving"] == "h100"
    assert state["rungs"]["h100"]["status"] == "up"
    assert {"status", "target_bundles", "last_stockout", "next_retry"} <= set(
        state["rungs"]["a100"])
    table = CliRunner().invoke(main, ["autoscale", "status", "--address", cluster.address])
    assert table.exit_code == 0, table.output
    assert "fake-as" in table.output and "h100" in table.output


def test_hook_restarts_and_resumes_from_its_published_state(cluster, hook):
    import ray

    before = _state(hook)
    ray.kill(hook, no_restart=False)
    after = wait_until(lambda: _state(hook).get("restarts") == 1 and _state(hook), 60,
                       message="hook restarted by Ray")
    assert after["version"] >= before["version"]
    assert after["serving"] == "h100"


def test_shutdown_stops_every_process_it_started(cluster):
    import ray
    from click.testing import CliRunner

    from ray_ladder.autoscale.fake.cluster import _session_pids
    from ray_ladder.autoscale.sources import REQUEST_PREFIX, _kv_get
    from ray_ladder.cli import main

    out = CliRunner().invoke(main, ["autoscale", "stop", "--ladder", "fake-as"])
    assert out.exit_code == 0, out.output
    assert _kv_get(REQUEST_PREFIX + "fake-as") is None  # its node request is withdrawn
    ray.shutdown()
    sid = cluster.sid
    assert _session_pids(sid)  # head, monitor, the h100 node and workers
    cluster.shutdown()
    assert _session_pids(sid) == []
