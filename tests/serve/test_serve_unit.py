"""Serve ladder, pure parts: answer cache, HTTP rules, router state, app building (no cluster)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ray_ladder import Constraints, InvalidConstraintsError, Ladder, LadderExhaustedError
from ray_ladder.core.exceptions import Attempt
from ray_ladder.serve import http
from ray_ladder.serve.cache import AnswerCache, payload_key
from ray_ladder.serve.result import LadderResult
from ray_ladder.serve.state import RECENT_USE_S, RouterState, standby_replicas
from ray_ladder.serve.walk import RequestView

LADDER = Ladder.from_yaml("""
name: unit
policy: {promotion_hysteresis: 2, probe_interval_s: 0.5, retry_after_s: 7.5}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, tags: {jurisdiction: us, site: cloud},
     cost_per_hour: 10}
  - {name: a100, resources: {ladder/a100: 1}, tags: {jurisdiction: eu, site: onprem},
     quality: 0.9, cost_per_hour: 4, standby_replicas: 1}
  - {name: l4, resources: {ladder/l4: 1}, tags: {jurisdiction: eu, site: onprem},
     quality: 0.8, cost_per_hour: 1}
  - {name: cache, kind: cache, quality: 0.3, cache: {max_entries: 2, ttl_s: 10}}
  - {name: shed, kind: shed, quality: 0}
