"""The door of a shared endpoint: a caller's ``Authorization: Bearer`` key -> its team (pure).

A :class:`KeyRing` holds the keys file's SHA-256 digests and their teams, never a key:
a request's key is hashed and compared with **every** digest by ``hmac.compare_digest``
(no early exit), so the time a check takes says nothing about which digest, or how much
of one, matched. :class:`KeyFileWatch` re-reads the file when it changes (a rotated
Kubernetes Secret) and keeps the last good ring when the new file is invalid.
:func:`unauthorized` is the 401 both routes answer (OpenAI's error object on ``/v1/``).
Nothing here logs, and no message, repr or answer holds a key or a digest.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ray_ladder.core.exceptions import ConfigError
from ray_ladder.core.keys import KeysFile, load_keys

logger = logging.getLogger("ray_ladder.serve")
#: The environment variable naming the keys file when none is given (a mounted Secret).
ENV_VAR = "RAY_LADDER_KEYS_FILE"
#: A longer Authorization header is refused unread (no key is this long).
MAX_HEADER_CHARS = 4096
Cause = Literal["ok", "missing", "malformed", "unknown"]
_MESSAGES: dict[str, str] = {
    "missing": "No API key provided: send your team's key as 'Authorization: Bearer "
               "YOUR_KEY' (the OpenAI clients do: api_key=...).",
    "malformed": "The Authorization header is not 'Bearer YOUR_KEY'.",
    "unknown": "Incorrect API key provided (the key is not shown). Ask your operator for "
               "your team's key.",
}


@dataclass(frozen=True)
class KeyCheck:
    """What one Authorization header means.

    Attributes:
        team: The key's team, or ``None``.
        cause: ``ok``, ``missing`` (no header), ``malformed`` (not ``Bearer KEY``) or
            ``unknown`` (no such key).
    """

    team: str | None
    cause: Cause


def bearer_token(header: str | None) -> tuple[str | None, Cause]:
    """The key of an ``Authorization: Bearer KEY`` header and why not when there is none.

    Example:
        >>> bearer_token("Bearer sk-abc"), bearer_token(None), bearer_token("Basic eA==")
        (('sk-abc', 'ok'), (None, 'missing'), (None, 'malformed'))
    """
    if header is None or not header.strip():
        return None, "missing"
    if len(header) > MAX_HEADER_CHARS:
        return None, "malformed"
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(c.isspace() for c in token):
        return None, "malformed"
    return token, "ok"


def env_keys_path(var: str = ENV_VAR, environ: Mapping[str, str] | None = None) -> str:
    """The keys file's path that environment variable ``var`` holds.

    Raises:
        ValueError: ``var`` is not set.

    Example:
        >>> env_keys_path(environ={"RAY_LADDER_KEYS_FILE": "/etc/keys/keys.yaml"})
        '/etc/keys/keys.yaml'
    """
    path = (os.environ if environ is None else environ).get(var)
    if not path:
        raise ValueError(f"no keys file: give keys= (a path) or set {var} to the path of "
                         "the keys file where the front runs (e.g. a Kubernetes Secret "
                         "mounted as a file)")
    return path


class KeyRing:
    """The digests of a keys file and their teams: which team a request's key belongs to.

    Args:
        entries: ``(sha256 hex, team)`` pairs (``KeyRing.from_file`` reads a keys file).

    Example:
        >>> from ray_ladder.core.keys import hash_key
        >>> ring = KeyRing([(hash_key("sk-team-a-0123456789abcdef"), "a")])
        >>> ring.team_for("Bearer sk-team-a-0123456789abcdef"), ring.team_for("Bearer x")
        ('a', None)
        >>> ring
        KeyRing(1 key, teams=['a'])
    """

    def __init__(self, entries: Iterable[tuple[str, str]]) -> None:
        pairs = [(bytes.fromhex(digest), team) for digest, team in entries]
        if any(len(digest) != hashlib.sha256().digest_size for digest, _ in pairs):
            raise ValueError("every digest must be a SHA-256 (64 hex characters)")
        self._digests: tuple[bytes, ...] = tuple(d for d, _ in pairs)
        self._teams: tuple[str, ...] = tuple(t for _, t in pairs)

    @classmethod
    def from_keys(cls, keys: KeysFile) -> KeyRing:
        """The ring of a validated keys file."""
        return cls((entry.sha256, entry.team) for entry in keys.keys)

    @classmethod
    def from_file(cls, path: str | Path) -> KeyRing:
        """Read a keys file (``ray_ladder.core.keys``).

        Raises:
            ConfigError: naming the file, each field and its fix (never a value).
        """
        return cls.from_keys(load_keys(path))

    @classmethod
    def from_env(cls, var: str = ENV_VAR,
                 environ: Mapping[str, str] | None = None) -> KeyRing:
        """Read the keys file that environment variable ``var`` names.

        Raises:
            ValueError: ``var`` is not set (a :class:`ConfigError` for a bad file).
        """
        return cls.from_file(env_keys_path(var, environ))

    @property
    def teams(self) -> frozenset[str]:
        """The teams that have a key."""
        return frozenset(self._teams)

    def __len__(self) -> int:
        return len(self._digests)

    def __repr__(self) -> str:  # counts and teams only: no digest
        n = len(self)
        return f"KeyRing({n} key{'' if n == 1 else 's'}, teams={sorted(self.teams)})"

    def check(self, authorization: str | None) -> KeyCheck:
        """The team of an ``Authorization`` header's key, or why there is none."""
        token, cause = bearer_token(authorization)
        if token is None:
            return KeyCheck(None, cause)
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found: str | None = None
        for known, team in zip(self._digests, self._teams, strict=True):
            # Every digest is compared, also after a match: no early exit to time.
            if hmac.compare_digest(known, digest):
                found = team
        return KeyCheck(found, "ok" if found is not None else "unknown")

    def team_for(self, authorization: str | None) -> str | None:
        """The team of an ``Authorization: Bearer KEY`` header, or ``None``."""
        return self.check(authorization).team


