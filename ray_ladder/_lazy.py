"""Lazy attributes for package namespaces, so importing them does not import Ray."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, table: Mapping[str, str],
                 namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``table[name]`` on first use and caches it.

    Example:
        >>> __getattr__ = lazy_getattr(__name__, {"build_app": "pkg.app"}, globals())
        ... # doctest: +SKIP
    """

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
