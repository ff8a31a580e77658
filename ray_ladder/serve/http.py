"""HTTP rules of the ladder app: headers to constraints, body limits, answer headers (pure)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ray_ladder.core.constraints import Constraints
from ray_ladder.core.exceptions import (
    BudgetExhaustedError,
    InvalidConstraintsError,
    LadderExhaustedError,
)
from ray_ladder.core.spec import Ladder
from ray_ladder.serve.walk import shed_rung

RUNG_HEADER = "X-Ladder-Rung"
DEGRADED_HEADER = "X-Ladder-Degraded-S"
STALE_HEADER = "X-Ladder-Stale"
SOURCE_HEADER = "X-Ladder-Source-Rung"
JURISDICTION_HEADER = "X-Ladder-Jurisdiction"
MAX_COST_HEADER = "X-Ladder-Max-Cost"
MIN_QUALITY_HEADER = "X-Ladder-Min-Quality"
SITES_HEADER = "X-Ladder-Sites"
#: Seconds from the request's arrival at the ladder's router to its answer (the time a
#: latency target holds; Envoy's ``x-envoy-upstream-service-time`` in spirit).
ELAPSED_HEADER = "X-Ladder-Elapsed-S"
#: The rung name reported when no rung answered (every eligible rung was gone).
EXHAUSTED = "exhausted"


class HttpError(Exception):
    """A request the app refuses before any rung runs (4xx).

    Attributes:
        status: HTTP status code (400, 405, 413).
        message: What is wrong, for the JSON body.
        headers: Extra response headers.
    """

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": message}``."""
        return {"error": self.message}


def make_constraints(
    ladder: Ladder,
    *,
    jurisdiction: str | None = None,
    max_cost_per_hour: float | None = None,
    min_quality: float | None = None,
    sites: tuple[str, ...] | list[str] | None = None,
) -> Constraints | None:
    """Validated constraints for one request, or ``None`` when none is set.

    Raises:
        InvalidConstraintsError: a malformed value, or one no rung of ``ladder`` knows.

    Example:
        >>> make_constraints(ladder, jurisdiction="eu")  # doctest: +SKIP
        Constraints(jurisdiction='eu', max_cost_per_hour=None, min_quality=None, sites=None)
    """
    if jurisdiction is None and max_cost_per_hour is None and min_quality is None \
            and sites is None:
        return None
    try:
        constraints = Constraints(
            jurisdiction=jurisdiction,
            max_cost_per_hour=None if max_cost_per_hour is None else float(max_cost_per_hour),
            min_quality=None if min_quality is None else float(min_quality),
            sites=None if sites is None else tuple(sites),
        )
    except (ValidationError, TypeError, ValueError) as err:
        raise InvalidConstraintsError(f"invalid constraints: {_first_error(err)}") from None
    ladder.check_constraints(constraints)
    return constraints


def _first_error(err: Exception) -> str:
    if isinstance(err, ValidationError):
        first = err.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return f"{where}: {first.get('msg')} (got {first.get('input')!r})"
    return str(err)


def _number(headers: Mapping[str, str], name: str) -> float | None:
    raw = headers.get(name.lower())
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        raise HttpError(400, f"{name} must be a number, got {raw!r}") from None
    if math.isnan(value):
        raise HttpError(400, f"{name} must be a number, got {raw!r}")
    return value


