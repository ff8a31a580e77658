"""API keys of a shared endpoint, without Ray: the keys file, the KeyRing's check (every
digest compared, no early exit), re-reading a rotated file, the 401 bodies, passing a
request to a team's router and back, and `ray-ladder fleet hash-key`."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_ladder.cli import main
from ray_ladder.core.exceptions import ConfigError
from ray_ladder.core.keys import KeysFile, hash_key, load_keys
from ray_ladder.serve import forward, keys
from ray_ladder.serve.keys import KeyFileWatch, KeyRing, bearer_token, unauthorized

KEY_A = "sk-team-a-" + "0123456789abcdef"
KEY_B = "sk-team-b-" + "fedcba9876543210"


def keys_yaml(*pairs: tuple[str, str]) -> str:
    return "keys:\n" + "".join(f"  - {{team: {t}, sha256: {hash_key(k)}}}\n" for k, t in pairs)


def test_hash_key_is_the_sha256_of_the_stripped_key() -> None:
    assert hash_key(KEY_A) == hashlib.sha256(KEY_A.encode()).hexdigest()
    assert hash_key(f"  {KEY_A}\n") == hash_key(KEY_A)
    assert hash_key(KEY_A) != hash_key(KEY_B)


def test_a_keys_file_maps_hashes_to_teams(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(keys_yaml((KEY_A, "a"), (KEY_B, "b")))
    assert load_keys(path).teams == ["a", "b"]
    ring = KeyRing.from_file(path)
    assert ring.team_for(f"Bearer {KEY_A}") == "a"
    assert ring.team_for(f"bearer  {KEY_B} ") == "b"
    json_path = tmp_path / "keys.json"
    digest = hash_key(KEY_A).upper()
    json_path.write_text(f'{{"keys": [{{"team": "a", "sha256": "{digest}"}}]}}')
    assert KeyRing.from_file(json_path).team_for(f"Bearer {KEY_A}") == "a"  # hex any case


def entry(team: str, field: str, value: str) -> str:
    return f"  - {{team: {team}, {field}: {value}}}\n"


HEX_A = "a" * 64


@pytest.mark.parametrize(("text", "path", "fix"), [
    ("keys: []", "keys", "add at least one item"),
    ("keys:\n" + entry("a", "sha256", KEY_A), "keys[0].sha256", "hash-key"),
    ("keys:\n" + entry("a", "key", KEY_A), "keys[0].key", "hashes, never keys"),
    ("keys:\n" + entry("A", "sha256", HEX_A), "keys[0].team", "lowercase"),
    ("keyz:\n" + entry("a", "sha256", HEX_A), "keyz", "did you mean 'keys'"),
    ("keys:\n" + entry("a", "sha256", HEX_A) + entry("b", "sha256", HEX_A.upper()),
     "keys[1].sha256", "list each key once"),
])
def test_errors_name_the_field_and_fix_and_never_show_a_value(text: str, path: str,
                                                              fix: str) -> None:
    with pytest.raises(ConfigError) as err:
        KeysFile.from_yaml(text, "keys.yaml")
    message = str(err.value)
    assert path in [issue.path for issue in err.value.issues], message
    assert fix in message and "keys.yaml" in message
    assert KEY_A not in message and "a" * 64 not in message.lower()
    assert all(issue.value is None for issue in err.value.issues)


def test_unreadable_and_non_mapping_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read file"):
        KeyRing.from_file(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- a\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        KeyRing.from_file(tmp_path / "list.yaml")


@pytest.mark.parametrize(("header", "cause"), [
    (None, "missing"), ("", "missing"), ("   ", "missing"), ("Bearer", "malformed"),
    ("Bearer ", "malformed"), (f"Basic {KEY_A}", "malformed"), (KEY_A, "malformed"),
    (f"Bearer {KEY_A} extra", "malformed"), ("Bearer " + "x" * 5000, "malformed"),
    ("Bearer sk-not-a-known-key-000000", "unknown"), (f"Bearer {KEY_A}x", "unknown"),
    ("Bearer \udcff-surrogate-key-000000000", "unknown"),
])
def test_no_malformed_or_unknown_key_gets_a_team(header: str | None, cause: str) -> None:
    ring = KeyRing([(hash_key(KEY_A), "a")])
    check = ring.check(header)
    assert (check.team, check.cause) == (None, cause)


def test_every_digest_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    ring = KeyRing([(hash_key(f"sk-filler-key-{i:04d}-abcdef"), f"t{i}") for i in range(5)]
                   + [(hash_key(KEY_A), "a")])
    calls: list[tuple[bytes, bytes]] = []
    real = keys.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(keys.hmac, "compare_digest", counting)
    first = "Bearer sk-filler-key-0000-abcdef"
    for header, team in [(first, "t0"), (f"Bearer {KEY_A}", "a"), ("Bearer sk-nobody-x", None)]:
        calls.clear()
        assert ring.team_for(header) == team
        assert len(calls) == len(ring) == 6  # no early exit after a match or a miss
        assert all(isinstance(a, bytes) and len(b) == 32 for a, b in calls)


def test_no_repr_or_attribute_holds_a_key_or_a_digest() -> None:
    ring = KeyRing([(hash_key(KEY_A), "a"), (hash_key(KEY_B), "b")])
    ring.team_for(f"Bearer {KEY_A}")
    assert repr(ring) == "KeyRing(2 keys, teams=['a', 'b'])"
    held = repr(vars(ring))
    assert KEY_A not in held and hash_key(KEY_A) not in held  # digests as bytes only
    with pytest.raises(ValueError, match="SHA-256"):
        KeyRing([("abcd", "a")])


def test_from_env_reads_the_file_the_variable_names(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(keys_yaml((KEY_A, "a")))
    ring = KeyRing.from_env(environ={keys.ENV_VAR: str(path)})
    assert ring.team_for(f"Bearer {KEY_A}") == "a"
    with pytest.raises(ValueError, match=keys.ENV_VAR):
        KeyRing.from_env(environ={})


def test_a_rotated_file_is_reread_and_a_bad_one_keeps_the_last_ring(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(keys_yaml((KEY_A, "a")))
    now = [0.0]
    watch = KeyFileWatch(path, every_s=5.0, clock=lambda: now[0])
    assert watch.ring.team_for(f"Bearer {KEY_A}") == "a"
    path.write_text(keys_yaml((KEY_B, "b")))
    now[0] = 4.0
    assert watch.ring.team_for(f"Bearer {KEY_A}") == "a"  # not looked at yet
    now[0] = 10.0
    assert watch.ring.team_for(f"Bearer {KEY_B}") == "b"  # rotated: the new key only
    assert watch.ring.team_for(f"Bearer {KEY_A}") is None
    path.write_text(f"keys:\n  - {{team: b, sha256: {KEY_B}}}\n")  # a key where a hash goes
    now[0] = 20.0
    assert watch.ring.team_for(f"Bearer {KEY_B}") == "b"  # the last good ring
    assert watch.error is not None and "keys[0].sha256" in watch.error
    assert KEY_B not in caplog.text and KEY_B not in watch.error


def test_the_401_bodies() -> None:
    status, body, headers = unauthorized("missing", openai_route=True)
    assert status == 401 and headers == {"WWW-Authenticate": "Bearer"}
    assert body["error"]["code"] == "invalid_api_key" and body["error"]["param"] is None
    assert body["error"]["type"] == "invalid_request_error"
    assert "Authorization: Bearer" in body["error"]["message"]
    status, body, headers = unauthorized("unknown", openai_route=False)
    assert (status, body["code"], headers["WWW-Authenticate"]) == (401, "invalid_api_key",
                                                                    "Bearer")
    assert isinstance(body["error"], str)
    assert bearer_token(f"Bearer {KEY_A}") == (KEY_A, "ok")


def test_a_forwarded_request_drops_the_key_and_keeps_whole_and_streamed_answers() -> None:
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions",
             "query_string": b"x=1", "root_path": "",
             "headers": [(b"authorization", f"Bearer {KEY_A}".encode()),
                         (b"x-ladder-jurisdiction", b"eu")]}
    message = forward.message_of(Request(scope), "/v1/chat/completions", b'{"a": 1}')
    assert KEY_A.encode() not in repr(message).encode()
    seen: list[object] = []

    async def whole(request: Request) -> object:
        seen.append((request.url.path, request.headers.get("x-ladder-jurisdiction"),
                     request.headers.get("authorization"), await request.json()))
        return JSONResponse({"ok": True}, 201, headers={"X-Ladder-Rung": "h100"})

    async def streamed(request: Request) -> object:
        async def pieces():
            yield b"data: 1\n\n"
            yield b"data: 2\n\n"
        return StreamingResponse(pieces(), media_type="text/event-stream")

    async def run(respond) -> tuple[object, bytes]:
        response = await forward.response_of(forward.answer_parts(respond, message))
        if hasattr(response, "body_iterator"):
            return response, b"".join([c async for c in response.body_iterator])
        return response, response.body

    response, body = asyncio.run(run(whole))
    assert seen == [("/v1/chat/completions", "eu", None, {"a": 1})]
    assert (response.status_code, body, response.headers["x-ladder-rung"]) == (
        201, b'{"ok":true}', "h100")
    assert response.headers["content-length"] == str(len(body))
    response, body = asyncio.run(run(streamed))
    assert body == b"data: 1\n\ndata: 2\n\n"
    assert response.headers["content-type"].startswith("text/event-stream")


def test_hash_key_prints_the_entry_a_keys_file_takes() -> None:
    result = CliRunner().invoke(main, ["fleet", "hash-key", "--team", "a", "--name", "ci"],
                                input=KEY_A + "\n")
    assert result.exit_code == 0, result.output
    assert KEY_A not in result.output
    parsed = KeysFile.from_yaml("keys:\n" + result.output)
    assert (parsed.keys[0].team, parsed.keys[0].sha256, parsed.keys[0].name) == (
        "a", hash_key(KEY_A), "ci")
    short = CliRunner().invoke(main, ["fleet", "hash-key", "--team", "a"], input="sk-short")
    assert short.exit_code == 2 and "at least 20" in short.output
    bad = CliRunner().invoke(main, ["fleet", "hash-key", "--team", "A"], input=KEY_A)
    assert bad.exit_code == 2


def test_the_keys_modules_import_without_ray() -> None:
    code = ("import sys, ray_ladder.core.keys, ray_ladder.serve.keys, ray_ladder.serve.forward;"
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_the_examples_run() -> None:
    import doctest

    from ray_ladder.core import keys as core_keys

    for module in (core_keys, keys):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0 and result.attempted > 0, module
