"""Team names and a deleted app's demand on a real LocalCluster behind the fleet arbiter:
a team the fleet does not have is a ValueError wherever work is bound to it, and a
deleted Serve app's demand entry goes with the app (not after it went stale)."""

from __future__ import annotations

import json
import sys

import cloudpickle
import pytest
import ray
from ray import serve

from ray_ladder import Ladder, ladder_task
from ray_ladder.cluster import grants, ray_private
from ray_ladder.core.fleet import Fleet
from ray_ladder.fleet import start_arbiter
from ray_ladder.serve import build_app
from ray_ladder.testing import free_port, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

LADDER = Ladder.from_yaml("""
name: names
policy: {probe_interval_s: 0.25}
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: a100, resources: {ladder/a100: 1}, quality: 0.9}
  - {name: shed, kind: shed}
""")
FLEET = Fleet.from_yaml("""
fleet: names-it
control_period_s: 0.25
rungs: {h100: {resources: {ladder/h100: 1}}}
teams:
  - {name: a, quota: {h100: 1}, cohort: onprem}
  - {name: b, cohort: onprem}
""")
SLOW = 180
NAMED = r"team 'nosuchteam' is not in fleet 'names-it''s teams: a, b"


class Model:
    def __init__(self, rung):
        self.rung = rung

    def __call__(self, payload):
        return {"rung": self.rung.name}


cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def arbiter(local_cluster):
    local_cluster(ladder=LADDER, initial={"h100": 1, "a100": 1})
    serve.start(http_options={"host": "127.0.0.1", "port": free_port()},
                proxy_location="HeadOnly")
    handle = start_arbiter(FLEET)
    wait_until(lambda: grants.GrantReader().get("a") is not None, SLOW, 0.1,
               "the arbiter's first round")
    try:
        yield handle
    finally:
        serve.shutdown()
        ray.kill(handle, no_restart=True)


def test_a_team_the_fleet_does_not_have_is_a_value_error_wherever_it_is_bound(
        arbiter) -> None:
    from ray_ladder.tune import with_ladder

    with pytest.raises(ValueError, match=NAMED):
        build_app(LADDER, {"h100": Model, "a100": Model}, team="nosuchteam")
    with pytest.raises(ValueError, match=NAMED):
        @ladder_task(LADDER, team="nosuchteam")
        def work(*, rung) -> str:
            return rung.name
    with pytest.raises(ValueError, match=NAMED):
        with_ladder(lambda config: None, LADDER, team="nosuchteam")
    # the fleet's own teams bind as before
    assert build_app(LADDER, {"h100": Model, "a100": Model}, team="b") is not None
    assert with_ladder(lambda config: None, LADDER, team="a") is not None


def _entry(key: str) -> dict | None:
    raw = ray_private.kv_get(key, namespace=grants.KV_NAMESPACE)
    return json.loads(raw) if raw else None


def _team(status_of: str, field: str) -> int:
    status = ray.get(ray.get_actor("ray_ladder_arbiter", namespace="ray_ladder")
                     .status.remote(), timeout=30)
    return int(status["teams"][status_of]["rungs"]["h100"][field])


def test_a_deleted_apps_demand_entry_goes_with_it_and_its_unit_goes_back(arbiter) -> None:
    key = grants.DEMAND_PREFIX + "a/app-a"
    serve.run(build_app(LADDER, {"h100": Model, "a100": Model}, team="a"), name="app-a",
              route_prefix="/a")
    wait_until(lambda: _entry(key) is not None and _team("a", "held") == 1, SLOW, 0.25,
               "a's idle app wants its standby unit and holds it")
    assert _entry(key)["wants"]["h100"] == 1  # idle: its standby replica on its best rung
    serve.delete("app-a")
    # The router's __del__ removed the entry (a stale entry would still be in the KV),
    # and the next round took a's unit back.
    wait_until(lambda: _entry(key) is None, SLOW, 0.25, "a's demand entry removed")
    wait_until(lambda: _team("a", "wanted") == 0 and _team("a", "held") == 0, SLOW, 0.25,
               "a's unit back")
