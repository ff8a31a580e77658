"""The status board: what each ladder in use publishes for ``ray-ladder status``, and the
gauges, answer counts and replica-hours every part exports the same way."""

from __future__ import annotations

import logging
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ray_ladder.cluster import event_store, metrics
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.exceptions import Attempt, AttemptCause
from ray_ladder.core.placement import RungWhy
from ray_ladder.core.selector import Selector
from ray_ladder.core.spec import Ladder

logger = logging.getLogger(__name__)

#: Traffic shares cover this window.
WINDOW_S = 60.0
#: A user's entry is re-published at most this often (at once when its rung changes).
PUBLISH_S = 1.0
#: Answers that are not a rung's (a 503 with no rung left, a call that raised).
EXHAUSTED, ERROR = "exhausted", "error"
_ANSWER_METRIC = {"serve": "ladder_requests", "task": "ladder_calls"}


class RollingCounts:
    """Counts per key over the last ``window_s`` seconds, in one-second buckets.

    Example:
        >>> counts = RollingCounts(window_s=60)
        >>> counts.add("h100", 3, now=0.0); counts.add("a100", 1, now=59.5)
        >>> counts.totals(now=59.9), counts.totals(now=61.0)
        ({'h100': 3, 'a100': 1}, {'a100': 1})
    """

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._buckets: deque[tuple[int, Counter[str]]] = deque()

    def add(self, key: str, n: int, now: float) -> None:
        second = int(now)
        if not self._buckets or self._buckets[-1][0] != second:
            self._buckets.append((second, Counter()))
        self._buckets[-1][1][key] += n

    def totals(self, now: float) -> dict[str, int]:
        while self._buckets and self._buckets[0][0] <= now - self.window_s:
            self._buckets.popleft()
        out: Counter[str] = Counter()
        for _, bucket in self._buckets:
            out.update(bucket)
        return dict(out)


def selector_state(selector: Selector, now: float) -> dict[str, Any]:
    """The rung a selector is on, how long it has been degraded and whether it alerted.

    Example:
        >>> sel = Selector(ladder)  # doctest: +SKIP
        >>> selector_state(sel, 0.0)["current"] is None  # doctest: +SKIP
        True
    """
    current = selector.current
    return {
        "current": current,
        "current_index": selector.ladder.index(current) if current is not None else -1,
        "degraded_s": round(selector.degraded_s(now), 3),
        "alert_fired": selector.alerted,
    }


def _constraints(c: Constraints | None) -> dict[str, Any]:
    return {} if c is None else c.model_dump(mode="json", exclude_none=True)


def _process_identity() -> tuple[str | None, str | None]:
    """(job id, node id) of this Ray process, or Nones where Ray is not initialized."""
    import sys

    if "ray" not in sys.modules:
        return None, None
    import ray

    if not ray.is_initialized():
        return None, None
    ctx = ray.get_runtime_context()
    return ctx.get_job_id(), ctx.get_node_id()


def _nothing(name: str, value: float = 1.0, **tags: Any) -> None:
    """Stands in for a metric call where the board exports none."""


def _guarded(record: Callable[..., None]) -> Callable[..., None]:
    """A metric call that never fails its caller (a router's request, a task's call) over
    a metrics-pipeline hiccup; a wrong label set (a bug) still raises."""

    def call(name: str, value: float = 1.0, **tags: Any) -> None:
        try:
            record(name, value, **tags)
        except ValueError:
            raise
        except Exception:
            logger.debug("ladder metric %s not recorded", name, exc_info=True)

    return call


