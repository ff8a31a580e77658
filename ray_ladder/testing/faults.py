"""An OpenAI-compatible backend that fails on purpose, switched between faults while it runs.

:class:`FaultyBackend` serves :class:`~ray_ladder.serve.llm.models.CounterRung` (it counts
on from the last number of its context, so text lost or repeated across a move between
backends shows as a gap or a repeat in the count) through the project's own plain server
(:func:`ray_ladder.serve.llm.standalone.openai_app`), behind a fault layer
(:mod:`ray_ladder.testing.fault_app`; the faults' names and options:
:mod:`ray_ladder.testing.fault_state`), on loopback, in a thread of its own. Tests and
benches run every fault of :data:`FAULTS` against the ladder's ``OpenAIBackendRung`` and
against other clients (docs/testing.md, "A backend that fails on purpose").

Faults apply to ``POST /v1/chat/completions`` and ``/v1/completions``; ``GET /v1/models``
stays healthy unless the fault is ``refused`` or ``silent``: a health check that passes
while the answers fail is the realistic hard case.

From the command line (a backend for a bench in another process; each line on stdin
switches it: ``FAULT [after_tokens=N] [late_s=S] [trickle_s=S] [retry_after_s=S]``)::

    python -m ray_ladder.testing.faults --model primary --port 8001 --fault silent
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ray_ladder.testing.fault_app import FaultLayer
from ray_ladder.testing.fault_state import FAULTS, Fault, FaultOptions, FaultState, Received

__all__ = ["FAULTS", "Fault", "FaultOptions", "FaultyBackend", "Received", "main",
           "parse_command"]

T = TypeVar("T")
#: Longest wait for the server's loop to apply a switch, start or stop.
CALL_TIMEOUT_S = 30.0


class FaultyBackend:
    """A CounterRung OpenAI-compatible server on loopback whose fault can be switched while
    it runs.

    Args:
        model: The model name it answers to (and lists on ``/v1/models``).
        tokens_per_s: CounterRung's pace (0: as fast as it can).
        port: The port (default: a free one, chosen at :meth:`start` and kept across
            ``refused`` and back).
        host: The address it listens on.

    Example:
        >>> with FaultyBackend("primary") as backend:  # doctest: +SKIP
        ...     client = openai.OpenAI(base_url=backend.url, api_key="unused")
        ...     backend.set_fault("status_503", retry_after_s=5)
        ...     backend.set_fault("healthy")
    """

    def __init__(self, model: str, tokens_per_s: float = 50.0, port: int | None = None, *,
                 host: str = "127.0.0.1") -> None:
        self.model = model
        self.tokens_per_s = tokens_per_s
        self.port = port
        self.host = host
        self._state = FaultState()
        self._layer: FaultLayer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._listener: asyncio.AbstractServer | None = None
        self._factory: Any = None
        self._server_state: Any = None

    # --- what it is doing ---------------------------------------------------------------

    @property
    def url(self) -> str:
        """The OpenAI base URL, ``http://127.0.0.1:PORT/v1`` (known once started)."""
        if self.port is None:
            raise RuntimeError("FaultyBackend is not started (its port is chosen then)")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def fault(self) -> Fault:
        """The current fault."""
        return self._state.fault

    @property
    def options(self) -> FaultOptions:
        """The current fault's options."""
        return self._state.options

    @property
    def requests(self) -> int:
        """POSTs received since the start (or :meth:`reset_log`), whatever the fault did."""
        return len(self._state.log())

    @property
    def log(self) -> list[Received]:
        """``(t, path, fault)`` of every POST received, oldest first; ``t`` is
        ``time.monotonic()`` when it arrived."""
        return self._state.log()

    def reset_log(self) -> None:
        """Forget the POSTs received so far (:attr:`requests` starts again at 0)."""
        self._state.reset_log()

    # --- switching ----------------------------------------------------------------------

    def set_fault(self, name: Fault, *, after_tokens: int = 10, late_s: float = 8.0,
                  trickle_s: float = 3.0, retry_after_s: float | None = None) -> None:
        """Switch to fault ``name`` (options not given take their defaults).

        Returns once the switch holds: after ``refused``, the port refuses connections (and
        the connections open before are closed); after any other fault that follows
        ``refused``, it listens again on the same port. Every switch releases the requests
        waiting in the fault before it (``silent``, ``hang_mid``: their connections are
        closed; ``late_first_token``, ``trickle``: they go on at the normal pace).

        Raises:
            ValueError: An unknown fault (the message lists them) or a negative option.
        """
        if name not in FAULTS:
            raise ValueError(f"unknown fault {name!r}; faults: {', '.join(FAULTS)}")
        options = FaultOptions(after_tokens, late_s, trickle_s, retry_after_s)
        if self._loop is None:
            self._state.switch(name, options)
        else:
            self._call(self._switch(name, options))

    async def _switch(self, name: Fault, options: FaultOptions) -> None:
        self._state.switch(name, options)
        if name == "refused":
            self._close_listener()
            self._close_connections()
        elif self._listener is None:
            await self._listen()

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> FaultyBackend:
        """Listen (refusing at once if the fault is already ``refused``); return self."""
        if self._loop is not None:
            raise RuntimeError("FaultyBackend is already started")
        import uvicorn
        from uvicorn.server import ServerState

        from ray_ladder.serve.llm.models import CounterRung
        from ray_ladder.serve.llm.standalone import openai_app

        app = openai_app(CounterRung, self.model,
                         init_kwargs={"tokens_per_s": self.tokens_per_s})
        self._layer = FaultLayer(app, self._state, self.model)
        config = uvicorn.Config(self._layer, host=self.host, log_config=None,
                                access_log=False, lifespan="off", ws="none", http="h11",
                                interface="asgi3", proxy_headers=False)
        config.load()
        self._server_state = ServerState()
        protocol: Any = config.http_protocol_class
        self._factory = lambda: protocol(  # as uvicorn.Server.startup builds one
            config=config, server_state=self._server_state, app_state={})
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"FaultyBackend-{self.model}")
        self._thread.start()
        try:
            self._call(self._listen())
            if self.fault == "refused":
                self._call(self._switch("refused", self.options))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Close every connection (held requests included) and stop the server's thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self._call(self._shutdown())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(CALL_TIMEOUT_S)
            loop.close()
            self._loop = self._thread = None

    async def _listen(self) -> None:
        assert self._loop is not None
        self._listener = await self._loop.create_server(
            self._factory, self.host, self.port or 0, reuse_address=True)
        self.port = int(self._listener.sockets[0].getsockname()[1])

    def _close_listener(self) -> None:
        if self._listener is not None:
            self._listener.close()  # the listening socket closes now: connects are refused
            self._listener = None

    def _close_connections(self, abort: bool = False) -> None:
        for connection in list(self._server_state.connections):
            if abort:
                connection.transport.abort()
            else:
                connection.transport.close()

    async def _shutdown(self) -> None:
        assert self._layer is not None
        self._state.switch(self._state.fault, self._state.options)  # release held requests
        self._close_listener()
        self._close_connections(abort=True)
        await asyncio.sleep(0)  # the server sees each connection go before its task ends
        self._layer.closing = True  # a request cancelled now ends without a word
        tasks = list(self._server_state.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("FaultyBackend is driven from another thread than its server's")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(CALL_TIMEOUT_S)

    def __enter__(self) -> FaultyBackend:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"port {self.port}" if self._loop is not None else "stopped"
        return f"FaultyBackend({self.model!r}, {where}, fault={self.fault!r})"


def parse_command(line: str) -> tuple[Fault, dict[str, Any]]:
    """One stdin command: ``FAULT [key=value ...]`` -> the fault and its options.

    Example:
        >>> parse_command("status_503 retry_after_s=5")
        ('status_503', {'retry_after_s': 5.0})
    """
    name, *pairs = line.split()
    options: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if key not in FaultOptions.__dataclass_fields__:
            raise ValueError(f"unknown option {key!r}; options: "
                             f"{', '.join(FaultOptions.__dataclass_fields__)}")
        options[key] = int(value) if key == "after_tokens" else float(value)
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r}; faults: {', '.join(FAULTS)}")
    return name, options  # type: ignore[return-value]


