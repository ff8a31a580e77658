"""The exception hierarchy, messages, and pickling (errors cross Ray worker boundaries)."""

from __future__ import annotations

import copy
import pickle
from typing import get_args

import pytest

from ray_ladder import (
    Attempt,
    ConfigError,
    InvalidConstraintsError,
    LadderError,
    LadderExhaustedError,
)
from ray_ladder.core import exceptions as exceptions_module
from ray_ladder.core.exceptions import ATTEMPT_CAUSES, AttemptCause, ConfigIssue


def test_hierarchy() -> None:
    assert issubclass(ConfigError, LadderError) and issubclass(ConfigError, ValueError)
    assert issubclass(InvalidConstraintsError, LadderError)
    assert issubclass(InvalidConstraintsError, ValueError)
    assert issubclass(LadderExhaustedError, LadderError)
    assert not issubclass(LadderExhaustedError, ValueError)  # capacity, not bad input
    assert issubclass(LadderError, Exception)


def test_every_error_lives_in_one_module() -> None:
    for cls in (LadderError, ConfigError, InvalidConstraintsError, LadderExhaustedError,
                Attempt, ConfigIssue):
        assert cls.__module__ == "ray_ladder.core.exceptions"
    # The hierarchy is drawn in the module docstring (httpx style).
    doc = exceptions_module.__doc__ or ""
    for name in ("LadderError", "ConfigError", "InvalidConstraintsError",
                 "LadderExhaustedError"):
        assert name in doc


def test_config_issue_text() -> None:
    issue = ConfigIssue("rungs[0].quality", "too high", 1.5, "use a value <= 1")
    assert str(issue) == "rungs[0].quality: too high (got 1.5). Fix: use a value <= 1"
    assert str(ConfigIssue("", "empty")) == "<root>: empty"
    assert str(ConfigIssue("name", "Field required", None, "add it")) == (
        "name: Field required. Fix: add it")


def test_config_error_lists_every_issue_under_its_source() -> None:
    err = ConfigError([ConfigIssue("a", "bad", 1, "fix a"), ConfigIssue("b", "worse")],
                      "ladder.yaml")
    assert str(err) == (
        "invalid ladder in ladder.yaml:\n"
        "  - a: bad (got 1). Fix: fix a\n"
        "  - b: worse"
    )
    assert err.source == "ladder.yaml"
    assert [i.path for i in err.issues] == ["a", "b"]


def test_config_error_default_source() -> None:
    assert str(ConfigError([ConfigIssue("x", "y")])).startswith("invalid ladder in <dict>:")


def make_exhausted() -> LadderExhaustedError:
    return LadderExhaustedError(
        "gpu",
        [Attempt("h100", "node died", 10.0), Attempt("a100", "pending > 10s", 20.0),
         Attempt(None, "every eligible rung unobtainable", 21.0)],
        retry_after_s=30.0,
    )


def test_exhausted_error_carries_every_attempt() -> None:
    err = make_exhausted()
    assert err.ladder == "gpu"
    assert [(a.rung, a.reason) for a in err.attempts] == [
        ("h100", "node died"), ("a100", "pending > 10s"),
        (None, "every eligible rung unobtainable")]
    assert err.retry_after_s == 30.0
    assert str(err) == (
        "ladder 'gpu' exhausted after 3 attempt(s): h100: node died; a100: pending > 10s; "
        "-: every eligible rung unobtainable"
    )
    assert err.args == (str(err),)


def test_exhausted_error_defaults() -> None:
    err = LadderExhaustedError("gpu")
    assert err.attempts == [] and err.retry_after_s == 5.0
    assert str(err) == "ladder 'gpu' exhausted after 0 attempt(s): none"


def test_exhausted_error_pickles_round_trip() -> None:
    err = make_exhausted()
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(err, protocol=protocol))
        assert type(back) is LadderExhaustedError
        assert (back.ladder, back.attempts, back.retry_after_s) == (
            err.ladder, err.attempts, err.retry_after_s)
        assert str(back) == str(err) and back.args == err.args
    clone = copy.deepcopy(err)
    assert clone.attempts == err.attempts and clone.attempts is not err.attempts


def test_errors_raise_catch_and_hash_like_exceptions() -> None:
    err = make_exhausted()
    with pytest.raises(LadderError, match="exhausted after 3"):
        raise err
    assert {err: 1}[err] == 1  # usable in sets/dicts (loggers and tracebacks dedupe them)
    assert err != make_exhausted()  # identity, like every exception


def test_attempt_to_dict_and_pickle() -> None:
    a = Attempt("h100", "node died", 1.5)
    assert a.to_dict() == {"rung": "h100", "reason": "node died", "time": 1.5,
                           "cause": "other"}
    assert pickle.loads(pickle.dumps(a)) == a
    assert Attempt("cpu", "x").time == 0.0


def test_attempt_cause_and_error_are_data_next_to_the_sentence() -> None:
    a = Attempt("h100", "NodeDiedError on node 1234abcd", 2.0, cause="failed",
                error="NodeDiedError")
    assert a.to_dict() == {"rung": "h100", "reason": "NodeDiedError on node 1234abcd",
                           "time": 2.0, "cause": "failed", "error": "NodeDiedError"}
    assert pickle.loads(pickle.dumps(a)) == a
    assert "error" not in Attempt("a100", "x", cause="timeout").to_dict()  # no error: no key
    assert set(get_args(AttemptCause)) == set(ATTEMPT_CAUSES)


def test_config_error_pickles() -> None:
    err = ConfigError([ConfigIssue("a", "bad", 1, "fix")], "f.yaml")
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, ConfigError)
    assert (back.issues, back.source, str(back)) == (err.issues, err.source, str(err))
