"""Serving across two real Ray clusters on one machine, for the tests and
``bench/clusters_serving.py``: a cloud cluster whose ladder apps (an LLM app of
``CounterRung`` on ``/llm``, a JSON app of :class:`EchoRung` on ``/json``) sit as the
second rung of an on-prem cluster's apps (``OpenAIBackendRung`` / ``RemoteLadderRung``
with ``cluster: cloud``), under an on-prem top rung ``h100`` on a node of its own."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from ray_ladder._lazy import requires_extra
from ray_ladder.cluster import ray_private
from ray_ladder.core.spec import Ladder
from ray_ladder.jobs.sandbox import EchoRung, deploy_serve
from ray_ladder.testing import LocalCluster, free_port, wait_until

#: Generous health checks: two clusters share two cores here, and a replica restarted for
#: a slow check would send the load off its rung. A killed node's replicas are noticed
#: dead by Ray (their actors die), not by these checks.
DEPLOYMENT = {"graceful_shutdown_timeout_s": 1.0, "max_ongoing_requests": 64,
              "health_check_period_s": 2.0, "health_check_timeout_s": 10.0}
TOKENS_PER_S = 10
#: The cloud rung's HTTP timeout (between two pieces of a stream, too): both clusters share
#: two cores here, and a starved cloud app paused over 5 s under a loaded CI machine's load
#: (the rung went down and its streams broke). A cloud that is gone refuses at once.
CLOUD_TIMEOUT_S = 15


def onprem_ladder(cloud_serve: str, name: str, prefix: str) -> Ladder:
    """The on-prem app's ladder: ``h100`` here, then the cloud cluster's app at
    ``cloud_serve`` + ``prefix``, then shed."""
    return Ladder.from_dict({
        "name": name, "policy": {"probe_interval_s": 0.25},
        "clusters": {"cloud": {"address": "http://127.0.0.1:8265", "serve": cloud_serve,
                               "site": "cloud", "jurisdiction": "eu"}},
        "rungs": [
            {"name": "h100", "resources": {"ladder/h100": 1},
             "params": {"tokens_per_s": TOKENS_PER_S},
             "tags": {"site": "onprem", "jurisdiction": "eu"}},
            {"name": "cloud", "cluster": "cloud", "num_cpus": 0.1, "standby_replicas": 1,
             "params": {"model": "cloud", "timeout_s": CLOUD_TIMEOUT_S, "route_prefix": prefix}},
            {"name": "shed", "kind": "shed"}]})


def _site(name: str, node_types: dict[str, Any]) -> LocalCluster:
    temp_dir = tempfile.mkdtemp(prefix=f"ray-{name}-", dir="/tmp")
    os.environ.pop("RAY_ADDRESS", None)
    cluster = LocalCluster(node_types, head={"num_cpus": 2}, connect=False,
                           temp_dir=temp_dir).start()
    ray_private.write_current_cluster(cluster.address, temp_dir)
    return cluster


@contextlib.contextmanager
def serving_stage() -> Iterator[dict[str, Any]]:
    """Both clusters with their apps, the on-prem apps on ``h100``; yields ``url`` (the
    on-prem Serve), ``cloud_url`` and ``onprem`` (its :class:`LocalCluster`)."""
    from ray_ladder.serve import RemoteLadderRung, build_app
    from ray_ladder.serve.llm.backend import OpenAIBackendRung
    from ray_ladder.serve.llm.models import CounterRung

    opts = {"deployment_options": {"cloud-cpu": DEPLOYMENT}}
    cloud_ladder = Ladder.from_dict({"name": "cloud", "rungs": [
        {"name": "cloud-cpu", "num_cpus": 0.1, "standby_replicas": 1,
         "params": {"tokens_per_s": TOKENS_PER_S}}]})
    sites: list[LocalCluster] = []
    try:
        sites.append(_site("cloud", {}))
        cloud_url = f"http://127.0.0.1:{free_port()}"
        deploy_serve(sites[0].address, int(cloud_url.rsplit(":", 1)[1]), {
            "/llm": ("cloud-llm", build_app(cloud_ladder, {"cloud-cpu": CounterRung}, **opts)),
            "/json": ("cloud-json", build_app(cloud_ladder, {"cloud-cpu": EchoRung}, **opts))})
        # A CPU and a unit for each app's top rung replica (the LLM app's, the JSON app's).
        sites.append(_site("onprem", {"h100": {"num_cpus": 2,
                                               "resources": {"ladder/h100": 2}}}))
        url = f"http://127.0.0.1:{free_port()}"
        both = {"deployment_options": {"h100": DEPLOYMENT, "cloud": DEPLOYMENT}}
        deploy_serve(sites[1].address, int(url.rsplit(":", 1)[1]), {
            # Two names: two apps of one ladder name share the ladder's state in a cluster.
            "/llm": ("onprem-llm", build_app(onprem_ladder(cloud_url, "onprem", "/llm"), {
                "h100": CounterRung, "cloud": OpenAIBackendRung}, **both)),
            "/json": ("onprem-json", build_app(onprem_ladder(cloud_url, "onprem-json",
                                                             "/json"), {
                "h100": EchoRung, "cloud": RemoteLadderRung}, **both))})
        with requires_extra("llm", "serving_stage"):
            import httpx

        for prefix in ("/llm", "/json"):
            wait_until(lambda p=prefix: httpx.get(f"{url}{p}/-/ladder").json()["current"]
                       == "h100", 120, 0.2, f"{prefix} on its top rung")
        yield {"url": url, "cloud_url": cloud_url, "onprem": sites[1]}
    finally:
        for cluster in reversed(sites):
            cluster.shutdown()