class LadderBoard:
    """One part's board in one process: entries per ladder user, gauges and counts.

    A *user* is one thing on a ladder: a Serve app (its router), a ``@ladder_task``
    option set (in its driver's orchestrator), a Tune trial, a hook. :meth:`observe`
    after each observation; :meth:`answered` per answer (or batch of answers).

    Args:
        part: ``serve``, ``task``, ``tune`` or ``hook``.
        clock: Wall clock (entries and windows use it).
        publish: Where entries go (default: this process's event-store writer).
        export: Record Ray metrics (``False``: entries only).

    Example:
        >>> board = LadderBoard("task", publish=lambda key, entry: None)
        >>> board.answered("embed", ladder, "h100")  # doctest: +SKIP
    """

    def __init__(self, part: str, *, clock: Callable[[], float] = time.time,
                 publish: Callable[[str, Mapping[str, Any]], None] | None = None,
                 export: bool = True) -> None:
        self.part = part
        self._inc = _guarded(metrics.inc) if export else _nothing
        self._set = _guarded(metrics.set_gauge) if export else _nothing
        self._clock = clock
        self._publish = publish or event_store.publish
        self._counts: dict[str, RollingCounts] = {}
        self._answers: dict[tuple[str, str], int] = {}
        self._ladders: dict[str, Ladder] = {}
        self._specs: dict[str, dict[str, Any]] = {}
        self._last: dict[str, dict[str, Any]] = {}
        self._published: dict[str, tuple[float, Any]] = {}
        self._observed_at: dict[str, float] = {}
        self._hours: dict[tuple[str, str], float] = {}
        self._cost: dict[tuple[str, str], float] = {}
        self._identity: tuple[str | None, str | None] | None = None
        self._shown: set[str] = set()  # users whose published entry counted answers
        self.entries_published = 0

    # --- answers ---------------------------------------------------------------------

    def answered(self, user: str, ladder: Ladder, rung: str, n: int = 1) -> None:
        """``n`` answers (or calls) by ``rung``, or ``exhausted`` / ``error``: the traffic
        window now; ``ladder_requests`` or ``ladder_calls``, quality points, cache hits,
        sheds and exhaustions at the next :meth:`observe` (one export per probe, not one
        per call: a task's call stays cheap)."""
        if n <= 0:
            return
        self._counts.setdefault(user, RollingCounts()).add(rung, n, self._clock())
        self._ladders[ladder.name] = ladder
        key = (ladder.name, rung)
        self._answers[key] = self._answers.get(key, 0) + n

    def flush_answers(self) -> None:
        """Export the answers counted since the last flush."""
        pending, self._answers = self._answers, {}
        part = self.part
        for (name, rung), n in pending.items():
            ladder = self._ladders[name]
            if part in _ANSWER_METRIC:
                self._inc(_ANSWER_METRIC[part], n, ladder=name, rung=rung)
            self._inc("ladder_answers", n, ladder=name, part=part)
            if rung == EXHAUSTED:
                self._inc("ladder_exhausted", n, ladder=name, part=part)
                continue
            if rung not in ladder.names:
                continue
            kind = ladder.rung(rung).kind
            if kind == "shed":
                self._inc("ladder_sheds", n, ladder=name)
                continue
            if kind == "cache":
                self._inc("ladder_cache_hits", n, ladder=name)
            self._inc("ladder_quality_points", n * ladder.rung(rung).quality,
                      ladder=name, part=part)

    def attempt_failed(self, ladder: str, rung: str, cause: AttemptCause,
                       error: str | None = None) -> None:
        """One failed attempt on ``rung``: its ``Attempt.cause`` and ``Attempt.error``
        make the label (:func:`metrics.failure_label`), never its reason sentence."""
        self._inc("ladder_attempt_failures", ladder=ladder, part=self.part, rung=rung,
                  reason=metrics.failure_label(cause, error))

    def hedged(self, ladder: str, rung: str) -> None:
        """One request ``rung`` was slow to take, copied to another rung."""
        self._inc("ladder_hedges", ladder=ladder, rung=rung)

    def spilled(self, ladder: str, rung: str) -> None:
        """One request passed over ``rung`` for its latency target."""
        self._inc("ladder_spills", ladder=ladder, rung=rung)

    def slow(self, ladder: str, rung: str) -> None:
        """``rung`` was found slow."""
        self._inc("ladder_slow", ladder=ladder, rung=rung)

    def call_finished(self, user: str, ladder: Ladder, rung: str | None,
                      attempts: Sequence[Attempt]) -> None:
        """One ``@ladder_task`` call ended on ``rung`` (None: it did not run to an answer)
        after ``attempts`` (its failed attempts, then what exhaustion added)."""
        for attempt in attempts:
            if attempt.rung is not None and attempt.cause != "not_used":
                self.attempt_failed(ladder.name, attempt.rung, attempt.cause, attempt.error)
        if rung is None:
            rung = EXHAUSTED if attempts and attempts[-1].rung is None else ERROR
        self.answered(user, ladder, rung)

    # --- observations ----------------------------------------------------------------

    def unpublished(self, user: str) -> bool:
        """Whether ``user`` has answers that no published entry of it counted yet (its
        first ones): :meth:`observe` publishes them at once, whatever ``PUBLISH_S`` says,
        so ``ray-ladder status`` lists a user right after its first answer."""
        return user in self._counts and user not in self._shown

    def observe(self, user: str, ladder: Ladder, selector: Selector, *,
                obtainable: Mapping[str, bool], replicas: Mapping[str, int] | None = None,
                others: Iterable[Selector] = (), extra: Mapping[str, Any] | None = None,
                now: float | None = None, selector_now: float | None = None,
                why: Mapping[str, RungWhy] | None = None) -> dict[str, Any] | None:
        """After one observation of ``user``'s ``selector``: gauges, replica-hours, and
        the entry (published when due: at most every ``PUBLISH_S``, at once when its rung
        changed or on its first answers); returns the entry when it was published.

        Args:
            user: Which user (the app, task or trial name).
            ladder: Its ladder.
            selector: The selector whose rung is "the rung in use".
            obtainable: Rung -> obtainable, as that selector was fed.
            replicas: Rung -> replicas (or attempts, trials) running there now.
            others: More selectors of the same user (one per constraint set).
            extra: More keys of the entry.
            now: Wall-clock time (default: the board's clock).
            selector_now: The selectors' own clock now, where it is not the wall clock
                (Tune's scheduler observes with a monotonic one).
            why: Rung -> why it is unobtainable, where the observer knows
                (:func:`~ray_ladder.core.placement.rung_why`).
        """
        now = self._clock() if now is None else now
        self.flush_answers()
        sel_now = now if selector_now is None else selector_now
        state = selector_state(selector, sel_now)
        self._gauges(user, ladder, state)
        self._accrue(user, ladder, replicas or {}, now)
        last = self._published.get(user)
        if last is not None and now - last[0] < PUBLISH_S and last[1] == state["current"] \
                and not self.unpublished(user):
            return None
        entry = self.entry(user, ladder, selector, state, obtainable=obtainable,
                           replicas=replicas, others=others, now=now, selector_now=sel_now,
                           why=why)
        if extra:
            entry.update(extra)
        self._published[user] = (now, state["current"])
        if user in self._counts:
            self._shown.add(user)
        self._publish(self.key(user), entry)
        self._flush_hours(ladder)
        self.entries_published += 1
        return entry

    def key(self, user: str) -> str:
        """The entry's KV key: ``status/<part>/<job>-<pid>/<user>``."""
        job = self._ident()[0] or "nojob"
        safe = user.replace("/", "_")
        return f"{event_store.STATUS_PREFIX}{self.part}/{job}-{os.getpid()}/{safe}"

    def _ident(self) -> tuple[str | None, str | None]:
        if self._identity is None or self._identity[0] is None:
            self._identity = _process_identity()
        return self._identity

    def entry(self, user: str, ladder: Ladder, selector: Selector, state: Mapping[str, Any],
              *, obtainable: Mapping[str, bool], replicas: Mapping[str, int] | None,
              others: Iterable[Selector], now: float, selector_now: float | None = None,
              why: Mapping[str, RungWhy] | None = None) -> dict[str, Any]:
        """The JSON-ready status entry of ``user`` (see docs/operating.md)."""
        served = self._counts[user].totals(now) if user in self._counts else {}
        spec = self._specs.get(ladder.name)
        if spec is None:
            spec = self._specs[ladder.name] = ladder.model_dump(mode="json")
            self._publish(*ladder_meta(ladder, now))
        rungs = []
        for rung in ladder.rungs:
            ok = True if not rung.is_compute else bool(obtainable.get(rung.name))
            known = None if ok or why is None else why.get(rung.name)
            rungs.append({
                "name": rung.name, "kind": rung.kind, "obtainable": ok,
                "why": None if known is None else dict(known),
                "eligible": rung.name in selector.eligible,
                "replicas": None if replicas is None or not rung.is_compute
                else int(replicas.get(rung.name, 0)),
                "served_1m": served.get(rung.name, 0),
            })
        job, node = self._ident()
        return {
            "part": self.part, "source": user, "ladder": ladder.name, "job_id": job,
            "node_id": node, "pid": os.getpid(), "time": now,
            "interval_s": max(PUBLISH_S, ladder.policy.probe_interval_s),
            "max_degraded_seconds": ladder.policy.max_degraded_seconds,
            **state,
            "by_constraints": [{"constraints": _constraints(s.constraints),
                                **selector_state(s, selector_now or now)} for s in others],
            "rungs": rungs,
            "unanswered_1m": {k: v for k, v in served.items() if k not in ladder.names},
            "spec": spec,
        }

    def _gauges(self, user: str, ladder: Ladder, state: Mapping[str, Any]) -> None:
        # Gauges are per ladder and part: with several users of one ladder here (two
        # option sets of a task), they show the worst one.
        self._last[user] = {"ladder": ladder.name, **state}
        mine = [s for s in self._last.values() if s["ladder"] == ladder.name]
        index = [s["current_index"] for s in mine]
        tags = {"ladder": ladder.name, "part": self.part}
        self._set("ladder_current_rung", -1 if -1 in index else max(index), **tags)
        self._set("ladder_degraded_seconds", max(s["degraded_s"] for s in mine),
                          **tags)
        if ladder.policy.max_degraded_seconds is not None:
            self._set("ladder_max_degraded_seconds",
                              ladder.policy.max_degraded_seconds, **tags)

    def _accrue(self, user: str, ladder: Ladder, replicas: Mapping[str, int],
                now: float) -> None:
        before = self._observed_at.get(user)
        self._observed_at[user] = now
        if before is None:
            return
        # A long pause (a stopped loop) is not counted as running time.
        dt = min(max(0.0, now - before), 5 * max(PUBLISH_S, ladder.policy.probe_interval_s))
        for rung, count in replicas.items():
            if count > 0 and rung in ladder.names:
                hours = count * dt / 3600.0
                key = (ladder.name, rung)
                self._hours[key] = self._hours.get(key, 0.0) + hours
                self._cost[key] = self._cost.get(key, 0.0) + (
                    hours * ladder.rung(rung).cost_per_hour)

    def _flush_hours(self, ladder: Ladder) -> None:
        for (name, rung), hours in list(self._hours.items()):
            if name != ladder.name:
                continue
            self._inc("ladder_replica_hours", hours, ladder=name, part=self.part, rung=rung)
            self._inc("ladder_cost", self._cost.get((name, rung), 0.0), ladder=name,
                        part=self.part, rung=rung)
            del self._hours[(name, rung)]
            self._cost.pop((name, rung), None)


def ladder_meta(ladder: Ladder, now: float) -> tuple[str, dict[str, Any]]:
    """The ``ladders/<name>`` entry of ``ladder``: its rungs best first and its spec (the
    timeline's rung order, a hook's node counts).

    Example:
        >>> ladder_meta(ladder, 0.0)[0]  # doctest: +SKIP
        'ladders/gpu'
    """
    return (event_store.LADDERS_PREFIX + ladder.name,
            {"ladder": ladder.name, "rungs": ladder.names,
             "kinds": [r.kind for r in ladder.rungs], "time": now,
             "spec": ladder.model_dump(mode="json")})
