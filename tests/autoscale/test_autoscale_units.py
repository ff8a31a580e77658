"""Capacity schedules, the stock-out provider's refusal, and what the hook reads and sends."""

from __future__ import annotations

import json

import pytest

from ray_ladder.autoscale.fake.schedule import CapacitySchedule, TraceReplay, Window


def test_script_windows_and_open_ends():
    s = CapacitySchedule.parse("h100 unavailable from t=5s to t=40s; a100 refused from t=10")
    assert s.windows["h100"] == (Window(5.0, 40.0),)
    assert [s.refused("h100", t, epoch=100.0) for t in (104.9, 105.0, 139.9, 140.0)] == [
        False, True, True, False]
    assert s.refused("a100", 1e9, epoch=0.0) and not s.refused("l4", 50.0, epoch=0.0)
    assert CapacitySchedule.parse("h100 unavailable").refused("h100", 123.0)
    with pytest.raises(ValueError, match="cannot read schedule clause"):
        CapacitySchedule.parse("h100 is sad")
    with pytest.raises(ValueError, match="must be after"):
        CapacitySchedule.parse("h100 unavailable from t=9s to t=3s")


def test_trace_replay_refuses_on_zero_points_and_loops(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 0, 0, 1]}))
    s = CapacitySchedule.from_dict({"epoch": 0, "node_types": {"v100": {
        "trace": "t.json", "seconds_per_point": 2.0, "start_point": 1}}}, base=tmp_path)
    # start_point 1: t in [0,2) plays point 1 (0), [2,4) point 2 (0), [4,6) point 3 (1), loop.
    assert [s.refused("v100", t) for t in (0, 3, 5, 7, 9)] == [True, True, False, False, True]
    assert TraceReplay.load(path).refused(1.5)


def test_schedule_file_round_trip(tmp_path):
    s = CapacitySchedule.from_dict({"epoch": 10.0, "script": "h100 unavailable from t=1s",
                                    "node_types": {"a100": {"unavailable": [[0, 5]]}}})
    path = tmp_path / "s.yaml"
    import yaml

    path.write_text(yaml.safe_dump(s.to_dict()))
    back = CapacitySchedule.load(path)
    assert back.epoch == 10.0 and back.windows == s.windows
    with pytest.raises(ValueError, match="unknown schedule key"):
        CapacitySchedule.from_dict({"nodes": {}})


def test_real_trace_fraction_matches_its_readme(traces_dir):
    trace = TraceReplay.load(traces_dir / "aws-10-26-2022_us-west-2a_v100_8.json")
    refused = sum(trace.refused(i) for i in range(len(trace.points)))
    assert refused / len(trace.points) == pytest.approx(1 - 0.480, abs=0.001)


def test_provider_raises_the_cloud_capacity_error(tmp_path, monkeypatch):
    from ray.autoscaler.node_launch_exception import NodeLaunchException
    from ray.autoscaler.tags import TAG_RAY_USER_NODE_TYPE

    from ray_ladder.autoscale.fake.provider import StockoutProvider

    monkeypatch.setenv("RAY_FAKE_CLUSTER", "1")
    sched, log = tmp_path / "s.yaml", tmp_path / "events.jsonl"
    sched.write_text('script: "h100 unavailable"\n')
    p = StockoutProvider({"capacity_schedule": str(sched), "events_log": str(log)}, "c")
    with pytest.raises(NodeLaunchException) as info:
        p.create_node_with_resources_and_labels({}, {TAG_RAY_USER_NODE_TYPE: "h100"}, 1, {}, {})
    assert info.value.category == "InsufficientInstanceCapacity"
    assert "h100" in info.value.description
    assert json.loads(log.read_text())["event"] == "refused"
    sched.write_text('script: "a100 unavailable"\n')  # re-read on change
    assert not p.refuses("h100") and p.refuses("a100")


def test_v1_status_parsing_and_request_union(monkeypatch):
    from ray_ladder.autoscale import sources

    report = {"autoscaler_report": {"node_availability_summary": {"node_availabilities": {
        "h100": {"node_type": "h100", "is_available": False, "last_checked_timestamp": 7,
                 "unavailable_node_information": {"category": "C", "description": "D"}},
        "a100": {"node_type": "a100", "is_available": True, "last_checked_timestamp": 8,
                 "unavailable_node_information": None}}}}}
    [fail] = sources.launch_failures_v1(report)
    assert (fail.node_type, fail.time, fail.category) == ("h100", 7, "C")
    assert sources.launch_failures_v1({}) == []

    kv: dict[str, str] = {}
    sent: list[dict] = []
    import ray.autoscaler.sdk as sdk
    import ray.experimental.internal_kv as ikv

    monkeypatch.setattr(sources, "_kv_put", lambda k, v: kv.__setitem__(k, json.dumps(v)))
    monkeypatch.setattr(sources, "_kv_get", lambda k: json.loads(kv[k]) if k in kv else None)
    monkeypatch.setattr(ikv, "_internal_kv_list", lambda prefix, namespace=None: [
        k.encode() for k in kv if k.startswith(prefix)])
    monkeypatch.setattr(ikv, "_internal_kv_del", lambda k, namespace=None: kv.pop(k, None))
    monkeypatch.setattr(sdk, "request_resources", lambda **kw: sent.append(kw))
    sources.submit_request("a", [{"ladder/h100": 1.0}], [{}], now=1000.0)
    sources.submit_request("b", [{"ladder/l4": 1.0}], [{"zone": "x"}], now=1001.0)
    # Ladder b's call carries a's part too, and label selectors go with their bundles.
    assert sent[-1] == {"bundles": [{"ladder/h100": 1.0}, {"ladder/l4": 1.0}],
                        "bundle_label_selectors": [{}, {"zone": "x"}]}
    sources.submit_request("b", [], [], now=1000.0 + sources.REQUEST_STALE_S + 5)
    assert sent[-1] == {"bundles": []}  # a's part is stale (its hook is gone)
    sources.submit_request("a", [{"ladder/h100": 1.0}], [{}], now=2000.0)
    monkeypatch.setattr(sources.time, "time", lambda: 2001.0)
    sources.withdraw_request("a")
    assert sent[-1] == {"bundles": []} and "autoscale/request/a" not in kv
