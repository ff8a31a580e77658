"""The scripted cluster story: preempt h100, preempt a100, bring h100 back, watch the climb."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

Action = Literal["kill", "add"]


@dataclass(frozen=True)
class Step:
    """One scripted change of the cluster.

    Attributes:
        at_s: When, in seconds after traffic starts.
        action: ``kill`` (SIGKILL the node: a preemption) or ``add`` (capacity returns).
        node_type: The node type to kill or add (named after its rung).
        label: What the timeline and the summary call it.

    Example:
        >>> Step(10.0, "kill", "h100", "h100 preempted").action
        'kill'
    """

    at_s: float
    action: Action
    node_type: str
    label: str


#: The story ``make demo`` tells.
DEFAULT_STORY: tuple[Step, ...] = (
    Step(10.0, "kill", "h100", "h100 preempted"),
    Step(25.0, "kill", "a100", "a100 preempted"),
    Step(40.0, "add", "h100", "h100 back"),
)


@dataclass(frozen=True)
class StoryEvent:
    """A step as it happened.

    Attributes:
        t: Demo time (seconds since traffic started) when the action began.
        label: The step's label.
        action: ``kill`` or ``add``.
        node_type: The node type acted on.
        took_s: Seconds the action took (an ``add`` waits for the node to register).
        error: What went wrong, when the action failed.
    """

    t: float
    label: str
    action: str
    node_type: str
    took_s: float
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


class ClusterLike(Protocol):
    """What the story needs of :class:`ray_ladder.testing.LocalCluster`."""

    def nodes(self, type: str | None = None) -> list[Any]: ...
    def add_node(self, type: str, *, wait: bool = True) -> Any: ...
    def remove_node(self, handle: Any, graceful: bool = False) -> None: ...


@dataclass
class StoryResult:
    """How the story went.

    Attributes:
        events: The steps as they happened.
        climbed_at: Demo time of the first answer from the top rung after the last
            ``add`` of it (``None`` when it never came).
        ended_at: Demo time when the story stopped.
    """

    events: list[StoryEvent]
    climbed_at: float | None
    ended_at: float


def apply_step(cluster: ClusterLike, step: Step) -> None:
    """Do one step on the cluster (main thread only: Ray adds nodes there)."""
    if step.action == "kill":
        nodes = cluster.nodes(step.node_type)
        if not nodes:
            raise RuntimeError(f"no live {step.node_type} node to kill")
        cluster.remove_node(nodes[0], graceful=False)
    elif step.action == "add":
        cluster.add_node(step.node_type)
    else:  # pragma: no cover - Step.action is a Literal
        raise ValueError(f"unknown action {step.action!r}; valid: kill, add")


def run_story(
    cluster: ClusterLike,
    steps: Sequence[Step],
    *,
    now: Callable[[], float],
    top_answer_since: Callable[[float], float | None],
    top_rung: str,
    climb_timeout_s: float = 45.0,
    tail_s: float = 5.0,
    on_event: Callable[[StoryEvent], None] | None = None,
    should_abort: Callable[[], str | None] = lambda: None,
    sleep: Callable[[float], None] = time.sleep,
) -> StoryResult:
    """Play ``steps`` at their times, then wait (bounded) for the climb back to the top rung.

    Every wait has a deadline: the story ends at most ``climb_timeout_s + tail_s`` after
    its last step, climbed or not.

    Args:
        cluster: The cluster to act on.
        steps: The script, in time order.
        now: Demo time (seconds since traffic started).
        top_answer_since: ``t -> demo time of the first top-rung answer sent at or after
            t`` (``None`` if none yet); read from the load generator's log.
        top_rung: The rung the story expects to climb back to.
        climb_timeout_s: How long to wait for the climb after the last ``add`` of the top.
        tail_s: Seconds of traffic kept after the climb (or after giving up).
        on_event: Called with each :class:`StoryEvent` as it happens.
        should_abort: Returns a reason to stop early (e.g. the load generator died).
        sleep: Injected for tests.

    Example:
        >>> result = run_story(cluster, DEFAULT_STORY, now=gen.now,  # doctest: +SKIP
        ...                    top_answer_since=first_top, top_rung="h100")
    """
    events: list[StoryEvent] = []

    def wait_until_t(target: float) -> None:
        while now() < target:
            reason = should_abort()
            if reason:
                raise RuntimeError(f"story aborted: {reason}")
            sleep(min(0.1, max(0.0, target - now())))

    for step in sorted(steps, key=lambda s: s.at_s):
        wait_until_t(step.at_s)
        began = now()
        error = ""
        try:
            apply_step(cluster, step)
        except Exception as err:  # the summary shows it; the demo fails loudly below
            error = f"{type(err).__name__}: {err}"
        event = StoryEvent(began, step.label, step.action, step.node_type, now() - began, error)
        events.append(event)
        if on_event is not None:
            on_event(event)
        if error:
            raise RuntimeError(f"story step {step.label!r} failed: {error}")

    climbed_at: float | None = None
    returns = [e for e in events if e.action == "add" and e.node_type == top_rung]
    if returns:
        since = returns[-1].t
        deadline = now() + climb_timeout_s
        while now() < deadline:
            climbed_at = top_answer_since(since)
            if climbed_at is not None:
                break
            reason = should_abort()
            if reason:
                raise RuntimeError(f"story aborted: {reason}")
            sleep(0.1)
    wait_until_t(now() + tail_s)
    return StoryResult(events, climbed_at, now())


def story_seconds(steps: Sequence[Step], climb_timeout_s: float, tail_s: float) -> float:
    """The longest the story can run: last step + climb wait + tail."""
    last = max((s.at_s for s in steps), default=0.0)
    return last + climb_timeout_s + tail_s