class KeyFileWatch:
    """A keys file, re-read when it changes (checked at most every ``every_s``).

    A rotated Kubernetes Secret changes the mounted file in place; the new ring is used
    from the next check on. A file that became invalid keeps the last good ring (the
    error is logged, naming fields only).

    Args:
        path: The keys file.
        every_s: How often the file's state (``os.stat``) is looked at, at most.
        clock: Monotonic clock (the seam of tests).

    Raises:
        ConfigError: the file is invalid when first read.
    """

    def __init__(self, path: str | Path, *, every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.every_s = every_s
        self._clock = clock
        self._stamp = self._stat()
        self._ring = KeyRing.from_file(self.path)
        self._checked = clock()
        #: The last reload's error (``None`` after a good one).
        self.error: str | None = None

    def _stat(self) -> tuple[Any, ...]:
        try:
            st = os.stat(self.path)
        except OSError:
            return ()
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    @property
    def ring(self) -> KeyRing:
        """The current ring (re-read first when the file changed)."""
        now = self._clock()
        if now - self._checked < self.every_s:
            return self._ring
        self._checked = now
        stamp = self._stat()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._ring = KeyRing.from_file(self.path)
                self.error = None
                logger.info("keys file %s re-read: %r", self.path, self._ring)
            except ConfigError as err:
                self.error = str(err)
                logger.error("keys file changed but is invalid; keeping the last one: %s",
                             err)
        return self._ring


def unauthorized(cause: Cause, openai_route: bool) -> tuple[int, dict[str, Any],
                                                            dict[str, str]]:
    """``(401, body, headers)`` of a request without a known key: OpenAI's error object on
    the OpenAI routes, the ladder's ``{"error", "code"}`` on the JSON route.

    Example:
        >>> status, body, headers = unauthorized("unknown", openai_route=True)
        >>> status, body["error"]["code"], headers["WWW-Authenticate"]
        (401, 'invalid_api_key', 'Bearer')
    """
    message = _MESSAGES.get(cause, _MESSAGES["unknown"])
    headers = {"WWW-Authenticate": "Bearer"}
    if openai_route:
        return 401, {"error": {"message": message, "type": "invalid_request_error",
                               "param": None, "code": "invalid_api_key"}}, headers
    return 401, {"error": message, "code": "invalid_api_key"}, headers


def not_served(team: str, openai_route: bool) -> tuple[int, dict[str, Any], dict[str, str]]:
    """``(403, body, headers)`` of a known key whose team this endpoint does not serve."""
    message = f"Team {team!r} has no ladder on this endpoint."
    if openai_route:
        return 403, {"error": {"message": message, "type": "permission_error",
                               "param": None, "code": "team_not_served"}}, {}
    return 403, {"error": message, "code": "team_not_served"}, {}
