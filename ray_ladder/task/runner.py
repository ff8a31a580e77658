"""Worker side of ``@ladder_task``: the functions that run user code on a rung."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from ray_ladder.core.context import RungContext
from ray_ladder.core.placement import label_matches

#: One call inside a batch: (number of positional args, keyword names).
Layout = Sequence[tuple[int, tuple[str, ...]]]


def task_error(fn_name: str, err: BaseException) -> Exception:
    """Wrap a user exception like Ray does, keeping the worker's traceback text."""
    from ray.exceptions import RayTaskError

    return RayTaskError(fn_name, traceback.format_exc(), err)


def make_batch_runner(fn: Callable[..., Any], fn_name: str,
                      contexts: Mapping[str, RungContext]) -> Callable[..., Iterator[Any]]:
    """A streaming generator that runs a batch of calls of ``fn`` on one rung.

    It yields the node id first (the *started* marker: the attempt was scheduled), then
    the answer: the function's value itself (plain values take Ray's fast serialization
    path) or a :class:`CallFailed`; for a batch of several tiny calls, one list of those
    (one report to the orchestrator instead of one per call). A last :class:`BatchDone`
    carries the time spent in the function. Arguments arrive flattened as top-level
    task arguments so Ray resolves every ``ObjectRef`` argument before the attempt is
    scheduled, as for a plain task.
    """

    def ladder_attempt(rung: str, layout: Layout, *flat: Any) -> Iterator[Any]:
        import ray

        yield ray.get_runtime_context().get_node_id()
        ctx = contexts[rung]
        single = len(layout) == 1
        batch: list[Any] = []
        pos = 0
        busy = 0.0
        for n_args, names in layout:
            args = flat[pos:pos + n_args]
            pos += n_args
            kwargs = dict(zip(names, flat[pos:pos + len(names)], strict=True))
            pos += len(names)
            start = time.perf_counter()
            try:
                result = fn(*args, rung=ctx, **kwargs)
            except Exception as err:  # the caller decides: fall a rung or raise it
                result = CallFailed(task_error(fn_name, err))
            busy += time.perf_counter() - start
            if single:
                yield result
            else:
                batch.append(result)
        if not single:
            yield batch
        yield BatchDone(busy)

    return ladder_attempt


class CallFailed:
    """A batch item: the call raised (a ``RayTaskError`` carrying the worker traceback)."""

    __slots__ = ("error",)

    def __init__(self, error: Any) -> None:  # a RayTaskError
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        return (CallFailed, (self.error,))


class BatchDone:
    """The last batch item: seconds spent inside the function for the whole batch."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __reduce__(self) -> tuple[Any, ...]:
        return (BatchDone, (self.seconds,))


def rung_for_labels(labels: Mapping[str, str],
                    selectors: Sequence[tuple[str, Mapping[str, str]]]) -> str | None:
    """The first rung (best first) whose label selector matches a node's labels."""
    for name, selector in selectors:
        if label_matches(selector, labels):
            return name
    return None


def make_native_runner(fn: Callable[..., Any],
                       selectors: Sequence[tuple[str, Mapping[str, str]]],
                       contexts: Mapping[str, RungContext]) -> Callable[..., tuple[Any, Any]]:
    """A plain task for the native path: returns ``(value, rung name)``.

    Ray's raylet picked the node from the label selector and its fallbacks; the rung is
    the best rung whose selector matches the node it landed on.
    """

    here: list[str] = []  # this worker's rung: a worker never changes node

    def ladder_native_attempt(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        if not here:
            import ray

            # Annotated Dict[str, List[str]] in 2.60, but the values are label strings.
            labels = {k: v if isinstance(v, str) else ",".join(v)
                      for k, v in ray.get_runtime_context().get_node_labels().items()}
            name = rung_for_labels(labels, selectors)
            if name is None:  # cannot happen while the selectors are the placement
                raise RuntimeError(f"node labels {dict(labels)} match no rung of this ladder")
            here.append(name)
        name = here[0]
        return fn(*args, rung=contexts[name], **kwargs), name

    return ladder_native_attempt


def raise_error(err: BaseException) -> None:
    """A task that raises ``err`` (the native path's answer when no rung is obtainable)."""
    raise err
