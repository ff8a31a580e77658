"""Steady HTTP load on loopback, bounded in count and time, and a poller of the ladder state.

:class:`BackgroundLoad` is the part every demo story shares (the sender thread, the clock,
the record log, the ladder poller); :class:`LoadGenerator` is the digits story's sender.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx

R = TypeVar("R")
_L = TypeVar("_L", bound="BackgroundLoad[Any]")


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request the load generator sent and what came back.

    Attributes:
        t: Send time, seconds since the demo's start (``t0``).
        latency_s: Seconds until the answer (or the error).
        status: HTTP status, or ``None`` for a connection error or timeout.
        rung: The ``X-Ladder-Rung`` header (``None`` when absent).
        stale: ``X-Ladder-Stale: true`` (a cache answer).
        digit: The predicted digit, when the body had one.
        label: The true digit of the image sent.
        error: What went wrong, for failed requests.

    Example:
        >>> RequestRecord(1.0, 0.004, 200, "h100", False, 7, 7).correct
        True
    """

    t: float
    latency_s: float
    status: int | None
    rung: str | None
    stale: bool
    digit: int | None
    label: int
    error: str = ""

    @property
    def answered(self) -> bool:
        """A 2xx answer that carries a digit."""
        return self.status is not None and 200 <= self.status < 300 and self.digit is not None

    @property
    def shed(self) -> bool:
        """A 503: the ladder said "try later" (shed or exhausted), by design."""
        return self.status == 503

    @property
    def failed(self) -> bool:
        """Neither answered nor shed: another status, a bad body or a connection error."""
        return not self.answered and not self.shed

    @property
    def correct(self) -> bool:
        """Answered with the true digit."""
        return self.answered and self.digit == self.label


def parse_response(t: float, latency_s: float, label: int, status: int,
                   headers: Any, body: bytes) -> RequestRecord:
    """Turn one HTTP answer into a :class:`RequestRecord` (never raises).

    Example:
        >>> parse_response(0.0, 0.01, 3, 200, {"X-Ladder-Rung": "a100"}, b'{"digit": 3}').rung
        'a100'
    """
    rung = headers.get("X-Ladder-Rung") or headers.get("x-ladder-rung")
    stale = str(headers.get("X-Ladder-Stale") or headers.get("x-ladder-stale") or "")
    digit: int | None = None
    error = ""
    if 200 <= status < 300:
        try:
            value = json.loads(body)
            digit = int(value["digit"]) if isinstance(value, dict) else int(value)
        except (ValueError, TypeError, KeyError) as err:
            error = f"bad body: {err!r} {body[:80]!r}"
    elif status != 503:
        error = f"HTTP {status}: {body[:120].decode('utf-8', 'replace')}"
    return RequestRecord(t, latency_s, status, rung, stale.lower() == "true", digit, label,
                         error)


class LadderWatch:
    """Collects ``GET /-/ladder`` states: the latest one and every transition event seen.

    Events are deduplicated (the endpoint repeats its recent events); each is kept with
    the demo time it was first seen, a fallback when its own clock is unknown.

    Example:
        >>> w = LadderWatch()
        >>> w.ingest({"current": "a100", "events": [{"time": 1.0, "to": "a100"}]}, t=2.0)
        >>> len(w.events), w.events[0]["seen_t"]
        (1, 2.0)
    """

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}
        self.events: list[dict[str, Any]] = []
        self.downs: list[dict[str, Any]] = []
        self._seen: set[str] = set()
        self._down_now: set[str] = set()
        self.polls = 0
        self.errors = 0
        self.max_degraded_s = 0.0

    def ingest(self, state: dict[str, Any], t: float) -> None:
        """Record one polled state taken at demo time ``t``."""
        self.polls += 1
        self.state = state
        degraded = state.get("degraded_s")
        if isinstance(degraded, (int, float)):
            self.max_degraded_s = max(self.max_degraded_s, float(degraded))
        for event in _events_of(state):
            key = json.dumps(event, sort_keys=True, default=str)
            if key not in self._seen:
                self._seen.add(key)
                self.events.append({**event, "seen_t": t})
        # A rung the router marked down after a failed request: keep when and why.
        down_now = set()
        for rung in state.get("rungs") or []:
            if isinstance(rung, dict) and rung.get("down_reason"):
                down_now.add(str(rung.get("name")))
                if rung.get("name") not in self._down_now:
                    self.downs.append({"t": round(t, 3), "rung": rung.get("name"),
                                       "reason": rung["down_reason"]})
        self._down_now = down_now


