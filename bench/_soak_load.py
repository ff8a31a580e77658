"""The soak's load: HTTP requests, OpenAI streams and ladder-task calls, each a thread
that keeps what every client saw (bench/soak.py counts it)."""

from __future__ import annotations

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import ray

EU = {"X-Ladder-Jurisdiction": "eu"}
#: How long a client waits for an answer before it counts the request failed. Serve's
#: proxy holds requests while the router replica's replacement starts, which took 45-60 s
#: on two cores at load 20 (the soak late in `make test`): latency is reported apart
#: (max_latency_s); a failure is a request that was not answered.
CLIENT_TIMEOUT_S = 120.0


@dataclass
class Outcome:
    """One request, stream or call as its client saw it."""

    eu: bool
    sent: float
    ok: bool = False
    latency_s: float = 0.0
    rungs: list[str] = field(default_factory=list)
    error: str | None = None


class Paced(threading.Thread):
    """Calls ``self.once(i)`` ``rate`` times a second until stopped."""

    def __init__(self, rate: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.rate = rate
        self.rng = random.Random(seed)
        self.outcomes: list[Outcome] = []
        self.stop_event = threading.Event()

    def once(self, i: int) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def run(self) -> None:
        start = time.monotonic()
        i = 0
        while not self.stop_event.is_set():
            self.once(i)
            i += 1
            self.stop_event.wait(max(0.0, start + i / self.rate - time.monotonic()))

    def stop(self) -> None:
        self.stop_event.set()


class Requests(Paced):
    """JSON-route POSTs, half of them bound to the EU by header."""

    def __init__(self, url: str, rate: float, seed: int) -> None:
        super().__init__(rate, seed)
        self.url = url
        self.client = httpx.Client(timeout=CLIENT_TIMEOUT_S)

    def once(self, i: int) -> None:
        eu = self.rng.random() < 0.5
        out = Outcome(eu, time.monotonic())
        try:
            r = self.client.post(self.url + "/", json={"i": i}, headers=EU if eu else {})
            out.ok = r.status_code == 200
            out.rungs = [r.headers.get("x-ladder-rung", "?")]
            if not out.ok:
                out.error = f"HTTP {r.status_code}: {r.text[:200]}"
        except httpx.HTTPError as err:
            out.error = f"{type(err).__name__}: {err}"
        out.latency_s = time.monotonic() - out.sent
        self.outcomes.append(out)


class Streams(Paced):
    """Streamed chat completions on the OpenAI-compatible route, each in a pool thread."""

    def __init__(self, url: str, rate: float, seed: int, model: str) -> None:
        super().__init__(rate, seed)
        self.url, self.model = url, model
        self.pool = ThreadPoolExecutor(8)
        self.futures: list[Any] = []

    def once(self, i: int) -> None:
        eu = self.rng.random() < 0.5
        out = Outcome(eu, time.monotonic())
        self.outcomes.append(out)
        self.futures.append(self.pool.submit(self._stream, out, 10 + i % 10))

    def _stream(self, out: Outcome, tokens: int) -> None:
        body = {"model": self.model, "messages": [{"role": "user", "content": "count"}],
                "max_tokens": tokens, "stream": True}
        done, count = False, 0
        try:
            with httpx.stream("POST", self.url + "/v1/chat/completions", json=body,
                              headers=EU if out.eu else {}, timeout=CLIENT_TIMEOUT_S) as response:
                if response.status_code != 200:
                    out.error = f"HTTP {response.status_code}: {response.read()[:200]!r}"
                    out.latency_s = time.monotonic() - out.sent
                    return
                for line in response.iter_lines():
                    if not line.startswith("data: "):
                        continue
                    if line[6:] == "[DONE]":
                        done = True
                        break
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        out.error = str(chunk["error"].get("message"))
                        continue
                    if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                        count += 1
                        rung = chunk.get("ladder", {}).get("rung", "?")
                        if rung not in out.rungs:
                            out.rungs.append(rung)
        except Exception as err:  # counted as a broken stream
            out.error = f"{type(err).__name__}: {err}"
        out.ok = done and out.error is None and count == tokens
        if done and count != tokens and out.error is None:
            out.error = f"{count} of {tokens} tokens"
        out.latency_s = time.monotonic() - out.sent

    def stop(self) -> None:
        super().stop()
        self.join()
        for fut in self.futures:
            fut.result(timeout=120)
        self.pool.shutdown()


class Tasks(Paced):
    """``@ladder_task`` calls, half with EU constraints; a collector records answers."""

    def __init__(self, task: Any, eu_task: Any, rate: float, seed: int) -> None:
        super().__init__(rate, seed)
        self.task, self.eu_task = task, eu_task
        self.pending: dict[Any, Outcome] = {}
        self.lock = threading.Lock()

    def once(self, i: int) -> None:
        eu = self.rng.random() < 0.5
        out = Outcome(eu, time.monotonic())
        ref = (self.eu_task if eu else self.task).remote(i, self.rng.uniform(0.02, 0.3))
        with self.lock:
            self.pending[ref] = out
            self.outcomes.append(out)

    def collect(self, timeout_s: float = 0.5) -> None:
        """Record the calls finished now (the main loop calls this between chaos steps)."""
        with self.lock:
            refs = list(self.pending)
        if not refs:
            return
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s, fetch_local=True)
        for ref in ready:
            with self.lock:
                out = self.pending.pop(ref)
            try:
                _, rung = ray.get(ref)
                out.ok, out.rungs = True, [rung]
            except Exception as err:  # a lost call
                out.error = f"{type(err).__name__}: {str(err)[:300]}"
            out.latency_s = time.monotonic() - out.sent

    def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for every call still in flight; the rest count lost."""
        deadline = time.monotonic() + timeout_s
        while self.pending and time.monotonic() < deadline:
            self.collect(1.0)
        for out in self.pending.values():
            out.error = f"not answered within {timeout_s}s after the load stopped"
