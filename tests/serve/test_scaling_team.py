"""The rung deployments' autoscaling under a fleet team's grants (serve/scaling.py):
replicas capped at the units granted and not reclaimed, so a reclaimed unit comes free."""

from __future__ import annotations

from types import SimpleNamespace

from ray_ladder.cluster import grants
from ray_ladder.serve import scaling


def _policy(kv: dict) -> scaling.StandbyPolicy:
    policy = scaling.StandbyPolicy(standby=1, ladder="web", rung="h100", team="b")
    policy._read_kv = lambda key: kv.get(key)  # type: ignore[method-assign]
    return policy


def _ctx(now: float, requests: int = 0) -> SimpleNamespace:
    # No replica running yet (Serve's own policy then needs no config): what the cap
    # decides for a rung whose replica would start.
    return SimpleNamespace(current_num_replicas=0, target_num_replicas=0,
                           total_num_requests=requests, policy_state={}, config=None,
                           current_time=now, app_name="web")


def test_the_serve_controller_copy_of_the_grants_key_matches_the_arbiter() -> None:
    assert scaling.GRANTS_PREFIX == grants.GRANTS_PREFIX
    assert scaling.HOOK_KV_NAMESPACE == grants.KV_NAMESPACE


def test_without_an_arbiter_entry_the_standby_floor_holds() -> None:
    assert _policy({})(_ctx(10.0))[0] == 1


def test_replicas_are_capped_at_the_units_granted_and_not_reclaimed() -> None:
    kv = {"fleet/grants/b": {"rungs": {"h100": {"held": 2, "noticed": 0}}}}
    policy = _policy(kv)
    assert policy(_ctx(10.0))[0] == 1  # the floor, under the cap
    kv["fleet/grants/b"]["rungs"]["h100"] = {"held": 2, "noticed": 2}
    assert policy(_ctx(11.5))[0] == 0  # every unit reclaimed, no request left: it goes


def test_a_rung_the_team_holds_no_unit_of_runs_no_standby() -> None:
    kv = {"fleet/grants/b": {"rungs": {"h100": {"held": 0, "noticed": 0}}}}
    assert _policy(kv)(_ctx(10.0))[0] == 0


def test_build_app_binds_the_team_to_the_router_and_every_rung_policy() -> None:
    import pytest

    from ray_ladder import Ladder
    from ray_ladder.serve.app import build_app, rung_deployment_options

    ladder = Ladder.from_yaml("""
name: web
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: shed, kind: shed}
""")
    kwargs = rung_deployment_options(ladder, "h100", "b")["autoscaling_config"]["policy"]
    assert kwargs["policy_kwargs"]["team"] == "b"
    assert "team" not in rung_deployment_options(ladder, "h100")["autoscaling_config"][
        "policy"]["policy_kwargs"]

    class Model:
        def __init__(self, rung): ...
        def __call__(self, payload): return payload

    app = build_app(ladder, {"h100": Model}, team="b")
    assert app._bound_deployment.init_args[3]["team"] == "b"  # the router's options
    with pytest.raises(ValueError, match="fleet team"):
        build_app(ladder, {"h100": Model}, team="B team")


def test_a_replica_on_units_gone_back_to_their_owner_goes_at_once() -> None:
    # Serve's request count is an average over its look-back window (30 s by default):
    # the borrower's traffic moved at the notice, but the average still shows requests.
    # At the deadline the units are the owner's: the replica must not hold them 30 s more.
    from ray.serve.config import AutoscalingConfig

    def running(now: float) -> SimpleNamespace:  # one replica, Serve's average at 3
        return SimpleNamespace(current_num_replicas=1, target_num_replicas=1,
                               total_num_requests=3, policy_state={},
                               config=AutoscalingConfig(min_replicas=0, max_replicas=1),
                               current_time=now, app_name="web", capacity_adjusted_min_replicas=0,
                               capacity_adjusted_max_replicas=1, last_scale_up_time=None,
                               last_scale_down_time=None)

    kv = {"fleet/grants/b": {"rungs": {"h100": {"held": 1, "noticed": 1}}}}
    policy = _policy(kv)
    assert policy(running(10.0))[0] == 1  # the notice: requests still drain
    kv["fleet/grants/b"]["rungs"]["h100"] = {"held": 0, "noticed": 0}
    assert policy(running(11.5))[0] == 0  # the deadline passed: it goes now


def test_sustained_spill_raises_the_floor_within_the_teams_grant() -> None:
    kv = {"serve/spill/web": {"time": 10.0, "rungs": {"h100": 3}}}
    assert _policy(kv)(_ctx(10.5))[0] == 3  # the router's demand, no arbiter entry
    assert _policy(kv)(_ctx(45.0))[0] == 1  # a stale entry: the standby floor again
    kv["fleet/grants/b"] = {"rungs": {"h100": {"held": 2, "noticed": 0}}}
    assert _policy(kv)(_ctx(10.5))[0] == 2  # spill never borrows past the team's units