def _events_of(state: dict[str, Any]) -> list[dict[str, Any]]:
    for key in ("events", "recent_events", "transitions"):
        value = state.get(key)
        if isinstance(value, list):
            return [e for e in value if isinstance(e, dict)]
    return []


class BackgroundLoad(Generic[R]):
    """Traffic sent from a background thread, logged as records of type ``R``.

    The generic half of every demo's load: the sender thread and its asyncio loop, the
    demo clock, the append-only record log, a bounded stop, and a poller of
    ``GET /-/ladder`` into a :class:`LadderWatch`. A subclass sends in :meth:`_send`.

    Args:
        url: Base URL of the Serve app, e.g. ``http://127.0.0.1:8123``.
        duration_s: Stop sending after this many seconds.
        timeout_s: Per-request timeout.
        max_connections: HTTP connections kept open at once.
        watch_interval_s: Seconds between ``GET /-/ladder`` polls (``None``: no polling).
        t0: The demo's start on ``clock`` (default: now).
        clock: Monotonic clock.
        transport: An httpx transport (tests pass ``httpx.MockTransport``).
    """

    def __init__(self, url: str, *, duration_s: float, timeout_s: float,
                 max_connections: int = 64, watch_interval_s: float | None = 0.5,
                 t0: float | None = None, clock: Callable[[], float] = time.monotonic,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if duration_s <= 0:
            raise ValueError(f"duration_s ({duration_s}) must be > 0")
        self.url = url.rstrip("/")
        self.duration_s = duration_s
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self.watch_interval_s = watch_interval_s
        self.clock = clock
        self.transport = transport
        self.t0 = clock() if t0 is None else t0
        self.watch = LadderWatch()
        self._records: list[R] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.crash: BaseException | None = None

    def now(self) -> float:
        """Seconds since ``t0``."""
        return self.clock() - self.t0

    def records(self) -> list[R]:
        """A snapshot of the records so far, in the order they were logged."""
        return list(self._records)

    @property
    def running(self) -> bool:
        """True while the sender thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self: _L) -> _L:
        """Start sending in a daemon thread."""
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__} already started")
        self._thread = threading.Thread(target=self._main, name="ladder-demo-load", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stop sending, let outstanding requests finish (bounded); True if the thread ended."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(self.timeout_s + 2.0 if timeout_s is None else timeout_s)
        return not self._thread.is_alive()

    # --- the sender thread -----------------------------------------------------------------

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as err:  # surfaced by the demo, which then fails loudly
            self.crash = err

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=self.max_connections,
                              max_keepalive_connections=self.max_connections)
        # trust_env=False: a proxy from the environment must never see loopback traffic.
        async with httpx.AsyncClient(base_url=self.url, timeout=self.timeout_s, limits=limits,
                                     trust_env=False, transport=self.transport) as client:
            watcher = (asyncio.create_task(self._watch(client))
                       if self.watch_interval_s else None)
            try:
                await self._send(client)
            finally:
                if watcher is not None:
                    watcher.cancel()
                    await asyncio.gather(watcher, return_exceptions=True)

    async def _send(self, client: httpx.AsyncClient) -> None:
        """Send the traffic until done or stopped (``self._stop``); log into ``_records``."""
        raise NotImplementedError

    async def _watch(self, client: httpx.AsyncClient) -> None:
        assert self.watch_interval_s is not None
        while not self._stop.is_set():
            try:
                resp = await client.get("/-/ladder", timeout=2.0)
                if resp.status_code == 200:
                    self.watch.ingest(resp.json(), self.now())
                else:
                    self.watch.errors += 1
            except (httpx.HTTPError, ValueError):
                self.watch.errors += 1
            await asyncio.sleep(self.watch_interval_s)


class LoadGenerator(BackgroundLoad[RequestRecord]):
    """Sends ``POST /`` at a steady rate from a background thread and records every answer.

    Open loop: request ``i`` leaves at ``start + i / rate_hz`` (later only when
    ``max_in_flight`` requests are already waiting). Bounded by ``max_requests`` and
    ``duration_s``; every request has a ``timeout_s``. Optionally polls ``GET /-/ladder``
    into a :class:`LadderWatch`.

    Args:
        url: Base URL of the Serve app, e.g. ``http://127.0.0.1:8123``.
        samples: ``(pixels, label)`` pairs, sent in order, cycling.
        rate_hz: Requests per second.
        duration_s: Stop sending after this many seconds.
        max_requests: Stop after this many (default ``rate_hz * duration_s``).
        timeout_s: Per-request timeout.
        max_in_flight: Most requests outstanding at once.
        watch_interval_s: Seconds between ``GET /-/ladder`` polls (``None``: no polling).
        t0: The demo's start on ``clock`` (default: now).
        clock: Monotonic clock.
        transport: An httpx transport (tests pass ``httpx.MockTransport``).

    Example:
        >>> gen = LoadGenerator("http://127.0.0.1:8123", samples, rate_hz=20)  # doctest: +SKIP
        >>> gen.start(); ...; gen.stop()  # doctest: +SKIP
        >>> len(gen.records())  # doctest: +SKIP
    """

    def __init__(self, url: str, samples: Sequence[tuple[list[float], int]], *,
                 rate_hz: float = 20.0, duration_s: float = 120.0,
                 max_requests: int | None = None, timeout_s: float = 5.0,
                 max_in_flight: int = 64, watch_interval_s: float | None = 0.5,
                 t0: float | None = None, clock: Callable[[], float] = time.monotonic,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        if not samples:
            raise ValueError("samples must not be empty")
        if rate_hz <= 0 or duration_s <= 0:
            raise ValueError(f"rate_hz ({rate_hz}) and duration_s ({duration_s}) must be > 0")
        super().__init__(url, duration_s=duration_s, timeout_s=timeout_s,
                         max_connections=max_in_flight, watch_interval_s=watch_interval_s,
                         t0=t0, clock=clock, transport=transport)
        self.samples = list(samples)
        self.rate_hz = rate_hz
        self.max_requests = (max_requests if max_requests is not None
                             else math.ceil(rate_hz * duration_s))
        self.max_in_flight = max_in_flight

    async def _send(self, client: httpx.AsyncClient) -> None:
        gate = asyncio.Semaphore(self.max_in_flight)
        tasks: set[asyncio.Task[None]] = set()
        start = self.clock()
        for i in range(self.max_requests):
            due = start + i / self.rate_hz
            while not self._stop.is_set() and self.clock() < due:
                await asyncio.sleep(min(0.05, max(0.0, due - self.clock())))
            if self._stop.is_set() or self.clock() - start >= self.duration_s:
                break
            await gate.acquire()
            task = asyncio.create_task(self._one(client, self.samples[i % len(self.samples)]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            task.add_done_callback(lambda _: gate.release())
        if tasks:
            await asyncio.wait(list(tasks), timeout=self.timeout_s + 1.0)
        for task in tasks:
            task.cancel()

    async def _one(self, client: httpx.AsyncClient, sample: tuple[list[float], int]) -> None:
        pixels, label = sample
        t = self.now()
        sent = self.clock()
        try:
            resp = await client.post("/", json={"pixels": pixels})
        except httpx.HTTPError as err:
            self._records.append(RequestRecord(t, self.clock() - sent, None, None, False, None,
                                               label, f"{type(err).__name__}: {err}"[:200]))
            return
        self._records.append(parse_response(t, self.clock() - sent, label, resp.status_code,
                                            resp.headers, resp.content))


def probe(url: str, pixels: list[float], timeout_s: float = 5.0) -> tuple[int, str | None]:
    """One synchronous ``POST /``: ``(status, X-Ladder-Rung)``; raises ``httpx.HTTPError``."""
    with httpx.Client(timeout=timeout_s, trust_env=False) as client:
        resp = client.post(url.rstrip("/") + "/", json={"pixels": pixels})
        return resp.status_code, resp.headers.get("X-Ladder-Rung")
