"""Every error ray-ladder raises, in one place.

Hierarchy::

    LadderError                         root: catch this to catch everything ours
    ├── ConfigError (also ValueError)    a ladder file or dict is invalid
    ├── InvalidConstraintsError (also ValueError)
    │   │                                a request's constraints are malformed or unknown
    │   └── ConstraintNotAllowedError    a request asks for more than the operator's bound
    │                                    constraints allow (HTTP 403)
    ├── LadderExhaustedError             every eligible rung was tried or unobtainable;
    │   │                                carries every attempt, like a failover history
    │   └── BudgetExhaustedError         the fleet team's budget is spent and it rejects
    │                                    (HTTP 429): carries the team and the window end
    └── RungUnavailableError             raised BY a rung class: this rung cannot answer
                                         now (its backend is down); the ladder falls
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

#: Why an attempt did not answer, as data: ``timeout`` no replica took it in time,
#: ``rung_down`` the rung was marked down or went away under it, ``unobtainable`` the
#: rung could not be had, ``busy`` the ladder moved the work off a busy rung, ``failed``
#: an error (its class in ``Attempt.error``), ``shed`` the shed rung answered,
#: ``cache_miss`` the cache rung had no fresh answer, ``not_used`` the rung was skipped
#: (constraints, no text generation), ``no_rung`` nothing eligible was obtainable,
#: ``budget`` the fleet team's spent budget kept the work off a priced rung (queue,
#: reject), ``notice`` the rung's nodes got a preemption notice and an open stream moved
#: before the kill, ``other`` anything else.
AttemptCause = Literal["timeout", "rung_down", "unobtainable", "busy", "late", "failed",
                       "shed", "cache_miss", "not_used", "no_rung", "budget", "notice",
                       "other"]
ATTEMPT_CAUSES: tuple[str, ...] = ("timeout", "rung_down", "unobtainable", "busy", "late",
                                   "failed", "shed", "cache_miss", "not_used", "no_rung",
                                   "budget", "notice", "other")


class LadderError(Exception):
    """Root of every error raised by ray-ladder."""


@dataclass(frozen=True)
class ConfigIssue:
    """One problem found in a ladder definition.

    Attributes:
        path: Field path inside the document, e.g. ``rungs[2].quality``.
        message: What is wrong.
        value: The offending value (``None`` when the field is missing).
        fix: How to fix it.
    """

    path: str
    message: str
    value: object = None
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.path or '<root>'}: {self.message}"
        if self.value is not None:
            shown = repr(self.value)  # a whole Kubernetes manifest is not a useful value
            text += f" (got {shown if len(shown) <= 100 else shown[:97] + '...'})"
        if self.fix:
            text += f". Fix: {self.fix}"
        return text


class ConfigError(LadderError, ValueError):
    """A ladder definition is invalid.

    The message names the source (file or ``<string>``), each field path, the bad value
    and how to fix it.

    Example:
        >>> try:
        ...     Ladder.from_dict({"name": "x", "rungs": []})
        ... except ConfigError as err:
        ...     print(err.issues[0].path)
        rungs
    """

    def __init__(self, issues: Sequence[ConfigIssue], source: str = "<dict>",
                 what: str = "ladder") -> None:
        self.issues: list[ConfigIssue] = list(issues)
        self.source = source
        self.what = what
        lines = [f"invalid {what} in {source}:"] + [f"  - {issue}" for issue in self.issues]
        super().__init__("\n".join(lines))

    def __reduce__(self):  # args hold the message; rebuild from the issues instead
        return (self.__class__, (self.issues, self.source, self.what))


class InvalidConstraintsError(LadderError, ValueError):
    """Constraints that are malformed, or name a value no rung of the ladder knows.

    HTTP callers turn it into a 400 answer.
    """


class ConstraintNotAllowedError(InvalidConstraintsError):
    """A request or call asks for more than the constraints an operator bound allow.

    Bound constraints (an app's, a route's, a ``@ladder_task``'s, a Tune run's) can only
    be narrowed: another jurisdiction, a higher cost cap, a lower quality floor or a site
    outside the bound ones is refused, never silently widened. HTTP answers 403.

    Example:
        >>> Constraints(jurisdiction="eu").narrow(Constraints(jurisdiction="us"))
        ... # doctest: +SKIP
        ConstraintNotAllowedError: jurisdiction 'us' is not allowed: bound to 'eu'
    """


@dataclass(frozen=True)
class Attempt:
    """One try on one rung.

    Attributes:
        rung: Rung name (``None`` when no rung could even be chosen).
        reason: Why this attempt did not produce the answer (a sentence, for humans).
        time: Wall-clock time (``time.time()``) of the attempt.
        cause: Why, as data: one of :data:`AttemptCause`, set where ``reason`` is
            written (metrics, 503 codes and reports read it, never ``reason``).
        error: The error class name when an error failed the attempt (``NodeDiedError``).
    """

    rung: str | None
    reason: str
    time: float = 0.0
    cause: AttemptCause = "other"
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        """Return a JSON-ready dict."""
        out: dict[str, object] = {"rung": self.rung, "reason": self.reason,
                                  "time": self.time, "cause": self.cause}
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(eq=False)  # identity equality keeps the exception hashable, like every exception
class LadderExhaustedError(LadderError):
    """Every eligible rung was tried or is unobtainable.

    Attributes:
        ladder: Ladder name.
        attempts: Every attempt made, in order.
        retry_after_s: A hint for when to try again.

    Example:
        >>> err = LadderExhaustedError("gpu", [Attempt("h100", "node died")])
        >>> err.attempts[0].rung
        'h100'
    """

    ladder: str
    attempts: list[Attempt] = field(default_factory=list)
    retry_after_s: float = 5.0

    def __post_init__(self) -> None:
        super().__init__(str(self))

    def __str__(self) -> str:
        tried = "; ".join(f"{a.rung or '-'}: {a.reason}" for a in self.attempts) or "none"
        return f"ladder {self.ladder!r} exhausted after {len(self.attempts)} attempt(s): {tried}"

    def __reduce__(self):  # keep it picklable across Ray workers
        return (self.__class__, (self.ladder, self.attempts, self.retry_after_s))


@dataclass(eq=False)
class BudgetExhaustedError(LadderExhaustedError):
    """The fleet team's budget window is spent and its ``on_exhausted`` is ``reject``.

    A subclass of :class:`LadderExhaustedError` on purpose: for the caller it is the
    same "no rung for this work now, come back after ``retry_after_s``" (code that
    handles exhaustion keeps working), with the team and when its window ends. HTTP
    answers 429 (not 503) with ``Retry-After``.

    Attributes:
        team: The fleet team whose budget is spent.
        until: When its budget window ends (wall clock; ``None``: not known).

    Example:
        >>> err = BudgetExhaustedError("llm", [], 120.0, team="b", until=1.7e9)
        >>> isinstance(err, LadderExhaustedError), err.team, err.retry_after_s
        (True, 'b', 120.0)
    """

    team: str = ""
    until: float | None = None

    def __str__(self) -> str:
        return (f"team {self.team!r}'s budget is spent (reject): ladder {self.ladder!r} "
                f"takes its work again in {self.retry_after_s:.0f} s")

    def __reduce__(self):
        return (self.__class__, (self.ladder, self.attempts, self.retry_after_s, self.team,
                                 self.until))


class RungUnavailableError(LadderError):
    """Raised by a rung's own code when the rung cannot answer now (not a user error).

    The router and the task ladder treat it like a lost node: the rung is marked down and
    the work goes to the next eligible rung (a stream continues there). An external
    backend rung raises it when its server refuses connections or answers 5xx.

    Args:
        message: Why, for the request's attempt list and the router's log.
        retry_after_s: How long the rung itself asked to be left alone (a backend's
            ``Retry-After``): the router keeps the rung down at least that long, never
            longer than its longest cooldown (``serve/health.py``).

    Example:
        >>> raise RungUnavailableError("vLLM at http://10.0.0.5:8000 answered 503",
        ...                            retry_after_s=5.0)  # doctest: +SKIP
    """

    def __init__(self, message: str = "", *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def __reduce__(self):  # keeps retry_after_s across Ray's pickling
        return (_rung_unavailable, (type(self), str(self), self.retry_after_s))


def _rung_unavailable(cls: type[RungUnavailableError], message: str,
                      retry_after_s: float | None) -> RungUnavailableError:
    return cls(message, retry_after_s=retry_after_s)
