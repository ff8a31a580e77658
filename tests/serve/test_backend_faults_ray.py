"""Every way an external backend fails, met by the ladder as a new user configures it
(issue 43): ``primary -> fallback -> shed`` of ``OpenAIBackendRung``s on two
:class:`~ray_ladder.testing.faults.FaultyBackend` servers, as docs/llm.md and
docs/serve.md recommend (``health_check_period_s: 1``, a standby on the fallback,
``policy.targets`` ``ttft_s: 2`` and ``inter_token_s: 1``, ``timeout_s: 60``,
``connect_timeout_s: 2``), the official ``openai`` client in front (``max_retries=0``,
timeout 60 s).

Each fault of the primary is met by a single stream and a single whole answer, then by
10 of each at once. Invariants, for every request: answered, the exact count (nothing
lost or repeated across the move), ``finish_reason`` ``length``, and well inside the
client's timeout (a silent backend must not cost the client its whole 60 s: the bound is
half of it; how fast is bench/peers_llm.py's figure). A fault that is the request's own
(the backend's 400) is every client's 400, and the ladder does not move for it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ray_ladder.testing import LocalCluster, free_port, wait_until
from ray_ladder.testing.fault_rounds import Outcome, run_round
from ray_ladder.testing.faults import Fault, FaultyBackend

pytestmark = [pytest.mark.ray, pytest.mark.long, pytest.mark.timeout(900)]

NAME = "faults"
TOKENS = 30
#: Well inside the client's 60 s timeout: the request moved, it did not wait it out.
CLIENT_BOUND_S = 30.0
OPTIONS: dict[str, dict[str, Any]] = {
    "late_first_token": {"late_s": 8.0}, "trickle": {"trickle_s": 3.0},
    "status_429": {"retry_after_s": 4}, "status_503": {"retry_after_s": 4}}
#: The primary's Retry-After (longer than its first failure cooldown: 1 s).
RETRY_AFTER_S = 4
#: The app's longest failure cooldown (and the most a Retry-After holds a rung).
MAX_COOLDOWN_S = 5.0
#: Faults whose every request reaches the backend's log of POSTs (``refused`` never
#: connects; under ``silent`` a new replica's first look at ``GET /models`` hangs first).
LOGGED = frozenset({"late_first_token", "hang_mid", "trickle", "truncated", "cut",
                    "error_event", "malformed", "html_200", "empty", "status_500",
                    "status_503", "status_429", "status_401", "status_403", "status_404",
                    "status_408"})
#: Faults after which a new request avoids the primary at once (it failed or was
#: suspect); a late piece under an inter-token target moves its stream and leaves the
#: rung up (docs/llm.md, "Deadlines that move a request").
AVOIDED = LOGGED - {"hang_mid", "trickle"} | {"refused", "silent"}
FALLS: list[Fault] = ["refused", "silent", "late_first_token", "hang_mid", "trickle",
                      "truncated", "cut", "error_event", "malformed", "html_200", "empty",
                      "status_500", "status_503", "status_429", "status_401", "status_403",
                      "status_404", "status_408"]


@pytest.fixture(scope="module")
def stage() -> Iterator[dict[str, Any]]:
    from ray import serve

    from ray_ladder import Ladder
    from ray_ladder.serve import build_app
    from ray_ladder.serve.llm.backend import OpenAIBackendRung

    with FaultyBackend("primary", tokens_per_s=50) as primary, \
            FaultyBackend("fallback", tokens_per_s=50) as fallback:
        params = {"timeout_s": 60, "connect_timeout_s": 2}
        ladder = Ladder.from_dict({
            "name": NAME,
            "policy": {"targets": {"ttft_s": 2, "inter_token_s": 1},
                       "probe_interval_s": 0.25},
            "rungs": [
                {"name": "primary", "num_cpus": 0.1,
                 "params": {"base_url": primary.url, "model": "primary", **params}},
                {"name": "fallback", "num_cpus": 0.1, "standby_replicas": 1,
                 "params": {"base_url": fallback.url, "model": "fallback", **params}},
                {"name": "shed", "kind": "shed"}]})
        cluster = LocalCluster({}, log_to_driver=False).start()
        try:
            port = free_port()
            serve.start(http_options={"host": "127.0.0.1", "port": port},
                        proxy_location="HeadOnly")
            options = {"max_ongoing_requests": 64, "health_check_period_s": 1.0}
            serve.run(build_app(ladder, dict.fromkeys(["primary", "fallback"],
                                                      OpenAIBackendRung),
                                deployment_options=dict.fromkeys(["primary", "fallback"],
                                                                 options),
                                # A backend failing round after round: its cooldown
                                # doubles up to this (30 s by default), which the climb
                                # back before each round would wait.
                                max_cooldown_s=MAX_COOLDOWN_S),
                      name=NAME, route_prefix="/")
            url = f"http://127.0.0.1:{port}"
            yield {"url": url, "primary": primary, "fallback": fallback}
        finally:
            cluster.shutdown()


def _ladder(stage: dict[str, Any]) -> dict[str, Any]:
    return httpx.get(stage["url"] + "/-/ladder", timeout=10).json()


def _on_primary(stage: dict[str, Any]) -> None:
    """The primary healthy again and the ladder back on it (the climb is not timed)."""
    stage["primary"].set_fault("healthy")
    wait_until(lambda: _ladder(stage)["current"] == "primary", 120, 0.2,
               "the ladder back on the healthy primary")


def _round(stage: dict[str, Any], fault: Fault, streams: int, first: int) -> list[Outcome]:
    """The primary in ``fault``, ``streams`` streamed and as many whole requests at once."""
    _on_primary(stage)
    primary: FaultyBackend = stage["primary"]
    primary.set_fault(fault, **OPTIONS.get(fault, {}))
    primary.reset_log()
    return run_round(stage["url"] + "/v1", NAME, streams=streams, wholes=streams,
                     tokens=TOKENS, first=first, timeout_s=60.0)


def _show(outcomes: list[Outcome]) -> list[tuple[Any, ...]]:
    """The outcomes that are not an exact answer first (an assertion shows the start)."""
    ordered = sorted(outcomes, key=lambda o: o.exact and o.finish_reason == "length")
    return [(o.kind, o.error, o.status, round(o.seconds, 2), o.rungs, o.finish_reason,
             o.text[-40:], o.detail) for o in ordered]


def _falls_since(stage: dict[str, Any], since: float) -> list[str]:
    """The reasons of the ladder's falls off the primary since ``since`` (wall clock)."""
    return [e["reason"] for e in _ladder(stage)["events"]
            if e["from"] == "primary" and e["time"] >= since]


