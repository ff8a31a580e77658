"""What each rung's queue and replicas look like to the router, and whether a new request
would meet its target there (pure: counts and a clock in, estimates out).

The router counts the requests it has in flight on each rung (it is the rungs' only
caller) and times each answer from the moment a replica took it, so a rung's *service
time* leaves its queue out. A new request on a rung with ``slots`` places (RUNNING
replicas x ``max_ongoing_requests``) and ``in_flight`` requests on it has
``ahead = max(0, in_flight - slots + 1)`` requests to wait for: each costs the wait per
place the router measured for requests that queued there (Serve's handle polls a full
replica with a backoff of up to 0.5 s, so a queue drains slower than its service time
says; a request that left the queue untaken counts with the wait it saw, a lower bound),
or ``service / slots`` before any queued; then its own service time
(:func:`expected_s`). With no answer timed yet a rung is expected to
meet any target while it has a free place, and to miss it otherwise.

A rung whose service time alone breaks the ladder's target for ``slow_after_s`` without
a break is *slow* (:class:`SlowState`): the book tells the router (``on_slow``), whose
selectors count it unobtainable until its retry (the ladder falls at once, cause
``slow``). The retry delay starts at ``slow_after_s`` and doubles while the rung stays
slow (at most 8x); at the retry its estimate is forgotten, the selectors climb back to
it with their hysteresis, and its first answers decide (one over target makes it slow
again at once).

An estimate no answer refreshes is *stale*: a rung with nothing in flight whose last
answer is ``slow_after_s`` old. A request that spent part of its target before the walk
can spill past a rung whose estimate sits just under the target, which is then neither
sent anything nor found slow: its estimate would hold for good. So a stale rung is
expected at once (as if never timed) for the one request sent there, and that request's
answer replaces the old estimate (:meth:`LoadBook.expected_s`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ray_ladder.core.backoff import Backoff
from ray_ladder.serve.slow import SlowState

#: Weight of the newest answer in a rung's service-time average.
ALPHA = 0.3
#: Weight of the newest sample in a time's mean deviation, and the deviations a time gets
#: on top of its average where a request must not be late (RFC 6298's timer: 4).
BETA = 0.25
DEV_K = 4.0
#: The longest retry delay of a slow rung, in multiples of ``slow_after_s``.
SLOW_RETRY_CAP = 8.0
#: Spill is demand once it lasted through both halves of this window (seconds).
SPILL_WINDOW_S = 10.0


def spill_replicas(spill_times: list[float], now: float, service_s: float | None,
                   per_replica: int, window_s: float = SPILL_WINDOW_S) -> int:
    """Replicas more a rung needs to take the requests that spilled past it: the spill
    rate over the last ``window_s`` x its service time / places per replica, rounded up;
    0 unless requests spilled in both halves of the window (a burst's first seconds are
    not demand yet).

    Example:
        >>> spill_replicas([float(t) for t in range(10)], 10.0, 0.4, 2)  # 1/s x 0.4 s / 2
        1
        >>> spill_replicas([8.0, 9.0, 9.5], 10.0, 0.4, 2)  # only the last half: not yet
        0
    """
    recent = [t for t in spill_times if now - window_s <= t <= now]
    half = now - window_s / 2
    if service_s is None or not any(t < half for t in recent) \
            or not any(t >= half for t in recent):
        return 0
    return math.ceil(len(recent) / window_s * service_s / max(1, per_replica))


def expected_s(in_flight: int, slots: int, service_s: float | None,
               first_s: float | None = None, per_place_s: float | None = None) -> float:
    """Seconds until a new request's answer (``first_s`` given: its first piece) on a
    rung with ``slots`` places and ``in_flight`` requests on it (``per_place_s``: the
    measured wait per request ahead); ``math.inf`` when it has no place, or no estimate
    and no free place.

    Example:
        >>> expected_s(0, 2, 0.2)            # a free place: its own service time
        0.2
        >>> round(expected_s(5, 2, 0.2), 3)  # 4 ahead of it on 2 places: 2 rounds first
        0.6
        >>> expected_s(1, 2, None), expected_s(2, 2, None)
        (0.0, inf)
    """
    if slots <= 0:
        return math.inf
    ahead = max(0, in_flight - slots + 1)
    own = first_s if first_s is not None else service_s
    if service_s is None:
        return 0.0 if ahead == 0 else math.inf
    per_place = per_place_s if per_place_s is not None else service_s / slots
    return ahead * per_place + (own if own is not None else service_s)


@dataclass(slots=True)
class RungLoad:
    """One rung's load as the router sees it.

    Attributes:
        in_flight: Requests (and streams) the router has on it now.
        service_s: Average seconds from a replica taking a request to its end.
        first_s: Average seconds from a replica taking a stream to its first piece.
        per_place_s: Average wait for a replica per request ahead, of requests that
            queued (``None``: none queued yet).
        take_s: Average seconds from sending a request that had a free place to a
            replica taking it (Serve's routing: part of every answer's time).
        slots: Its places at the last estimate (RUNNING replicas x max ongoing).
        slow: Its slow state.
    """

    in_flight: int = 0
    service_s: float | None = None
    first_s: float | None = None
    per_place_s: float | None = None
    take_s: float | None = None
    slots: int = 0
    #: Mean deviations of ``take_s`` and of ``first_s`` / ``service_s`` samples.
    take_dev_s: float = 0.0
    first_dev_s: float = 0.0
    service_dev_s: float = 0.0
    slow: SlowState = field(default_factory=SlowState)
    #: The retry of the current slow spell has begun (its old estimate is forgotten).
    retrying: bool = False
    #: When requests spilled past it (the last ``SPILL_WINDOW_S``).
    spills: deque[float] = field(default_factory=deque)
    #: When its last answer (or first piece) was timed; ``None``: never.
    timed_at: float | None = None
    #: A request re-times its stale estimate: the next time replaces the average.
    retiming: bool = False


def _average(old: float | None, sample: float) -> float:
    return sample if old is None else old + ALPHA * (sample - old)


def _deviation(dev: float, mean: float | None, sample: float) -> float:
    """The mean deviation after ``sample`` (taken before the mean moves to it)."""
    return 0.0 if mean is None else dev + BETA * (abs(sample - mean) - dev)


def _served(load: RungLoad, service_s: float) -> None:
    """One service time, into the rung's average and its mean deviation (it replaces a
    stale average being re-timed)."""
    load.service_dev_s = _deviation(load.service_dev_s, load.service_s, service_s)
    load.service_s = service_s if load.retiming else _average(load.service_s, service_s)


class LoadBook:
    """Every compute rung's :class:`RungLoad`, kept by the router's calls.

    Args:
        slots_per_replica: Rung -> ``max_ongoing_requests`` of its deployment.
        answer_s: The ladder's whole-answer target (``None``: none), the bar of ``slow``.
        ttft_s: The ladder's first-token target (``None``: none), the bar of ``slow``.
        slow_after_s: How long a rung breaks the target before it is slow.
        on_slow: Called with ``(rung, reason, retry_at, now)`` when a rung is found slow.

    Example:
        >>> book = LoadBook({"h100": 2}, answer_s=1.0, ttft_s=None, slow_after_s=10.0)
        >>> book.sent("h100"), book.answered("h100", 0.2, now=0.0)
        (0, None)
        >>> book.expected_s("h100", replicas=1, now=0.0, kind="answer")
        0.2
    """

    def __init__(self, slots_per_replica: dict[str, int], *, answer_s: float | None,
                 ttft_s: float | None, slow_after_s: float,
                 on_slow: Callable[[str, str, float, float], None] | None = None) -> None:
        self._slots = dict(slots_per_replica)
        self.rungs = {name: RungLoad() for name in slots_per_replica}
        self._targets = {"answer": answer_s, "first": ttft_s}
        self.slow_after_s = slow_after_s
        self._on_slow = on_slow
        self._backoff = Backoff(base_s=slow_after_s, cap_s=SLOW_RETRY_CAP * slow_after_s)

    def sent(self, rung: str) -> int:
        """A request (or stream) went to ``rung``; returns how many it has ahead."""
        load = self.rungs[rung]
        ahead = max(0, load.in_flight - load.slots + 1) if load.slots else 0
        load.in_flight += 1
        return ahead

    def taken(self, rung: str, wait_s: float, ahead: int) -> None:
        """A replica of ``rung`` took a request ``wait_s`` after it was sent with
        ``ahead`` requests ahead of it (:meth:`sent`)."""
        load = self.rungs[rung]
        if ahead > 0:
            load.per_place_s = _average(load.per_place_s, wait_s / ahead)
        else:
            load.take_dev_s = _deviation(load.take_dev_s, load.take_s, wait_s)
            load.take_s = _average(load.take_s, wait_s)

    def left(self, rung: str, wait_s: float, ahead: int) -> None:
        """A request sent with ``ahead`` ahead of it (:meth:`sent`) left ``rung``'s queue
        untaken after ``wait_s``: it counts with ``wait_s / ahead`` per place, a lower
        bound (else only the requests that got a place in time would be heard).

        Example:
            >>> book = LoadBook({"h100": 2}, answer_s=1.0, ttft_s=None, slow_after_s=10.0)
            >>> book.taken("h100", 0.2, ahead=2)
            >>> book.left("h100", 0.4, ahead=2)
            >>> round(book.rungs["h100"].per_place_s, 3)
            0.13
        """
        if ahead > 0:
            load = self.rungs[rung]
            load.per_place_s = _average(load.per_place_s, wait_s / ahead)

    def ended(self, rung: str) -> None:
        """A request (or stream) on ``rung`` ended, answered or not."""
        load = self.rungs[rung]
        load.in_flight = max(0, load.in_flight - 1)

    def answered(self, rung: str, service_s: float, now: float) -> None:
        """A replica of ``rung`` answered ``service_s`` seconds after it took a request."""
        load = self.rungs[rung]
        _served(load, service_s)
        load.timed_at, load.retiming = now, False
        self._judge(rung, load, self._targets["answer"], service_s, now)

    def first_piece(self, rung: str, first_s: float, now: float) -> None:
        """A replica of ``rung`` sent a stream's first piece ``first_s`` after taking it."""
        load = self.rungs[rung]
        load.first_dev_s = _deviation(load.first_dev_s, load.first_s, first_s)
        load.first_s = first_s if load.retiming else _average(load.first_s, first_s)
        load.timed_at, load.retiming = now, False
        self._judge(rung, load, self._targets["first"], first_s, now)

    def stream_ended(self, rung: str, service_s: float) -> None:
        """A stream on ``rung`` ended ``service_s`` after a replica took it (the time it
        held its place, which the queue's estimate needs)."""
        _served(self.rungs[rung], service_s)

    def _judge(self, rung: str, load: RungLoad, target: float | None, sample: float,
               now: float) -> None:
        if target is None:
            return
        self._note(rung, load, load.slow.answered(sample, target, now, self.slow_after_s,
                                                  self._backoff), now)

    def _review(self, rung: str, load: RungLoad, kind: str, now: float) -> None:
        """Between answers: a rung whose estimate (routing and service, the queue left
        out) stays over the target is slow too, however it got there: a stall that made
        Serve slow to take requests is forgotten only at a retry."""
        target = self._targets[kind]
        if target is None:
            return
        own = load.first_s if kind == "first" else load.service_s
        estimate = None if own is None and load.take_s is None \
            else (own or 0.0) + (load.take_s or 0.0)
        if estimate is not None and estimate > target and load.slow.breach_since is None \
                and load.slow.slow_since is None:
            load.slow = replace(load.slow, breach_since=now)
        self._note(rung, load, load.slow.reviewed(estimate, target, now,
                                                  self.slow_after_s, self._backoff), now)

    def _note(self, rung: str, load: RungLoad, after: SlowState, now: float) -> None:
        before = load.slow
        load.slow = after
        if after.slow_since is not None and after.slow_since != before.slow_since:
            load.retrying = False
            if self._on_slow is not None and after.reason is not None:
                self._on_slow(rung, after.reason, after.retry_at, now)

    def _retry_if_due(self, load: RungLoad, now: float) -> None:
        """A slow rung past its retry delay: forget its estimate (its answers decide)."""
        if load.slow.on_trial(now) and not load.retrying:
            load.retrying = True
            load.service_s = load.first_s = load.per_place_s = load.take_s = None
            load.take_dev_s = load.first_dev_s = load.service_dev_s = 0.0

    def expected_s(self, rung: str, replicas: int, now: float, kind: str) -> float:
        """Seconds until a new request's answer (``kind`` ``answer``) or first piece
        (``first``) on ``rung`` with ``replicas`` RUNNING replicas (:func:`expected_s`)."""
        load = self.rungs[rung]
        self._retry_if_due(load, now)
        self._review(rung, load, kind, now)
        load.slots = slots = replicas * self._slots[rung]
        if self._stale(load, now):
            load.retiming = True  # the one request sent now re-times it
            return expected_s(load.in_flight, slots, None)
        first = load.first_s if kind == "first" else None
        return (load.take_s or 0.0) + expected_s(load.in_flight, slots, load.service_s,
                                                 first, load.per_place_s)

    def _stale(self, load: RungLoad, now: float) -> bool:
        """Nothing in flight and no answer for ``slow_after_s`` (a slow rung is retried
        by its own delay instead)."""
        return load.in_flight == 0 and load.timed_at is not None \
            and now - load.timed_at >= self.slow_after_s and load.slow.slow_since is None

    def spilled(self, rung: str, now: float) -> None:
        """A request passed over ``rung`` for its target at ``now``."""
        spills = self.rungs[rung].spills
        spills.append(now)
        while spills and spills[0] < now - SPILL_WINDOW_S:
            spills.popleft()

    def wanted_replicas(self, running: dict[str, int], now: float) -> dict[str, int]:
        """Rung -> replicas it needs to take its sustained spill too (only rungs that
        need more than ``running`` has): demand for the rung's autoscaling."""
        out = {}
        for name, load in self.rungs.items():
            extra = spill_replicas(list(load.spills), now, load.service_s, self._slots[name])
            if extra > 0:
                out[name] = running.get(name, 0) + extra
        return out

    def own_s(self, rung: str, kind: str) -> float:
        """Seconds from a place on ``rung`` to a request's answer (``kind`` ``answer``) or
        first piece (``first``) a request must allow not to be late: routing and service,
        each its average plus ``DEV_K`` mean deviations, no queue (0: not timed).

        Example:
            >>> book = LoadBook({"h100": 2}, answer_s=1.0, ttft_s=None, slow_after_s=10.0)
            >>> book.answered("h100", 0.2, now=0.0)
            >>> book.own_s("h100", "answer"), book.own_s("h100", "first")
            (0.2, 0.2)
            >>> book.answered("h100", 0.4, now=1.0)  # mean 0.26, deviation 0.05
            >>> round(book.own_s("h100", "answer"), 3)
            0.46
        """
        load = self.rungs[rung]
        if kind == "first" and load.first_s is not None:
            own, dev = load.first_s, load.first_dev_s
        else:
            own, dev = load.service_s or 0.0, load.service_dev_s
        return (load.take_s or 0.0) + own + DEV_K * (load.take_dev_s + dev)

    def places_per_replica(self, rung: str) -> int:
        """``max_ongoing_requests`` of ``rung``'s deployment."""
        return self._slots[rung]

    def has_place(self, rung: str, replicas: int) -> bool:
        """Whether ``rung`` with ``replicas`` RUNNING replicas has a free place."""
        return self.rungs[rung].in_flight < replicas * self._slots[rung]

    def snapshot(self, rung: str, now: float) -> dict[str, object]:
        """JSON-ready load of ``rung`` for ``GET /-/ladder``."""
        load = self.rungs[rung]
        return {"in_flight": load.in_flight,
                "service_s": None if load.service_s is None else round(load.service_s, 4),
                "first_piece_s": None if load.first_s is None else round(load.first_s, 4),
                "slow": load.slow.is_slow(now),
                "slow_reason": load.slow.reason if load.slow.slow_since else None}
