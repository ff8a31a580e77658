"""The cache rung's store: a bounded TTL LRU of recent compute answers (pure, no Ray)."""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ray_ladder.core.constraints import Constraints
from ray_ladder.core.spec import Rung

_NO_CONSTRAINTS: tuple[object, ...] = Constraints().key()


def payload_key(payload: Any) -> str | None:
    """Canonical JSON of a request payload, or ``None`` when it is not JSON (not cached).

    Example:
        >>> payload_key({"b": 1, "a": [1, 2]})
        '{"a":[1,2],"b":1}'
    """
    try:
        return json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class CachedAnswer:
    """One stored answer.

    Attributes:
        value: The compute rung's answer.
        producer: The compute rung that produced it (its tags decide residency).
        stored_at: The clock value when it was stored.
    """

    value: Any
    producer: Rung
    stored_at: float


class AnswerCache:
    """Recent answers of compute rungs, keyed by request content and constraints.

    A lookup first tries the entry stored for the same payload and the same
    constraints, then the one stored for the same payload without constraints. Either is
    returned only if its producing rung satisfies the request's constraints, so an
    ``eu`` request never gets an answer computed outside ``eu``, from the cache either.
    Entries expire ``ttl_s`` after they were stored; beyond ``max_entries`` the least
    recently used entry is dropped. The clock is passed in.

    Args:
        max_entries: Most entries kept.
        ttl_s: Seconds an entry stays servable.

    Example:
        >>> cache = AnswerCache(max_entries=2, ttl_s=60)
        >>> h100 = Rung(name="h100", resources={"ladder/h100": 1})
        >>> cache.put('{"q":1}', None, "hi", h100, now=0.0)
        >>> cache.get('{"q":1}', None, now=1.0).value
        'hi'
    """

    def __init__(self, max_entries: int = 1024, ttl_s: float = 300.0) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s}")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._entries: OrderedDict[tuple[str, tuple[object, ...]], CachedAnswer] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _ckey(constraints: Constraints | None) -> tuple[object, ...]:
        return _NO_CONSTRAINTS if constraints is None else constraints.key()

    def put(self, key: str | None, constraints: Constraints | None, value: Any,
            producer: Rung, now: float) -> None:
        """Store ``value`` produced by ``producer`` for a request (``key`` None: skip)."""
        if key is None:
            return
        ckey = (key, self._ckey(constraints))
        self._entries[ckey] = CachedAnswer(value, producer, now)
        self._entries.move_to_end(ckey)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def get(self, key: str | None, constraints: Constraints | None,
            now: float) -> CachedAnswer | None:
        """A fresh answer for this payload whose producer satisfies ``constraints``."""
        if key is None:
            return None
        own = self._ckey(constraints)
        for ckey in ((key, own), (key, _NO_CONSTRAINTS)):
            entry = self._entries.get(ckey)
            if entry is None:
                continue
            if now - entry.stored_at >= self.ttl_s:
                del self._entries[ckey]
                continue
            if constraints is not None and not constraints.allows(entry.producer):
                continue
            self._entries.move_to_end(ckey)
            return entry
        return None

    def clear(self) -> None:
        """Drop every entry."""
        self._entries.clear()
