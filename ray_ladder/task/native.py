"""The native path of ``@ladder_task``: Ray's label_selector + fallback_strategy."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import OrderedDict, deque
from typing import Any

import ray

from ray_ladder.cluster import ray_private
from ray_ladder.cluster.capacity import CapacityView
from ray_ladder.cluster.event_log import log_event
from ray_ladder.core.context import RungContext
from ray_ladder.core.events import TransitionEvent
from ray_ladder.core.exceptions import Attempt, LadderExhaustedError
from ray_ladder.core.selector import Selector
from ray_ladder.core.spec import Ladder
from ray_ladder.task.options import TaskOptions, TaskSpec, attempt_options, effective_ladder
from ray_ladder.task.runner import make_native_runner, raise_error

RUNG_ENTRIES = 100_000
_MISSING = object()


def native_problem(ladder: Ladder, options: TaskOptions) -> str | None:
    """Why Ray's native fallback cannot run this task, or ``None`` when it can.

    Ray 2.60's ``fallback_strategy`` may only change the label selector, so every
    eligible compute rung must ask for the same resources and carry a label selector;
    ``fallback_on`` needs to see the function's exceptions, which only the orchestrator
    does.
    """
    if options.fallback_on:
        return "fallback_on needs the orchestrator to catch the function's exceptions"
    eff = effective_ladder(ladder, options.ray)
    rungs = [r for r in eff.eligible(options.constraints) if r.is_compute]
    if not rungs:
        return "no eligible compute rung"
    shapes = {(tuple(sorted(r.resources.items())), r.num_gpus, r.num_cpus,
               r.accelerator_type) for r in rungs}
    if len(shapes) > 1:
        return "the eligible rungs ask for different resources (Ray's fallback_strategy " \
               "can only change the label selector)"
    if any(not r.label_selector for r in rungs):
        return "every eligible rung needs a label_selector"
    return None


class NativePath:
    """Driver-side state of one native ladder task: capacity view, selector, remotes."""

    _states: dict[tuple[int, str], NativePath] = {}
    _events: deque[tuple[str, TransitionEvent]] = deque(maxlen=10_000)
    _rungs: OrderedDict[bytes, Any] = OrderedDict()  # value ref -> rung ref or name
    _lock = threading.Lock()

    def __init__(self, spec: TaskSpec) -> None:
        opts = spec.options
        self.family = spec.family
        self.name = spec.name
        self.ladder = effective_ladder(spec.ladder, opts.ray)
        self.constraints = opts.constraints
        rungs = [r for r in self.ladder.eligible(opts.constraints) if r.is_compute]
        # No background thread: the snapshot refreshes inline, at most once per
        # probe_interval_s, in the caller's thread. (A driver thread that touches Ray
        # while ray.shutdown() runs can end the whole process.)
        self.view = CapacityView(self.ladder, constraints=opts.constraints)
        self.selector = Selector(self.ladder, opts.constraints, on_event=self._on_event)
        self._seen: Any = None
        selectors = [(r.name, dict(r.label_selector)) for r in rungs]
        contexts = {r.name: RungContext.of(self.ladder, r.name) for r in rungs}
        self._runner = ray.remote(make_native_runner(spec.fn, selectors, contexts))
        base = attempt_options(rungs[0], opts.ray, spec.name)
        base.update(name=opts.ray.get("name") or f"{spec.name}[native]", num_returns=2,
                    max_retries=opts.attempts_allowed(spec.ladder) - 1,
                    retry_exceptions=False)
        self._base = base
        self._eligible = rungs
        self._held: Any = None  # the view's holds the remotes below were built for
        self.remotes: dict[str, Any] = {}
        self._build_remotes(frozenset())

    def _build_remotes(self, held: frozenset[str]) -> None:
        """One remote per rung: its label selector first, then Ray's fallback to the
        rungs below, minus held ones (a node the autoscaler hook released takes no new
        work, not even through Ray's fallback)."""
        if held == self._held:
            return
        self._held = held
        rungs = self._eligible
        for i, rung in enumerate(rungs):
            below = [{"label_selector": dict(r.label_selector)} for r in rungs[i + 1:]
                     if r.name not in held]
            self.remotes[rung.name] = self._runner.options(
                **{**self._base, "label_selector": dict(rung.label_selector),
                   "fallback_strategy": below or None})

    @classmethod
    def of(cls, key: str, spec: TaskSpec) -> NativePath:
        """The state for ``key`` in this Ray session (a new ``ray.init`` starts afresh)."""
        if not ray.is_initialized():
            ray.init()
        ident = ray_private.core_worker_identity()
        state = cls._states.get((ident, key))
        if state is None:
            with cls._lock:
                for other in [k for k in cls._states if k[0] != ident]:
                    del cls._states[other]  # an earlier Ray session
                state = cls._states[(ident, key)] = NativePath(spec)
        return state

    def _on_event(self, event: TransitionEvent) -> None:
        NativePath._events.append((self.family, event))
        log_event(event, task=self.name)

    @classmethod
    def events(cls, family: str) -> list[TransitionEvent]:
        return [e for f, e in cls._events if f == family]

    def submit(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ray.ObjectRef:
        """Submit one call with the selector's rung as the primary label selector."""
        snap = self.view.snapshot()
        if snap is not self._seen:  # one observation per capacity refresh
            self._seen = snap
            self._build_remotes(frozenset(snap.held))
            self.selector.observe(snap.obtainable, now=time.time())
        remote = self.remotes.get(self.selector.current or "")
        if remote is None:
            now = time.time()
            attempts = [Attempt(r, f"not obtainable ({snap.why(r)})", now,
                                cause="unobtainable") for r in self.remotes]
            attempts.append(Attempt(None, "no eligible rung obtainable", now, cause="no_rung"))
            err = LadderExhaustedError(self.ladder.name, attempts,
                                       self.ladder.policy.retry_after_s)
            return ray.remote(raise_error).options(num_cpus=0, max_retries=0).remote(err)
        value, rung = remote.remote(*args, **kwargs)
        self._remember(value, rung)
        return value

    @classmethod
    def _remember(cls, value: ray.ObjectRef, rung: ray.ObjectRef) -> None:
        rungs = cls._rungs
        rungs[value.binary()] = rung
        if len(rungs) > RUNG_ENTRIES:
            _, old = rungs.popitem(last=False)
            _consume(old)


def _consume(rung: Any) -> None:
    """Read a dropped rung ref if it is an error, so Ray does not report it unhandled."""
    if isinstance(rung, ray.ObjectRef):
        ready, _ = ray.wait([rung], timeout=0, fetch_local=False)
        if ready:
            with contextlib.suppress(Exception):  # the value ref carries the error too
                ray.get(rung)


def native_rung(ref: ray.ObjectRef, timeout_s: float | None) -> tuple[bool, str | None]:
    """``(True, rung)`` when ``ref`` came from the native path, else ``(False, None)``."""
    rungs = NativePath._rungs
    entry = rungs.get(ref.binary(), _MISSING)
    if entry is _MISSING:
        return False, None
    if isinstance(entry, ray.ObjectRef):
        try:
            entry = ray.get(entry, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise
        except Exception:  # the call failed; its value ref raises the error
            entry = None
        rungs[ref.binary()] = entry
    return True, entry
