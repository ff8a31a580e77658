"""Lazy attributes for package namespaces, so importing them does not import Ray, and the
one rule for optional dependencies: a missing one is an ImportError naming its extra."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that brings it.

    ``name`` is the missing module (as for :class:`ModuleNotFoundError`), ``extra`` the
    ray-ladder extra to install.

    Example:
        >>> str(MissingExtraError("OpenAIBackendRung", "llm", "httpx"))
        "OpenAIBackendRung needs httpx, which is not installed: pip install 'ray-ladder[llm]'"
    """

    def __init__(self, what: str, extra: str, missing: str) -> None:
        super().__init__(f"{what} needs {missing}, which is not installed: "
                         f"pip install 'ray-ladder[{extra}]'", name=missing)
        self.extra = extra


def _missing_module(err: BaseException) -> str | None:
    """The module a failed import could not find, through Ray's re-raised ImportErrors
    (``ray.tune`` raises a plain ImportError from the ModuleNotFoundError)."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ModuleNotFoundError) and cause.name:
            return cause.name
        cause = cause.__cause__ or cause.__context__
    return None


@contextlib.contextmanager
def requires_extra(extra: str, what: str) -> Iterator[None]:
    """Imports inside this block that find a module missing raise :class:`MissingExtraError`.

    A missing ray-ladder module is a bug, not a missing extra, and stays as it is; so does
    an ImportError that found its module (a wrong version).

    Example:
        >>> with requires_extra("plots", "simulate --plot"):
        ...     import matplotlib  # doctest: +SKIP
    """
    try:
        yield
    except MissingExtraError:
        raise
    except ImportError as err:
        missing = _missing_module(err)
        if missing is None or missing.partition(".")[0] == "ray_ladder":
            raise
        raise MissingExtraError(what, extra, missing) from err


def require_modules(extra: str, what: str, names: Iterable[str]) -> None:
    """Raise :class:`MissingExtraError` for the first of ``names`` (top-level modules) that
    is not installed, without importing any of them.

    Example:
        >>> require_modules("demo", "the demo", ["json"])
    """
    for name in names:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise MissingExtraError(what, extra, name)


def lazy_getattr(package: str, table: Mapping[str, str], namespace: dict[str, Any],
                 extra: str | None = None, probe: str | None = None) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``table[name]`` on first use and caches it.

    With ``extra``, a dependency missing on that import raises :class:`MissingExtraError`
    naming it (``pip install 'ray-ladder[serve]'``); ``probe`` (e.g. ``"ray.serve"``) is
    imported first, so a name whose module imports Ray's part only when called fails here,
    at the import, and not later inside a call.

    Example:
        >>> __getattr__ = lazy_getattr(__name__, {"build_app": "pkg.app"}, globals())
        ... # doctest: +SKIP
    """

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        guard = (requires_extra(extra, f"{package}.{name}") if extra
                 else contextlib.nullcontext())
        with guard:
            if probe:
                importlib.import_module(probe)
            value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