""")
H100, A100, L4 = (LADDER.rung(n) for n in ("h100", "a100", "l4"))
EU = Constraints(jurisdiction="eu")


# --- the answer cache --------------------------------------------------------------------

def test_payload_key_is_canonical_and_skips_non_json():
    assert payload_key({"b": 1, "a": 2}) == payload_key({"a": 2, "b": 1})
    assert payload_key({"x": object()}) is None
    assert payload_key(float("nan")) is None


def test_cache_serves_fresh_answers_and_expires_them():
    cache = AnswerCache(max_entries=10, ttl_s=5)
    cache.put("k", None, {"y": 1}, H100, now=100.0)
    hit = cache.get("k", None, now=104.9)
    assert hit is not None and hit.value == {"y": 1} and hit.producer.name == "h100"
    assert cache.get("k", None, now=105.0) is None  # ttl reached
    assert len(cache) == 0  # expired entries are dropped


def test_cache_is_bounded_least_recently_used_first():
    cache = AnswerCache(max_entries=2, ttl_s=60)
    cache.put("a", None, 1, H100, now=0)
    cache.put("b", None, 2, H100, now=0)
    assert cache.get("a", None, now=1) is not None  # "a" is now the most recent
    cache.put("c", None, 3, H100, now=2)
    assert cache.get("b", None, now=3) is None
    assert [cache.get(k, None, now=3).value for k in ("a", "c")] == [1, 3]


def test_cache_never_gives_an_eu_request_an_answer_made_outside_eu():
    cache = AnswerCache(max_entries=10, ttl_s=60)
    cache.put("k", None, "from-us", H100, now=0)
    assert cache.get("k", EU, now=1) is None
    assert cache.get("k", None, now=1).value == "from-us"
    cache.put("k", EU, "from-eu", A100, now=2)
    assert cache.get("k", EU, now=3).value == "from-eu"
    # An unconstrained answer produced on an eu rung is fine for an eu request.
    cache.put("j", None, "eu-made", A100, now=4)
    assert cache.get("j", EU, now=5).value == "eu-made"


def test_cache_checks_every_constraint_of_the_producer():
    cache = AnswerCache(max_entries=10, ttl_s=60)
    cache.put("k", None, "pricey", H100, now=0)
    assert cache.get("k", Constraints(max_cost_per_hour=5.0), now=1) is None
    assert cache.get("k", Constraints(sites=("onprem",)), now=1) is None
    assert cache.get("k", Constraints(min_quality=0.95), now=1).value == "pricey"


def test_cache_rejects_bad_bounds():
    with pytest.raises(ValueError, match="max_entries"):
        AnswerCache(max_entries=0)
    with pytest.raises(ValueError, match="ttl_s"):
        AnswerCache(ttl_s=0)


# --- HTTP rules ---------------------------------------------------------------------------

def test_headers_become_constraints_case_insensitively():
    c = http.constraints_from_headers({"X-LADDER-JURISDICTION": "eu", "x-ladder-max-cost": "5",
                                       "X-Ladder-Min-Quality": " 0.5 ",
                                       "X-Ladder-Sites": "onprem, cloud"}, LADDER)
    assert c == Constraints(jurisdiction="eu", max_cost_per_hour=5.0, min_quality=0.5,
                            sites=("onprem", "cloud"))
    assert http.constraints_from_headers({"content-type": "application/json"}, LADDER) is None


@pytest.mark.parametrize("headers, fragment", [
    ({"X-Ladder-Jurisdiction": "mars"}, "unknown jurisdiction"),
    ({"X-Ladder-Jurisdiction": ""}, "unknown jurisdiction"),
    ({"X-Ladder-Max-Cost": "cheap"}, "must be a number"),
    ({"X-Ladder-Max-Cost": "-1"}, "max_cost_per_hour"),
    ({"X-Ladder-Min-Quality": "2"}, "min_quality"),
    ({"X-Ladder-Min-Quality": "nan"}, "must be a number"),
    ({"X-Ladder-Sites": "moon"}, "unknown site"),
])
def test_bad_constraint_headers_are_400(headers, fragment):
    with pytest.raises(http.HttpError) as info:
        http.constraints_from_headers(headers, LADDER)
    assert info.value.status == 400
    assert fragment in info.value.message


def test_make_constraints_raises_typed_errors_for_handle_callers():
    assert http.make_constraints(LADDER) is None
    with pytest.raises(InvalidConstraintsError, match="unknown jurisdiction"):
        http.make_constraints(LADDER, jurisdiction="mars")
    with pytest.raises(InvalidConstraintsError, match="min_quality"):
        http.make_constraints(LADDER, min_quality=1.5)
    with pytest.raises(InvalidConstraintsError):
        http.make_constraints(LADDER, max_cost_per_hour="abc")  # type: ignore[arg-type]


@pytest.mark.parametrize("body, status", [
    (b"{not json", 400), (b"", 400), (b"   ", 400), (b"\xff\xfe", 400),
    (b"[" * 100_000, 400), (b"x" * 1_000_001, 413),
])
def test_bad_bodies_are_4xx(body, status):
    with pytest.raises(http.HttpError) as info:
        http.parse_body(body, max_body_bytes=1_000_000)
    assert info.value.status == status


def test_declared_length_over_limit_is_413_before_reading():
    with pytest.raises(http.HttpError) as info:
        http.check_length("5000", 100)
    assert info.value.status == 413
    with pytest.raises(http.HttpError) as info:
        http.check_length("lots", 100)
    assert info.value.status == 400
    http.check_length(None, 100)
    http.check_length("100", 100)


def test_good_body_parses_to_the_payload():
    assert http.parse_body(b'{"prompt": "hi", "n": [1, 2]}', 100) == {"prompt": "hi", "n": [1, 2]}


def test_answer_and_unavailable_headers():
    assert http.answer_headers("cache", 3.25, stale=True, source_rung="a100") == {
        "X-Ladder-Rung": "cache", "X-Ladder-Degraded-S": "3.250", "X-Ladder-Stale": "true",
        "X-Ladder-Source-Rung": "a100"}
    err = LadderExhaustedError("unit", [Attempt("h100", "ActorDiedError", 1.0),
                                        Attempt("shed", "any words", 2.0, cause="shed")], 7.5)
    body, headers = http.unavailable(err, 1.0)
    assert headers["Retry-After"] == "8" and headers["X-Ladder-Rung"] == "shed"
    assert body["rung"] == "shed"
    assert [a["rung"] for a in body["attempts"]] == ["h100", "shed"]
    _, headers = http.unavailable(LadderExhaustedError("unit", [], 0.2), 0.0)
    assert headers["Retry-After"] == "1" and headers["X-Ladder-Rung"] == http.EXHAUSTED


def test_both_routes_report_a_shed_the_same_way_from_its_cause_not_its_words():
    """The JSON route's 503 and the OpenAI route's read one rule (http.refused_by)."""
    from ray_ladder.serve.llm.routes import exhausted_error

    named = LadderExhaustedError("unit", [Attempt("last", "reworded: come back", 1.0,
                                                  cause="shed")], 2.0)
    _, json_headers = http.unavailable(named, 0.5)
    openai = exhausted_error(named, 0.5)
    assert json_headers == openai.headers
    assert json_headers["X-Ladder-Rung"] == "last" and openai.body()["error"]["code"] == "shed"
    # a reason that starts with "shed" is not a shed unless its cause says so
    worded = LadderExhaustedError("unit", [Attempt("h100", "shed: words", 1.0,
                                                   cause="rung_down")], 2.0)
    assert http.refused_by(worded) == http.EXHAUSTED
    assert exhausted_error(worded, 0.0).body()["error"]["code"] == "exhausted"


# --- router state --------------------------------------------------------------------------

def _state(**kw) -> RouterState:
    return RouterState(LADDER, down_cooldown_s=kw.pop("cooldown", 1.0), **kw)


ALL_UP = {"h100": True, "a100": True, "l4": True}


def test_standby_defaults_to_one_on_top_and_zero_below():
    assert [standby_replicas(LADDER, r) for r in LADDER.rungs] == [1, 1, 0, 0, 0]


def test_obtainable_needs_capacity_and_a_running_replica_unless_cold():
    state = _state()
    state.observe({"h100": 0, "a100": 1, "l4": 0}, ALL_UP, now=0)
    # h100 keeps a standby replica: it counts once that replica runs, not while starting.
    # l4 keeps none: it is a cold rung, obtainable while a node can host it.
    assert state.obtainable(0) == {"h100": False, "a100": True, "l4": True}
    state.observe({"h100": 1, "a100": 1, "l4": 0}, {**ALL_UP, "h100": False, "l4": False}, 1)
    # A RUNNING count may lag a dead node: no capacity wins.
    assert state.obtainable(1) == {"h100": False, "a100": True, "l4": False}


def test_replica_counts_are_reread_only_when_they_can_change_the_choice():
    state = _state()
    assert state.needs_replica_counts(ALL_UP, now=0)  # never read yet
    state.observe({"h100": 0, "a100": 1, "l4": 0}, ALL_UP, now=0)
    # h100 keeps a standby replica that is not running yet: read again at every probe.
    assert state.needs_replica_counts(ALL_UP, now=0.5)
    state.observe({"h100": 1, "a100": 1, "l4": 0}, ALL_UP, now=0.5, alive=["h100"])
    # Steady: every standby runs, capacity unchanged -> skip until the counts are old.
    assert not state.needs_replica_counts(ALL_UP, now=1.0)
    assert state.needs_replica_counts(ALL_UP, now=0.5 + state.replica_counts_max_age_s)
    # A node that leaves (or joins) makes the next probe read them.
    assert state.needs_replica_counts({**ALL_UP, "h100": False}, now=1.0)
    # Kept counts still decide: a skipped read leaves the ladder where it was.
    assert state.observe(None, ALL_UP, now=1.0).rung == "h100"


def test_an_answer_since_the_last_probe_proves_a_replica_runs():
    state = _state()
    state.observe({"h100": 0, "a100": 1, "l4": 0}, ALL_UP, now=0)
    assert state.obtainable(0)["h100"] is False
    state.observe(None, ALL_UP, now=0.5, alive=["h100"])
    assert state.obtainable(0.5)["h100"] is True and state.is_warm("h100")


def test_a_rung_the_hook_released_is_left_out_only_where_a_better_rung_serves():
    state = _state()
    running = {"h100": 1, "a100": 1, "l4": 0}
    state.observe(running, ALL_UP, now=0)
    state.selector(EU, 0)  # an eu selector: a100 (eu) is its best rung
    # The hook released a100 (h100 came back): unconstrained requests leave it ...
    state.observe(running, ALL_UP, now=0.5, held=["a100"])
    assert state.best_compute(state.selector(None, 0.5), {"h100"}) == "l4"
    # ... eu requests keep it: no better rung is eligible for them.
    assert state.selector(EU, 0.5).current == "a100"
    assert state.held_everywhere(now=0.5) == set()  # eu requests may still come
    # ... until eu requests stop: then nothing keeps the released rung warm.
    assert state.held_everywhere(now=0.5 + RECENT_USE_S + 1) == {"a100"}
    assert state.snapshot(0.5)["rungs"][1]["released_by_hook"] is True
    # With h100 gone, a100 is the best the unconstrained requests have: not left out.
    state.observe(running, {**ALL_UP, "h100": False}, now=1.0, held=["a100"])
    assert state.best_compute(state.selector(None, 1.0), set()) == "a100"


def test_a_released_rung_no_selector_may_use_is_not_kept_warm():
    state = _state()
    running = {"h100": 1, "a100": 1, "l4": 0}
    state.observe(running, ALL_UP, now=0, held=["a100"])
    assert state.held_everywhere(now=0) == {"a100"}
    assert "released by the autoscaler hook" in state.why_unobtainable("a100", 0)


def test_failure_falls_at_once_and_cooldown_then_hysteresis_climb_back():
    events = []
    state = _state(cooldown=1.0, on_event=events.append)
    running = {"h100": 1, "a100": 1, "l4": 0}
    assert state.observe(running, ALL_UP, now=0).rung == "h100"
    decision = state.mark_down("h100", "ActorDiedError", now=0.1)
    assert decision.rung == "a100" and decision.direction == "down"
    assert state.selector(None, 0.1).current == "a100"
    assert state.observe(running, ALL_UP, now=0.5).rung == "a100"  # still cooling down
    assert state.on_probation(0.5) == []
    # Cooled down, but it failed: it counts again once a replica answers (a ping).
    assert state.observe(running, ALL_UP, now=1.2).rung == "a100"
    assert state.on_probation(1.2) == ["h100"]
    assert "waiting for a replica to answer" in state.why_unobtainable("h100", 1.2)
    assert state.observe(running, ALL_UP, now=1.3, alive=["h100"]).rung == "a100"  # 1 of 2
    assert state.on_probation(1.3) == []
    decision = state.observe(running, ALL_UP, now=1.7)
    assert decision.rung == "h100" and decision.direction == "up"
    assert [(e.from_rung, e.to_rung) for e in events if e.kind == "transition"] == [
        (None, "h100"), ("h100", "a100"), ("a100", "h100")]


def test_constrained_requests_get_their_own_selector_on_shared_observations():
    state = _state()
    state.observe({"h100": 1, "a100": 1, "l4": 0}, ALL_UP, now=0)
    assert state.selector(EU, 0).current == "a100"
    assert state.selector(None, 0).current == "h100"
    state.mark_down("a100", "gone", now=1)
    assert state.selector(EU, 1).current == "l4"  # cold, but a node can host it
    assert state.selector(None, 1).current == "h100"
    assert state.degraded_s(EU) == 0.0  # first decision of the eu selector was its best


def test_exhausted_when_every_compute_rung_is_gone_falls_to_cache():
    state = _state()
    nothing = {"h100": False, "a100": False, "l4": False}
    assert state.observe({}, nothing, now=0).rung == "cache"
    assert state.selector(Constraints(min_quality=0.5), 0).current == "shed"


def test_to_prime_names_cold_rungs_above_the_current_one():
    state = _state()
    state.observe({"h100": 0, "a100": 1, "l4": 0}, ALL_UP, now=0)
    assert state.current == "a100"
    assert state.to_prime() == []  # h100 is starting (standby); l4 is below
    state.observe({"h100": 0, "a100": 0, "l4": 0}, {**ALL_UP, "a100": False}, now=1)
    assert state.current == "l4"
    state.observe({"h100": 0, "a100": 0, "l4": 0}, ALL_UP, now=2)
    assert state.to_prime() == []  # a100 keeps a standby: Serve starts it, no prime needed


def test_selectors_are_bounded():
    state = _state(max_selectors=2)
    state.observe({"h100": 1, "a100": 1}, ALL_UP, now=0)
    for cost in (1.0, 2.0, 3.0, 4.0):
        state.selector(Constraints(max_cost_per_hour=cost), 0)
    assert len(state._selectors) == 3  # the unconstrained one is always kept


def test_snapshot_is_json_ready():
    import json

    state = _state()
    state.observe({"h100": 1, "a100": 1, "l4": 0}, ALL_UP, now=0)
    state.mark_down("h100", "ActorDiedError: node died", now=1)
    snap = json.loads(json.dumps(state.snapshot(1.5)))
    assert snap["current"] == "a100" and snap["current_index"] == 1
    h100 = snap["rungs"][0]
    assert h100["down_reason"] == "ActorDiedError: node died" and h100["down_for_s"] == 0.5
    assert [e["to"] for e in snap["events"]] == ["h100", "a100"]


def test_cooldown_must_be_positive():
    with pytest.raises(ValueError, match="down_cooldown_s"):
        RouterState(LADDER, down_cooldown_s=0)


# --- result, app building -------------------------------------------------------------------

def test_ladder_result_is_frozen():
    result = LadderResult({"y": 1}, "h100")
    assert (result.stale, result.degraded_s, result.source_rung) == (False, 0.0, None)
    with pytest.raises(AttributeError):
        result.rung = "a100"  # type: ignore[misc]


def test_serve_package_import_stays_ray_free():
    code = ("import sys; import ray_ladder.serve, ray_ladder.serve.cache, "
            "ray_ladder.serve.http, ray_ladder.serve.state; print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


class Model:
    def __init__(self, rung, **kwargs):
        self.rung = rung

    def __call__(self, payload):
        return payload


def test_build_app_names_missing_and_unknown_rungs():
    from ray_ladder.serve import build_app

    with pytest.raises(ValueError, match=r"no class for compute rung\(s\) \['a100', 'l4'\]"):
        build_app(LADDER, {"h100": Model})
    with pytest.raises(ValueError, match=r"rungs names \['cache'\]"):
        build_app(LADDER, {"h100": Model, "a100": Model, "l4": Model, "cache": Model})
    with pytest.raises(ValueError, match=r"init_kwargs names \['tpu'\]"):
        build_app(LADDER, {"h100": Model, "a100": Model, "l4": Model},
                  init_kwargs={"tpu": {}})
    with pytest.raises(TypeError, match="no __call__"):
        build_app(LADDER, {"h100": object, "a100": Model, "l4": Model})
    with pytest.raises(ValueError, match="cannot import"):
        build_app(LADDER, {"h100": "no_such_module:X", "a100": Model, "l4": Model})


def test_rung_deployments_carry_placement_and_standby():
    from ray_ladder.serve.app import rung_deployment_options

    opts = rung_deployment_options(LADDER, "a100")
    assert opts["name"] == "a100"
    assert opts["ray_actor_options"] == {"resources": {"ladder/a100": 1.0}}
    scaling = opts["autoscaling_config"]
    assert (scaling["min_replicas"], scaling["initial_replicas"]) == (0, 0)
    assert scaling["policy"]["policy_kwargs"] == {"standby": 1, "ladder": LADDER.name,
                                                  "rung": "a100"}
    assert scaling["downscale_to_zero_delay_s"] == 0  # StandbyPolicy holds 1 -> 0 itself


def test_standby_policy_floors_serves_decision():
    from types import SimpleNamespace

    from ray_ladder.serve.scaling import StandbyPolicy

    ctx = SimpleNamespace(current_num_replicas=0, target_num_replicas=0, total_num_requests=0,
                          policy_state={}, config=None)
    assert StandbyPolicy(standby=2)(ctx)[0] == 2
    assert StandbyPolicy(standby=0)(ctx)[0] == 0


def test_a_cold_rung_the_router_primed_gets_a_replica_without_waiting_for_serve_metrics():
    # Serve's cold start waits for the handle's next metrics push (2-7 s); the router's
    # prime (a notice above the rung, a climb onto it) floors the rung at 1 at once.
    from types import SimpleNamespace

    from ray_ladder.serve import scaling

    ctx = SimpleNamespace(current_num_replicas=0, target_num_replicas=0, total_num_requests=0,
                          policy_state={}, config=None, current_time=1000.0, app_name="web")
    kv: dict[str, dict[str, float]] = {}
    policy = scaling.StandbyPolicy(standby=0, ladder="web", rung="a100")
    policy._read_kv = lambda key: kv.get(key)  # type: ignore[method-assign]
    assert policy(ctx)[0] == 0  # nothing asked for it: Serve's decision
    kv[scaling.PRIME_PREFIX + "web"] = {"a100": 1000.1}  # the router primed it
    ctx.current_time = 1000.1 + scaling.PRIME_READ_EVERY_S
    assert policy(ctx)[0] == 1  # read within PRIME_READ_EVERY_S of the prime
    ctx.current_time = 1000.1 + scaling.PRIME_HOLD_S + 1  # long ago: Serve decides again
    assert policy(ctx)[0] == 0


def test_app_builder_validates_its_args(tmp_path):
    from ray_ladder.serve import app_builder

    path = tmp_path / "ladder.yaml"
    path.write_text(LADDER.to_yaml())
    model = f"{__name__}:Model"
    with pytest.raises(ValueError, match="extra"):
        app_builder({"ladder": str(path), "rungs": {}, "colour": "blue"})
    with pytest.raises(ValueError, match="no class"):
        app_builder({"ladder": str(path), "rungs": {"h100": model}})


def test_other_compute_rung_is_what_a_timeout_may_fall_to():
    state = _state()
    state.observe({"h100": 1, "a100": 1, "l4": 0}, {**ALL_UP, "l4": False}, now=0)
    everyone = RequestView(state, state.selector(None, 0))
    eu = RequestView(state, state.selector(EU, 0))
    assert everyone.has_other_compute("h100")  # a100
    assert not eu.has_other_compute("a100")  # l4 has no node: only cache is left


def test_best_compute_is_the_best_other_obtainable_compute_rung():
    state = _state()
    state.observe({"h100": 1, "a100": 1, "l4": 0}, ALL_UP, now=0)
    everyone = state.selector(None, 0)
    assert state.best_compute(everyone, {"h100"}) == "a100"
    assert state.best_compute(everyone, {"h100", "a100"}) == "l4"
    assert state.best_compute(state.selector(EU, 0), {"a100", "l4"}) is None  # never h100


def test_the_example_serve_config_builds(monkeypatch):
    import yaml
    from ray.serve import Application

    from ray_ladder.serve import app_builder

    root = __import__("pathlib").Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)  # paths in the config are relative to where `serve run` starts
    monkeypatch.syspath_prepend(str(root))
    config = yaml.safe_load((root / "examples" / "serve_config.yaml").read_text())
    (application,) = config["applications"]
    assert application["import_path"] == "ray_ladder.serve:app_builder"
    assert isinstance(app_builder(application["args"]), Application)


def test_metrics_count_requests_transitions_and_log_alerts(caplog):
    import logging

    from ray_ladder.core.events import TransitionEvent
    from ray_ladder.serve.metrics import LadderMetrics

    metrics = LadderMetrics(LADDER, enabled=False)
    metrics.request("h100")
    metrics.request("h100")
    metrics.event(TransitionEvent(1.0, "unit", "h100", "a100", "down", "h100 unobtainable"))
    with caplog.at_level(logging.INFO, logger="ray_ladder"):
        metrics.event(TransitionEvent(9.0, "unit", "a100", "a100", None, "degraded for 9s",
                                      kind="alert"))
    metrics.flush()  # without Ray metrics: a no-op that must not lose the counts
    snap = metrics.snapshot()
    assert snap["requests"] == {"h100": 2}
    assert snap["transitions"] == {"down": 1} and snap["alerts"] == 1
    alert = [r for r in caplog.records if r.name == "ray_ladder.alerts"]
    assert alert and alert[0].levelno == logging.WARNING and "degraded for 9s" in alert[0].message
    lines = [r.message for r in caplog.records if r.name == "ray_ladder.events"]
    assert '"kind": "alert"' in lines[-1]


def test_rung_wrapper_matches_sync_and_async_classes():
    from ray_ladder.core.context import RungContext
    from ray_ladder.serve.replica import AsyncRungReplica, RungReplica, replica_class

    class Async:
        def __init__(self, rung):
            self.rung = rung

        async def __call__(self, payload):
            return payload

    assert replica_class(Model) is RungReplica
    assert replica_class(Async) is AsyncRungReplica
    replica = RungReplica(Model, RungContext(name="h100", index=0, ladder="unit"), {})
    assert replica({"x": 1}) == {"x": 1} and replica.ladder_ping() == "h100"
    with pytest.raises(TypeError, match="needs a class"):
        replica_class(Model(None))  # type: ignore[arg-type]


def test_failures_of_the_rung_fall_and_user_errors_do_not():
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayTaskError
    from ray.serve.exceptions import BackPressureError

    from ray_ladder.serve.errors import failure_reason

    assert failure_reason(ActorDiedError()).startswith("ActorDiedError")
    assert failure_reason(ActorUnavailableError("gone", None)).startswith("ActorUnavailable")
    assert failure_reason(BackPressureError(num_queued_requests=3, max_queued_requests=2))
    assert failure_reason(ValueError("bad payload")) is None
    user = RayTaskError("f", "traceback", ValueError("bad payload"))
    assert failure_reason(user) is None
    assert failure_reason(RayTaskError("f", "tb", ActorDiedError())).startswith("ActorDied")


def test_why_a_rung_is_unobtainable():
    state = _state(cooldown=1.0)
    state.observe({"h100": 0, "a100": 1, "l4": 0}, {**ALL_UP, "l4": False}, now=0)
    assert state.why_unobtainable("h100", 0) == "its standby replica is not running yet"
    assert state.why_unobtainable("l4", 0) == "no alive node can host it"
    state.mark_down("a100", "ActorDiedError: gone", now=0)
    assert state.why_unobtainable("a100", 0.5) == "marked down: ActorDiedError: gone"
    assert state.lost == ["a100"]
    # The same, as data: the app's status entry carries each cause with its reason.
    from ray_ladder.serve.metrics import LadderMetrics

    metrics, entries = LadderMetrics(state.ladder, enabled=False, app="web"), []
    metrics.board._publish = lambda key, entry: entries.append(entry)
    metrics.observed(state, now=0.5)
    whys = {r["name"]: r["why"] for r in entries[-1]["rungs"]}
    assert whys["a100"] == {"cause": "down", "reason": "marked down: ActorDiedError: gone"}
    assert (whys["h100"]["cause"], whys["l4"]["cause"]) == ("starting", "no_node")


def test_a_rung_that_keeps_failing_stays_down_longer_each_time():
    s = _state(cooldown=1.0)
    s.observe({"h100": 1, "a100": 1}, {"h100": True, "a100": True}, now=0.0)
    s.mark_down("h100", "backend down", now=0.0)
    assert s.is_down("h100", 0.9) and not s.is_down("h100", 1.0)
    s.mark_down("h100", "backend down", now=1.2)  # failed again right after: 2 s
    assert s.is_down("h100", 3.1) and not s.is_down("h100", 3.2)
    s.mark_down("h100", "backend down", now=3.3)  # and again: 4 s
    assert s.is_down("h100", 7.2) and not s.is_down("h100", 7.3)
    s.mark_down("h100", "a one-off", now=100.0)  # long after: back to 1 s
    assert not s.is_down("h100", 101.0)
    for t in range(200, 400, 1):  # capped
        s.mark_down("h100", "down for good", now=float(t) / 10 + 200)
    assert s.is_down("h100", 240.0 + 29.0)


def test_a_new_standby_replica_counts_once_a_ping_through_the_handle_answered():
    # Serve's controller reports RUNNING before the router's handle can route there:
    # climbing then would send requests that wait (and hedge below) for seconds.
    state = _state(cooldown=1.0)
    running = {"h100": 1, "a100": 1, "l4": 0}
    state.observe(running, ALL_UP, now=0)
    state.mark_down("h100", "NodeDiedError", now=0.1)
    gone = {**ALL_UP, "h100": False}
    state.observe({**running, "h100": 0}, gone, now=0.5)  # the node is gone
    assert state.on_probation(2.0) == []
    state.observe(running, ALL_UP, now=2.0)  # a new node and a RUNNING replica
    assert state.on_probation(2.0) == ["h100"] and not state.obtainable(2.0)["h100"]
    assert state.observe(running, ALL_UP, now=2.5).rung == "a100"  # no answer yet
    state.observe(None, ALL_UP, now=3.0, alive=["h100"])  # the router's ping answered
    assert state.on_probation(3.0) == []  # streak 1 of 2
    assert state.observe(None, ALL_UP, now=3.5).rung == "h100"
