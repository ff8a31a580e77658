"""The flat public namespace is pinned (like httpx's test_exported_members)."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

import ray_ladder

EXPORTED = [
    "Attempt",
    "BudgetExhaustedError",
    "CacheSettings",
    "CapacityView",
    "ConfigError",
    "ConstraintNotAllowedError",
    "Constraints",
    "Decision",
    "InvalidConstraintsError",
    "Ladder",
    "LadderError",
    "LadderExhaustedError",
    "LadderTask",
    "Policy",
    "Rung",
    "RungContext",
    "RungUnavailableError",
    "Selector",
    "TransitionEvent",
    "ladder_task",
    "last_rung",
    "load_ladder",
]

# Names that import Ray load on first use; everything else is defined at import.
LAZY = {"CapacityView", "LadderTask", "ladder_task", "last_rung"}


def test_all_is_sorted_and_exact() -> None:
    assert ray_ladder.__all__ == sorted(ray_ladder.__all__)
    assert ray_ladder.__all__ == EXPORTED


@pytest.mark.parametrize("name", sorted(set(EXPORTED) - LAZY))
def test_eager_exports_resolve_and_say_where_they_live(name: str) -> None:
    value = getattr(ray_ladder, name)
    assert value.__module__.startswith("ray_ladder.")
    assert value.__doc__, f"{name} has no docstring"


def test_dir_lists_every_export() -> None:
    assert set(EXPORTED) <= set(dir(ray_ladder))
    assert set(ray_ladder._LAZY) == LAZY


@pytest.mark.parametrize("name", sorted(LAZY))
def test_lazy_exports_resolve(name: str) -> None:
    module = ray_ladder._LAZY[name]
    value = getattr(ray_ladder, name)
    assert value.__module__ == module


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        ray_ladder.Nope  # noqa: B018


def test_version_matches_the_installed_distribution() -> None:
    assert ray_ladder.__version__ == importlib.metadata.version("ray-ladder")
