"""The faults of :class:`~ray_ladder.testing.faults.FaultyBackend` by name, their options,
and the state its server's loop and the caller's thread share (the current fault, the
requests held by it, the log of requests)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Literal, NamedTuple, get_args

Fault = Literal[
    "healthy", "refused", "silent", "late_first_token", "hang_mid", "trickle", "truncated",
    "cut", "error_event", "malformed", "html_200", "empty", "status_500", "status_503",
    "status_429", "status_401", "status_403", "status_404", "status_408", "status_400"]
#: Every fault, by name (docs/testing.md "A backend that fails on purpose" says what each
#: sends).
FAULTS: tuple[Fault, ...] = get_args(Fault)
#: The page ``html_200`` sends: a proxy's error page, with status 200.
HTML_PAGE = (b"<html><head><title>502 Bad Gateway</title></head><body><center>"
             b"<h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>\n")
#: status -> (message, type, code) of the OpenAI error body each ``status_*`` fault sends.
ERRORS: dict[int, tuple[str, str, str | None]] = {
    400: ("This model's maximum context length is 4096 tokens; your messages are longer "
          "(context too long).", "invalid_request_error", "context_length_exceeded"),
    401: ("Incorrect API key provided.", "authentication_error", "invalid_api_key"),
    403: ("You are not allowed to use this model.", "permission_error", "permission_denied"),
    404: ("The model does not exist or you do not have access to it.",
          "invalid_request_error", "model_not_found"),
    408: ("Request timed out.", "timeout_error", "timeout"),
    429: ("Rate limit reached for requests.", "rate_limit_error", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request.", "server_error", None),
    503: ("The engine is currently overloaded, please try again later.", "server_error",
          "service_unavailable"),
}


@dataclass(frozen=True)
class FaultOptions:
    """How a fault behaves (each option matters to some faults only).

    Attributes:
        after_tokens: Tokens sent normally before a mid-stream fault (``hang_mid``,
            ``trickle``, ``truncated``, ``cut``, ``error_event``, ``malformed``).
        late_s: Seconds before the first token (``late_first_token``).
        trickle_s: Seconds between tokens past ``after_tokens`` (``trickle``).
        retry_after_s: ``Retry-After`` (whole seconds, rounded up) on ``status_429`` and
            ``status_503``; ``None``: no header.

    Example:
        >>> FaultOptions(after_tokens=3).late_s
        8.0
    """

    after_tokens: int = 10
    late_s: float = 8.0
    trickle_s: float = 3.0
    retry_after_s: float | None = None

    def __post_init__(self) -> None:
        values = {"after_tokens": self.after_tokens, "late_s": self.late_s,
                  "trickle_s": self.trickle_s, "retry_after_s": self.retry_after_s or 0}
        negative = sorted(name for name, value in values.items() if value < 0)
        if negative:
            raise ValueError(f"fault options must not be negative: {negative}")


class Received(NamedTuple):
    """One POST the backend received: when (``time.monotonic()``), where, under which fault."""

    t: float
    path: str
    fault: str


class FaultState:
    """The current fault and the request log, shared by the caller's thread (reads) and
    the server's event loop (switches and requests)."""

    def __init__(self) -> None:
        self.fault: Fault = "healthy"
        self.options = FaultOptions()
        self.release = asyncio.Event()
        self._log: list[Received] = []
        self._lock = threading.Lock()

    def switch(self, fault: Fault, options: FaultOptions) -> None:
        """Make ``fault`` current and release the requests held by the one before."""
        old, self.release = self.release, asyncio.Event()
        self.fault, self.options = fault, options
        old.set()

    def received(self, path: str, fault: str) -> None:
        """Log one POST."""
        with self._lock:
            self._log.append(Received(time.monotonic(), path, fault))

    def log(self) -> list[Received]:
        """A copy of the log, oldest first."""
        with self._lock:
            return list(self._log)

    def reset_log(self) -> None:
        """Forget the POSTs received so far."""
        with self._lock:
            self._log.clear()
