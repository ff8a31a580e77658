"""Constraints an operator binds to a ladder app or to routes of it (pure).

A binding is a guarantee of the operator's, not the client's: every request on a bound
route runs under the binding, and its own ``X-Ladder-*`` constraints (or the handle call's
keywords) may only narrow it. Asking for more is a 403 (``ConstraintNotAllowedError``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray_ladder.core.constraints import Constraints
from ray_ladder.core.exceptions import ConstraintNotAllowedError
from ray_ladder.core.spec import Ladder
from ray_ladder.serve import http


class Bindings:
    """The app's binding and its routes' bindings.

    Args:
        ladder: The ladder (bindings are checked against it).
        default: Constraints for every request of the app (``None``: none).
        routes: Path prefix inside the app (``"/eu"``) -> its constraints; a route's
            binding is narrowed by the app's (it cannot widen it either).

    Example:
        >>> b = Bindings(ladder, None, {"/eu": Constraints(jurisdiction="eu")})
        ... # doctest: +SKIP
        >>> b.for_path("/eu/v1/chat/completions").jurisdiction  # doctest: +SKIP
        'eu'
    """

    def __init__(self, ladder: Ladder, default: Constraints | None = None,
                 routes: Mapping[str, Constraints] | None = None) -> None:
        self.ladder = ladder
        self.default = default
        if default is not None:
            ladder.check_constraints(default)
        self.routes: dict[str, Constraints] = {}
        for prefix, bound in (routes or {}).items():
            if not prefix.startswith("/") or prefix == "/":
                raise ValueError(f"route {prefix!r}: a bound route is a path prefix like "
                                 "'/eu' (the app's own binding is 'constraints')")
            combined = default.narrow(bound) if default is not None else bound
            ladder.check_constraints(combined)
            self.routes[prefix.rstrip("/")] = combined

    def for_path(self, path: str) -> Constraints | None:
        """The binding of a request path (relative to the app): its longest bound prefix,
        else the app's."""
        best = ""
        for prefix in self.routes:
            if (path == prefix or path.startswith(prefix + "/")) and len(prefix) > len(best):
                best = prefix
        return self.routes[best] if best else self.default

    def narrow(self, own: Constraints | None, path: str = "") -> Constraints | None:
        """The constraints a request runs under: the binding narrowed by its own.

        Raises:
            ConstraintNotAllowedError: the request asks for more than its binding allows.
        """
        bound = self.for_path(path)
        return own if bound is None else bound.narrow(own)

    def from_headers(self, headers: Mapping[str, str], path: str) -> Constraints | None:
        """``narrow`` of the request's ``X-Ladder-*`` headers.

        Raises:
            http.HttpError: 400 for a malformed value, 403 for one the binding excludes.
        """
        own = http.constraints_from_headers(headers, self.ladder)
        try:
            return self.narrow(own, path)
        except ConstraintNotAllowedError as err:
            raise http.HttpError(403, str(err)) from None


def relative_path(request: Any) -> str:
    """A request's path inside its Serve app (the app's route prefix removed)."""
    path = str(request.url.path)
    root = str(request.scope.get("root_path") or "")
    if root and path.startswith(root):
        path = path[len(root):]
    return path or "/"
