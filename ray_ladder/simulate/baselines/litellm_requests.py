"""What LiteLLM's requests pay for a dead deployment: retries, backoff, cooldown rules.

LiteLLM 1.82.6's router, read from its source (``litellm/router.py``,
``litellm/router_utils/cooldown_handlers.py``, ``litellm/constants.py``):

* A request goes to the first deployment of the ``fallbacks`` chain that is not in
  cooldown. On a failure it retries that deployment ``num_retries`` times (``Router``'s
  default: ``openai.DEFAULT_MAX_RETRIES``, 2), sleeping after every failed try,
  the last too (``async_function_with_retries``; ``_time_to_sleep_before_retry`` ->
  ``_calculate_retry_after``: ``INITIAL_RETRY_DELAY`` 0.5 s x 2^k, at most
  ``MAX_RETRY_DELAY`` 8 s, plus up to ``JITTER`` 0.75 s), then falls back.
* A dead deployment is cooled down (skipped for ``cooldown_time``, 5 s) only when
  ``_is_cooldown_required`` and ``_should_cooldown_deployment`` say so.
  ``_is_cooldown_required`` refuses outright for an ``APIConnectionError`` (a refused
  port: ``ignored_strings = ["APIConnectionError"]``), whatever ``allowed_fails`` says.
  A timeout (``litellm.Timeout``, 408: a node that is gone) is cooled by the default
  rules of a one-deployment model group only when 100% of at least
  ``SINGLE_DEPLOYMENT_TRAFFIC_FAILURE_THRESHOLD`` (1,000) calls in the current minute
  failed; with ``allowed_fails`` set, once more than ``allowed_fails`` calls failed
  within ``cooldown_time``. Once cooled, the next failed try finds no healthy
  deployment and falls back at once (``should_retry_this_error``).

So each dead deployment above the one that answers costs a request what
:func:`dead_try` says; :class:`RequestMeter` adds it up over a replay.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

INITIAL_RETRY_DELAY_S = 0.5
"""``INITIAL_RETRY_DELAY`` (``litellm/constants.py``): the first backoff sleep."""
MAX_RETRY_DELAY_S = 8.0
"""``MAX_RETRY_DELAY``: the longest backoff sleep."""
JITTER_S = 0.75
"""``JITTER``: up to this much is added to each sleep (uniform: 0.375 s on average)."""
NUM_RETRIES = 2
"""``Router(num_retries=None)`` -> ``openai.DEFAULT_MAX_RETRIES``, 2."""
FAILURES_PER_MINUTE = 1000
"""``SINGLE_DEPLOYMENT_TRAFFIC_FAILURE_THRESHOLD``: failed calls in a minute (all of them
failing) before the default rules cool a one-deployment model group down."""


def backoff_s(tries: int, num_retries: int) -> float:
    """Mean seconds slept after the first ``tries`` failed tries of one request.

    Example:
        >>> backoff_s(3, 2)  # 0.5 + 1 + 2, plus 3 x 0.375 of jitter
        4.625
    """
    if num_retries <= 0:
        return 0.0
    return sum(min(INITIAL_RETRY_DELAY_S * 2.0 ** k, MAX_RETRY_DELAY_S) + JITTER_S / 2
               for k in range(min(tries, num_retries + 1)))


@dataclass(frozen=True)
class DeadTry:
    """What one dead deployment costs the requests that try it first.

    Attributes:
        share: Share of requests that try it while it is dead.
        seconds: Mean seconds it adds to each request that tries it.
        first_s: Seconds it adds to the first request after it died (the fall's gap).
        rule: Why it is or is not cooled down, as data: ``connection_error`` (never:
            ``APIConnectionError`` is skipped), ``below_threshold`` (a timeout with
            fewer than 1,000 failed calls a minute), ``threshold`` (at least 1,000: cooled
            for the rest of each minute), ``allowed_fails`` (cooled once more than that
            many failed in ``cooldown_time``), ``forced`` (``cooldown_dead``, a what-if).
    """

    share: float
    seconds: float
    first_s: float
    rule: str

    def to_dict(self) -> dict[str, Any]:
        """The figures as a JSON object."""
        return asdict(self)


def _cooled_window(try_s: float, num_retries: int, allowed: int) -> tuple[int, float, float]:
    """Requests that try a cooled-down deployment in one cooldown window, their seconds
    in all, and the first one's: failed tries are paid until more than ``allowed``
    failed; the try that cools it falls back without a sleep."""
    hits, total, first, failed = 0, 0.0, 0.0, 0
    while failed <= allowed:
        hits += 1
        seconds = 0.0
        for k in range(num_retries + 1):
            failed += 1
            seconds += try_s
            if failed > allowed:
                break
            if num_retries > 0:
                seconds += min(INITIAL_RETRY_DELAY_S * 2.0 ** k, MAX_RETRY_DELAY_S) + JITTER_S / 2
        total += seconds
        first = first or seconds
    return hits, total, first


def dead_try(*, gone: bool, try_s: float, rate: float, num_retries: int, cooldown_s: float,
             allowed_fails: int | None, forced: bool) -> DeadTry:
    """The cost of one dead deployment to LiteLLM's requests, by its rules (module doc).

    Args:
        gone: Its node is gone (each try times out: ``litellm.Timeout``); else its port
            refuses (``APIConnectionError``: a deployment still starting).
        try_s: Seconds one failed try takes.
        rate: Requests per second.
        num_retries: Retries of a deployment before the fallback.
        cooldown_s: ``cooldown_time``.
        allowed_fails: ``Router(allowed_fails=...)``, ``None`` when not set.
        forced: Cool it down as if the rules allowed (``cooldown_dead``).

    Example:
        >>> dead_try(gone=True, try_s=5.0, rate=1.0, num_retries=2, cooldown_s=5.0,
        ...          allowed_fails=None, forced=False)
        DeadTry(share=1.0, seconds=19.625, first_s=19.625, rule='below_threshold')
    """
    full = (num_retries + 1) * try_s + backoff_s(num_retries + 1, num_retries)
    if not forced and (not gone or allowed_fails is None):
        rule = "connection_error" if not gone else "below_threshold"
        tries_per_minute = 60.0 * rate * (num_retries + 1)
        if rule == "connection_error" or tries_per_minute < FAILURES_PER_MINUTE:
            return DeadTry(1.0, full, full, rule)
        # At least 1,000 failed calls a minute: uncooled until they are reached, then one
        # try per cooldown window for the rest of the minute (the count is per minute).
        uncooled = FAILURES_PER_MINUTE / tries_per_minute
        per_window = min(1.0, 1.0 / (rate * cooldown_s)) if cooldown_s > 0 else 1.0
        share = uncooled + (1 - uncooled) * per_window
        seconds = (uncooled * full + (1 - uncooled) * per_window * try_s) / share
        return DeadTry(share, seconds, full, "threshold")
    hits, total, first = _cooled_window(try_s, num_retries, 0 if forced else allowed_fails or 0)
    window_requests = max(rate * cooldown_s, float(hits))
    return DeadTry(min(1.0, hits / window_requests), total / hits, first,
                   "forced" if forced else "allowed_fails")


class RequestMeter:
    """Time spent with ``gone`` / ``starting`` dead deployments above the one that
    answers (or above nothing), turned into request figures by :meth:`figures`."""

    def __init__(self, gone: DeadTry, starting: DeadTry, rate: float) -> None:
        self.gone, self.starting, self.rate = gone, starting, rate
        self._since, self._state = 0.0, (0, 0)
        self._ticks: dict[tuple[int, int], float] = {}

    def mark(self, t: float, gone: int, starting: int) -> None:
        """From tick ``t`` on, this many deployments above the answering one are dead."""
        if (gone, starting) != self._state:
            self._ticks[self._state] = self._ticks.get(self._state, 0.0) + t - self._since
            self._since, self._state = t, (gone, starting)

    def figures(self, ticks: int, tick_s: float) -> dict[str, Any]:
        """The request figures over ``ticks`` ticks (JSON-ready).

        ``dead_first_share``: share of requests that try a dead deployment before one
        that answers; ``dead_first_per_hour``: how many an hour, at ``requests_per_s``;
        ``added_s_per_dead_first``: seconds each of them loses on average;
        ``added_hours``: all the latency added, in request-hours.
        """
        self.mark(float(ticks), -1, -1)  # close the last stretch
        hit = added = 0.0  # tick-weighted share of requests, and seconds per request
        for (g, s), span in self._ticks.items():
            share = max(self.gone.share if g > 0 else 0.0, self.starting.share if s > 0 else 0.0)
            hit += span * share
            added += span * (g * self.gone.share * self.gone.seconds
                             + s * self.starting.share * self.starting.seconds)
        share = hit / ticks if ticks else 0.0
        return {
            "requests_per_s": self.rate,
            "dead_first_share": share,
            "dead_first_per_hour": share * self.rate * 3600.0,
            "added_s_per_dead_first": added / hit if hit > 0 else 0.0,
            "added_hours": added * tick_s * self.rate / 3600.0,
            "gone": self.gone.to_dict(),
            "starting": self.starting.to_dict(),
        }
