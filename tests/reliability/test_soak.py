"""The chaos soak, 60 seconds: mixed load through node kills, a rung replica, the router
replica, the orchestrator and the hook killed once each, and a CPU-starved node."""

from __future__ import annotations

import json

import pytest
from soak import HEAD, NODE_TYPES, goals, soak  # bench/ (conftest.py puts it on the path)

pytestmark = [pytest.mark.ray, pytest.mark.long, pytest.mark.timeout(600)]


def test_sixty_second_soak_loses_nothing(local_cluster):
    cluster = local_cluster(NODE_TYPES, head=HEAD, log_to_driver=False)
    result = soak(cluster, 60.0, seed=1)
    met = goals(result)
    report = json.dumps({"goals": met, **result}, indent=1)
    assert {e["action"] for e in result["chaos"] if e.get("done")} >= {
        "kill_node", "add_node", "router_replica", "orchestrator", "hook", "starve"}, report
    # A request inside the router replica at its SIGKILL gets Serve's proxy's 500 (a plain
    # ingress's too): counted apart, and every other request must be answered.
    for goal in ("0_failed_requests_but_in_router_at_its_kill", "0_broken_streams",
                 "0_lost_tasks", "0_wrong_rung", "0_residency_violations", "nothing_leaked",
                 "tune_trial_finished"):
        assert met[goal], report