@pytest.mark.parametrize("fault", FALLS)
def test_a_backend_s_own_fault_is_a_fall_and_every_client_gets_the_exact_answer(
        stage: dict[str, Any], fault: Fault) -> None:
    primary: FaultyBackend = stage["primary"]
    for streams, first in ((1, 1000), (10, 100_000)):
        since = time.time()
        outcomes = _round(stage, fault, streams, first)
        assert all(o.exact and o.finish_reason == "length" for o in outcomes), \
            _show(outcomes)
        assert max(o.seconds for o in outcomes) < CLIENT_BOUND_S, _show(outcomes)
        # The fault was met (the first request went to the primary; the ones after it
        # may go straight below), and every request ended on the fallback (a mid-answer
        # fault keeps the primary's text before it).
        if fault in LOGGED:
            assert primary.requests >= 1, _show(outcomes)
        assert all(o.rungs and o.rungs[-1] == "fallback" for o in outcomes), _show(outcomes)
        assert all(set(o.rungs) <= {"primary", "fallback"} for o in outcomes)
        if fault in AVOIDED:  # the ladder fell off it at once, for this fault
            assert _falls_since(stage, since), _ladder(stage)["events"][-3:]
    _on_primary(stage)


def test_the_request_s_own_400_is_every_client_s_400_and_the_ladder_stays(
        stage: dict[str, Any]) -> None:
    since = time.time()
    outcomes = _round(stage, "status_400", 3, 5000)
    assert {(o.error, o.status) for o in outcomes} == {("BadRequestError", 400)}, \
        _show(outcomes)
    assert _ladder(stage)["current"] == "primary" and not _falls_since(stage, since)
    _on_primary(stage)


def test_retry_after_keeps_new_requests_off_the_primary_that_long(
        stage: dict[str, Any]) -> None:
    primary: FaultyBackend = stage["primary"]
    since = time.time()
    outcomes = _round(stage, "status_503", 1, 3000)
    assert all(o.exact for o in outcomes), _show(outcomes)
    refused_at = max(t for t, _, fault in primary.log if fault == "status_503")
    primary.set_fault("healthy")
    # The fall says why it waits (GET /-/ladder's events; `ray-ladder status` reads them).
    assert any("Retry-After" in r for r in _falls_since(stage, since)), \
        _ladder(stage)["events"][-3:]
    # New requests all along: none reaches the primary before its Retry-After.
    started = time.monotonic()
    while time.monotonic() - started < RETRY_AFTER_S + 1:
        run_round(stage["url"] + "/v1", NAME, streams=1, wholes=0, tokens=3, first=9000)
    back = [t for t, _, fault in primary.log if fault == "healthy"]
    assert not back or back[0] >= refused_at + RETRY_AFTER_S - 0.05, back[0] - refused_at
    _on_primary(stage)
