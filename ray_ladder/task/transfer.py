"""The data path of ``@ladder_task``: large arguments go by reference, large answers stay put.

Ray moves a value of more than :data:`LARGE_BYTES` through the object store (plasma) and
smaller ones inline in its messages. The orchestrator only routes calls, so a large value
should never pass through it:

* **Arguments**: :func:`by_reference` puts each large argument (:func:`size_hint`) into
  the caller's object store once (what Ray's implicit put of a large task argument does:
  one serialization, owned by the caller) and sends the orchestrator its ``ObjectRef``;
  the attempt gets it as a top-level argument, so the rung's worker reads it from the
  caller's node like a plain task does.
* **Answers**: an attempt yields its value; Ray stores a large one in the rung node's
  object store. The orchestrator never reads it: it answers the call with a
  :class:`Forward`, a few bytes that unpickle to the value (``ray.get`` of the stored
  item), wherever the caller's ref is read.

docs/tasks.md draws the whole path (copies, nodes, owners).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ray
from ray.actor import ActorHandle
from ray.exceptions import RayError

from ray_ladder.task.runner import CallFailed

#: Ray's ``max_direct_call_object_size`` (100 KiB): larger values travel through plasma.
LARGE_BYTES = 100 * 1024
#: Argument types that are always small: passed on without a look.
_SMALL = frozenset({int, float, bool, complex, type(None)})
#: Items of a container (or attributes of an object) looked at to size it; the rest are
#: taken to be like those.
_SAMPLE = 32


def size_hint(value: Any, depth: int = 0) -> int:
    """A cheap estimate of ``value``'s serialized size in bytes, without serializing it.

    Buffers say their size (``nbytes``: numpy, torch, cupy, JAX and Arrow arrays, pandas
    Series; ``memory_usage()``: pandas DataFrames), strings and bytes their length;
    containers and plain objects are sampled. An unknown kind counts as small: it goes
    by value, as it always did. ``ObjectRef`` and actor handles count as nothing.

    Example:
        >>> size_hint([b"x" * 1000] * 200)  # 200 items of 1000 bytes, 8 bytes each to list
        201600
    """
    kind = type(value)
    if kind in _SMALL or isinstance(value, (ray.ObjectRef, ActorHandle)):
        return 0
    if kind is str:
        return 4 * len(value) if len(value) > LARGE_BYTES // 4 else len(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    usage = getattr(value, "memory_usage", None)
    if callable(usage) and hasattr(value, "columns"):  # a pandas DataFrame
        try:
            return int(usage(index=True).sum())
        except Exception:  # not what it looked like
            return 0
    if depth >= 4:
        return 0
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = value
    elif hasattr(value, "__dict__"):
        items = vars(value).values()
    else:
        return 0
    n = len(items)
    sample = [size_hint(v, depth + 1) for _, v in zip(range(_SAMPLE), items, strict=False)]
    return 8 * n + (sum(sample) * n // len(sample) if sample else 0)


def _by_reference(value: Any) -> tuple[Any, bool]:
    """``(value or its ObjectRef, is it a ref)``."""
    if type(value) in _SMALL:
        return value, False
    if isinstance(value, ray.ObjectRef):
        return value, True
    if size_hint(value) > LARGE_BYTES:
        return ray.put(value), True
    return value, False


def by_reference(args: tuple[Any, ...], kwargs: Mapping[str, Any]
                 ) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    """The call's arguments with every large value put in the object store, and whether
    any argument is now an ``ObjectRef`` (such calls run in an attempt of their own).

    Example:
        >>> by_reference((1, "a"), {})  # doctest: +SKIP
        ((1, 'a'), {}, False)
    """
    any_ref = False
    out_args = []
    for value in args:
        value, is_ref = _by_reference(value)
        out_args.append(value)
        any_ref = any_ref or is_ref
    out_kwargs = {}
    for name, value in kwargs.items():
        value, is_ref = _by_reference(value)
        out_kwargs[name] = value
        any_ref = any_ref or is_ref
    return tuple(out_args), out_kwargs, any_ref


class Forward:
    """A call's answer that stays in the object store where the attempt put it.

    The orchestrator returns it instead of the value: it pickles to a few bytes (the
    item's ``ObjectRef``) and unpickles, in whichever process reads the caller's ref, to
    the value itself (:func:`resolve`), read zero-copy from that node's store.
    """

    __slots__ = ("ref",)

    def __init__(self, ref: ray.ObjectRef) -> None:
        self.ref = ref

    def __reduce__(self) -> tuple[Any, ...]:
        return (resolve, (self.ref,))


def resolve(ref: ray.ObjectRef) -> Any:
    """The value of a forwarded answer (runs while the caller's ref is deserialized).

    An error comes back as the error object: ``ray.get`` of the caller's ref raises it
    (a ``RayError`` returned as a value is what Ray raises).
    """
    try:
        value = ray.get(ref)
    except RayError as err:
        return err
    if type(value) is CallFailed:
        return value.error
    return value