def _read_commands(backend: FaultyBackend) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            name, options = parse_command(line)
            backend.set_fault(name, **options)
        except (ValueError, TypeError) as err:
            print(f"faults: {err}", file=sys.stderr, flush=True)
            continue
        print(f"fault {backend.fault} {backend.options}", flush=True)


def main(argv: list[str] | None = None) -> None:
    """Run one :class:`FaultyBackend` until SIGINT or SIGTERM; stdin switches its fault."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model name the server answers to")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=None, help="default: a free port")
    parser.add_argument("--tokens-per-s", type=float, default=50.0)
    parser.add_argument("--fault", default="healthy", choices=FAULTS)
    parser.add_argument("--after-tokens", type=int, default=10)
    parser.add_argument("--late-s", type=float, default=8.0)
    parser.add_argument("--trickle-s", type=float, default=3.0)
    parser.add_argument("--retry-after-s", type=float, default=None)
    args = parser.parse_args(argv)
    backend = FaultyBackend(args.model, args.tokens_per_s, args.port, host=args.host)
    backend.set_fault(args.fault, after_tokens=args.after_tokens, late_s=args.late_s,
                      trickle_s=args.trickle_s, retry_after_s=args.retry_after_s)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    with backend:
        print(f"listening {backend.url} fault {backend.fault}", flush=True)
        threading.Thread(target=_read_commands, args=(backend,), daemon=True).start()
        while not stopping.wait(0.5):
            pass


if __name__ == "__main__":
    main()
