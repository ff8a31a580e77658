"""A rung that is another cluster's ladder app, on its JSON route (``POST /``): the cloud
cluster's ladder behind the on-prem one. The LLM route's counterpart is
:class:`~ray_ladder.serve.llm.backend.OpenAIBackendRung` (its ``/v1``; streams continue
across clusters as across rungs)."""

from __future__ import annotations

from typing import Any

from ray_ladder._lazy import requires_extra
from ray_ladder.core.context import RungContext
from ray_ladder.core.exceptions import RungUnavailableError
from ray_ladder.serve.llm.backend import cluster_url

with requires_extra("llm", "RemoteLadderRung"):
    import httpx


class RemoteLadderRung:
    """Forwards a JSON payload to another cluster's ladder app and returns its answer.

    Where: ``params.url``, else the rung's cluster (``cluster:`` with a ``serve``
    address) and ``params.route_prefix``. ``params.timeout_s`` (default 30) bounds an
    answer, ``params.connect_timeout_s`` (default 2) a connection.

    A refused connection, a timeout, a 5xx, 429 or 503 (the other ladder is exhausted)
    raise :class:`~ray_ladder.RungUnavailableError`: this ladder falls past the rung. A
    4xx is the payload's fault (``ValueError``: 400). The rung is healthy while the
    other app's ``GET /-/ladder`` answers.

    Example:
        >>> # clusters: {cloud: {address: "http://10.8.0.1:8265", serve: "http://10.8.0.1:8000"}}
        >>> # rungs: - {name: cloud, cluster: cloud, num_cpus: 0.1}
        >>> build_app(ladder, {"h100": Model, "cloud": RemoteLadderRung})  # doctest: +SKIP
    """

    def __init__(self, rung: RungContext, url: str | None = None) -> None:
        params = rung.params
        self.url = str(url or params.get("url") or cluster_url(rung, "")).rstrip("/")
        if not self.url:
            raise ValueError(f"rung {rung.name}: give params.url or a cluster with a serve "
                             "address (rungs[].cluster)")
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(
            float(params.get("timeout_s", 30.0)),
            connect=float(params.get("connect_timeout_s", 2.0))))

    async def __call__(self, payload: Any) -> Any:
        """The other ladder's answer to ``payload``."""
        try:
            response = await self._client.post(self.url + "/", json=payload)
        except httpx.HTTPError as err:
            raise RungUnavailableError(f"{self.url}: {type(err).__name__}: {err}") from None
        if response.status_code >= 500 or response.status_code in (408, 429):
            raise RungUnavailableError(f"{self.url} answered {response.status_code}")
        if response.status_code >= 400:
            raise ValueError(f"{self.url} refused the payload ({response.status_code}): "
                             f"{response.text[:300]}")
        return response.json()

    async def check_health(self) -> None:
        """Serve's health check: the other app's ladder state answers."""
        try:
            response = await self._client.get(self.url + "/-/ladder", timeout=2.0)
        except httpx.HTTPError as err:
            raise RungUnavailableError(f"{self.url}/-/ladder: {err}") from None
        if response.status_code != 200:
            raise RungUnavailableError(f"{self.url}/-/ladder answered "
                                       f"{response.status_code}")
