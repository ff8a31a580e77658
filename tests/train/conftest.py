"""Shared by the Train unit tests: the run's channel over an in-memory KV (no cluster)."""

from __future__ import annotations

import pytest

from ray_ladder.cluster import ray_private


@pytest.fixture
def kv(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Ray's internal KV as a dict (``ray_private.kv_*``), keys ``train/<run>/<what>``."""
    store: dict[str, str] = {}
    monkeypatch.setattr(ray_private, "kv_put",
                        lambda k, v, namespace=None: store.__setitem__(k, v))
    monkeypatch.setattr(ray_private, "kv_get", lambda k, namespace=None: (
        store[k].encode() if k in store else None))
    monkeypatch.setattr(ray_private, "kv_del", lambda k, namespace=None: store.pop(k, None))
    return store
