"""One endpoint shared by two teams on a LocalCluster behind the fleet arbiter, over real
Serve HTTP with the official openai client: a's key is served on h100 from a's grant, b's
key on a100 (b has no h100 grant), streams stream, no key or a wrong key is a 401 with
OpenAI's error, and no log file, KV entry (events, status, grants) or metric holds a key."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import cloudpickle
import httpx
import openai
import pytest
import ray
from ray import serve
from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_list

from ray_ladder import Ladder
from ray_ladder.core.fleet import Fleet
from ray_ladder.core.keys import hash_key
from ray_ladder.fleet import start_arbiter
from ray_ladder.serve import build_shared_app
from ray_ladder.serve.llm.models import CounterRung
from ray_ladder.testing import free_port, wait_until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

LADDER = Ladder.from_yaml("""
name: keys-it
policy: {probe_interval_s: 0.25, pending_timeout_s: 10}
rungs:
  - {name: h100, resources: {ladder/h100: 1}, params: {model: big}}
  - {name: a100, resources: {ladder/a100: 1}, standby_replicas: 1, params: {model: small}}
  - {name: shed, kind: shed}
""")
# a owns the one h100 unit; b has no quota and no cohort: it may borrow none of it.
FLEET = Fleet.from_yaml("""
fleet: keys-it
control_period_s: 0.25
rungs: {h100: {resources: {ladder/h100: 1}}}
teams:
  - {name: a, quota: {h100: 1}}
  - {name: b}