def constraints_from_headers(headers: Mapping[str, str], ladder: Ladder) -> Constraints | None:
    """Read ``X-Ladder-Jurisdiction``, ``-Max-Cost``, ``-Min-Quality`` and ``-Sites``.

    ``headers`` may be any mapping; names are matched case-insensitively. Raises
    :class:`HttpError` 400 for a malformed value or one the ladder does not know.

    Example:
        >>> constraints_from_headers({"x-ladder-min-quality": "0.5"}, ladder)  # doctest: +SKIP
        Constraints(jurisdiction=None, max_cost_per_hour=None, min_quality=0.5, sites=None)
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    jurisdiction = lowered.get(JURISDICTION_HEADER.lower())
    sites_raw = lowered.get(SITES_HEADER.lower())
    sites = None
    if sites_raw is not None:
        sites = tuple(s.strip() for s in sites_raw.split(",") if s.strip())
        if not sites:
            raise HttpError(400, f"{SITES_HEADER} names no site (got {sites_raw!r}): send "
                                 "a comma-separated list such as 'onprem,eu-cloud'")
    try:
        return make_constraints(
            ladder,
            jurisdiction=None if jurisdiction is None else jurisdiction.strip(),
            max_cost_per_hour=_number(lowered, MAX_COST_HEADER),
            min_quality=_number(lowered, MIN_QUALITY_HEADER),
            sites=sites,
        )
    except InvalidConstraintsError as err:
        raise HttpError(400, str(err)) from None


def check_length(content_length: str | None, max_body_bytes: int) -> None:
    """Refuse (413) a body whose declared ``Content-Length`` is over the limit."""
    if content_length is None:
        return
    try:
        declared = int(content_length)
    except ValueError:
        raise HttpError(400, f"Content-Length must be an integer, got {content_length!r}"
                        ) from None
    if declared > max_body_bytes:
        raise HttpError(413, f"body of {declared} bytes is over the limit of "
                             f"{max_body_bytes} bytes")


def parse_body(body: bytes, max_body_bytes: int) -> Any:
    """The JSON payload of a request body: 413 over the limit, 400 when not JSON.

    Example:
        >>> parse_body(b'{"prompt": "hi"}', 1000)
        {'prompt': 'hi'}
    """
    if len(body) > max_body_bytes:
        raise HttpError(413, f"body of {len(body)} bytes is over the limit of "
                             f"{max_body_bytes} bytes")
    if not body.strip():
        raise HttpError(400, "empty body: send a JSON document")
    try:
        return json.loads(body)
    except UnicodeDecodeError:
        raise HttpError(400, "body is not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise HttpError(400, f"malformed JSON: {err.msg} at line {err.lineno}, "
                             f"column {err.colno}") from None
    except RecursionError:
        raise HttpError(400, "malformed JSON: nested too deeply") from None


def answer_headers(rung: str, degraded_s: float, *, stale: bool = False,
                   source_rung: str | None = None) -> dict[str, str]:
    """Headers of a 200 answer: the rung, the degraded time and, for cache answers, stale.

    Example:
        >>> answer_headers("a100", 12.5)
        {'X-Ladder-Rung': 'a100', 'X-Ladder-Degraded-S': '12.500'}
    """
    headers = {RUNG_HEADER: rung, DEGRADED_HEADER: f"{degraded_s:.3f}"}
    if stale:
        headers[STALE_HEADER] = "true"
    if source_rung is not None:
        headers[SOURCE_HEADER] = source_rung
    return headers


def retry_after(seconds: float) -> str:
    """``Retry-After`` in HTTP's format: whole seconds, rounded up, at least 1.

    Example:
        >>> retry_after(7.5), retry_after(0.2)
        ('8', '1')
    """
    return str(max(1, math.ceil(seconds)))


def refused_by(err: LadderExhaustedError) -> str:
    """The rung a refused request reports: the shed rung's name when it answered (its
    attempt's cause), else ``exhausted``. Both routes report the same."""
    return shed_rung(err.attempts) or EXHAUSTED


def unavailable_headers(err: LadderExhaustedError, degraded_s: float) -> dict[str, str]:
    """Headers of a 503 (both routes): ``Retry-After``, the rung, the degraded time."""
    return {**failed_headers(err.retry_after_s, degraded_s), RUNG_HEADER: refused_by(err)}


def failed_headers(retry_after_s: float, degraded_s: float | None = None) -> dict[str, str]:
    """Headers of a 503 no refusal of the walk carries (a whole OpenAI answer whose rungs
    all went after its first piece; a team's ladder app that did not answer):
    ``Retry-After``, the rung ``exhausted`` and, when known, the degraded time.

    Example:
        >>> failed_headers(0.5)
        {'Retry-After': '1', 'X-Ladder-Rung': 'exhausted'}
    """
    headers = {"Retry-After": retry_after(retry_after_s), RUNG_HEADER: EXHAUSTED}
    if degraded_s is not None:
        headers[DEGRADED_HEADER] = f"{degraded_s:.3f}"
    return headers


def refusal_status(err: LadderExhaustedError) -> int:
    """The status of a refusal: 429 when the team's spent budget rejects the request
    (:class:`~ray_ladder.BudgetExhaustedError`), else 503 (shed or exhausted).

    Example:
        >>> refusal_status(BudgetExhaustedError("gpu", [], 60.0, team="b"))
        429
    """
    return 429 if isinstance(err, BudgetExhaustedError) else 503


def unavailable(err: LadderExhaustedError,
                degraded_s: float) -> tuple[dict[str, Any], dict[str, str]]:
    """Body and headers of the JSON route's 503 (shed rung or exhausted ladder) or 429
    (a spent budget: the body adds ``team``; ``Retry-After`` is the window's end).

    Example:
        >>> from ray_ladder.core.exceptions import Attempt
        >>> err = LadderExhaustedError("gpu", [Attempt("shed", "no capacity", cause="shed")],
        ...                            7.5)
        >>> body, headers = unavailable(err, 1.0)
        >>> body["rung"], headers["Retry-After"], headers["X-Ladder-Rung"]
        ('shed', '8', 'shed')
    """
    body = {
        "error": str(err),
        "ladder": err.ladder,
        "rung": refused_by(err),
        "retry_after_s": err.retry_after_s,
        "attempts": [a.to_dict() for a in err.attempts],
    }
    if isinstance(err, BudgetExhaustedError):
        body["team"] = err.team
    return body, unavailable_headers(err, degraded_s)