""")
KEY_A = "sk-keys-it-team-a-7f3c9a2b5d1e4f60"
KEY_B = "sk-keys-it-team-b-0e8d7c6b5a493827"
WRONG = "sk-keys-it-nobody-11112222333344445555"
SLOW = 120

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _chat(client: openai.OpenAI, **extra: object) -> tuple[str | None, str]:
    """(the answering rung, the text) of one chat completion."""
    raw = client.chat.completions.with_raw_response.create(
        model="keys-it", messages=[{"role": "user", "content": "count from 0"}],
        max_tokens=5, **extra)
    return raw.headers.get("x-ladder-rung"), raw.parse().choices[0].message.content or ""


def _grants_published(team: str) -> bool:
    return _internal_kv_get(f"fleet/grants/{team}", namespace="ray_ladder") is not None


@pytest.fixture(scope="module")
def endpoint(local_cluster, tmp_path_factory):
    cluster = local_cluster(ladder=LADDER, initial={"h100": 1, "a100": 2})
    keys = tmp_path_factory.mktemp("keys") / "keys.yaml"
    keys.write_text("keys:\n" f"  - {{team: a, sha256: {hash_key(KEY_A)}, name: alice}}\n"
                    f"  - {{team: b, sha256: {hash_key(KEY_B)}}}\n")
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
    arbiter = start_arbiter(FLEET)
    # b's router must read b's (empty) grant from its start: without an entry it would
    # see the plain view and climb onto a's idle unit.
    wait_until(lambda: _grants_published("a") and _grants_published("b"), SLOW, 0.1,
               "the arbiter's first grants")
    rungs = {"h100": CounterRung, "a100": CounterRung}
    build_shared_app(LADDER, rungs, teams=["a", "b"], keys=str(keys), name="llm").run("/")
    try:
        yield {"url": f"http://127.0.0.1:{port}", "cluster": cluster}
    finally:
        serve.shutdown()
        ray.kill(arbiter, no_restart=True)


def _client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)


def test_each_key_gets_its_own_teams_rung(endpoint) -> None:
    a, b = _client(endpoint["url"], KEY_A), _client(endpoint["url"], KEY_B)
    wait_until(lambda: _chat(a)[0] == "h100", SLOW, 0.25, "a served on its h100 unit")
    wait_until(lambda: _chat(b)[0] == "a100", SLOW, 0.25, "b served on a100")
    for _ in range(5):  # both at once: the key picks the team, not the order
        # a on its unit, or on a100 when a busy machine's h100 replica was slow to take
        # the request (a hedge: the machine's speed, not the key); b never on a's unit.
        rung, text = _chat(a)
        assert rung in ("h100", "a100") and text == " 1 2 3 4 5", (rung, text)
        assert _chat(b) == ("a100", " 1 2 3 4 5")
    grants = {t: json.loads(_internal_kv_get(f"fleet/grants/{t}", namespace="ray_ladder"))
              for t in "ab"}
    assert grants["a"]["rungs"]["h100"]["held"] == 1
    assert grants["b"]["rungs"].get("h100", {}).get("held", 0) == 0
    # the JSON route of the same endpoint: the same team, the project's answer
    answer = httpx.post(endpoint["url"] + "/", json={"prompt": "1 2"},
                        headers={"Authorization": f"Bearer {KEY_B}"}, timeout=60)
    assert answer.headers["x-ladder-rung"] == "a100", answer.text


def test_a_stream_streams_through_the_front(endpoint) -> None:
    a = _client(endpoint["url"], KEY_A)
    wait_until(lambda: _chat(a)[0] == "h100", SLOW, 0.25, "a served on h100")
    stream = a.chat.completions.create(
        model="keys-it", messages=[{"role": "user", "content": "count from 10"}],
        max_tokens=8, stream=True)
    pieces = [c.choices[0].delta.content for c in stream if c.choices and
              c.choices[0].delta.content]
    assert "".join(pieces) == " 11 12 13 14 15 16 17 18"
    assert len(pieces) >= 8  # one chunk per piece, not one whole answer


def test_no_key_or_a_wrong_key_is_a_401_with_openais_error(endpoint) -> None:
    url = endpoint["url"]
    with pytest.raises(openai.AuthenticationError) as wrong:
        _chat(_client(url, WRONG))
    assert wrong.value.status_code == 401
    assert wrong.value.code == "invalid_api_key"
    assert WRONG not in str(wrong.value) and WRONG not in wrong.value.response.text
    body = {"model": "keys-it", "messages": [{"role": "user", "content": "hi"}]}
    bare = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
    assert bare.status_code == 401 and bare.headers["www-authenticate"] == "Bearer"
    assert bare.json()["error"]["code"] == "invalid_api_key"
    assert set(bare.json()["error"]) == {"message", "type", "param", "code"}
    models = httpx.get(url + "/v1/models", headers={"Authorization": "Basic eDp5"}, timeout=30)
    assert models.status_code == 401
    plain = httpx.post(url + "/", json={"prompt": "1"},
                       headers={"Authorization": f"Bearer {WRONG}"}, timeout=30)
    assert plain.status_code == 401 and plain.json()["code"] == "invalid_api_key"
    assert isinstance(plain.json()["error"], str) and WRONG not in plain.text


def _kv_dump() -> str:
    out = []
    for key in _internal_kv_list("", namespace="ray_ladder"):
        value = _internal_kv_get(key, namespace="ray_ladder") or b""
        out.append(key.decode(errors="replace") + "=" + value.decode(errors="replace"))
    return "\n".join(out)


def test_no_log_line_event_or_metric_holds_a_key(endpoint) -> None:
    # after the tests above sent every key (and a wrong one) many times
    _chat(_client(endpoint["url"], KEY_A))
    with pytest.raises(openai.AuthenticationError):
        _chat(_client(endpoint["url"], WRONG))
    secrets = [k.encode() for k in (KEY_A, KEY_B, WRONG)]
    logs = Path(endpoint["cluster"].head.logs_dir)
    files = [p for p in logs.rglob("*") if p.is_file()]
    text = {p: p.read_bytes() for p in files}
    # the logs read are this run's: the front's replica log with its access lines
    # ("POST / 401 4.9ms": Serve logs the route prefix, not the path)
    front = [p for p in files if "SharedFront" in p.name]
    assert front and all(any(b"POST / " + status in text[p] for p in front)
                         for status in (b"200", b"401")), sorted(p.name for p in files)[:40]
    assert [(p.name, s) for p, data in text.items() for s in secrets if s in data] == []
    kv = _kv_dump()
    assert "events/" in kv and "fleet/grants/a" in kv  # the events and grants are there
    assert not any(s.decode() in kv for s in secrets)
    node = ray._private.worker.global_worker.node
    metrics = httpx.get(f"http://{node.node_ip_address}:{node.metrics_export_port}/metrics",
                        timeout=30).text
    assert "ray_" in metrics
    assert not any(s.decode() in metrics for s in secrets)
