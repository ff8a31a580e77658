"""Two real Ray clusters and an S3 API server on one machine: the stage of the tests and of
``bench/clusters.py`` (an on-prem cluster, a cloud cluster, checkpoints in S3).

Each site is a :class:`~ray_ladder.testing.LocalCluster` with Ray's dashboard (its Job
Submission API and state API) and one node type ``gpu`` that advertises ``ladder/gpu``.
The S3 server is moto's, in server mode on loopback (``pip install 'moto[server]'``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil

from ray_ladder._lazy import requires_extra
from ray_ladder.testing import LocalCluster, NodeHandle, free_port, open_loop

#: moto's documented fake credentials (moto accepts any; pyarrow's S3 client wants some).
FAKE_AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1"}
GPU = "ladder/gpu"


@contextlib.contextmanager
def s3_server(bucket: str = "ladder") -> Iterator[str]:
    """A moto S3 server on 127.0.0.1 with ``bucket``; yields the run storage URI
    (``s3://BUCKET/runs?endpoint_override=...``). Sets the fake ``AWS_*`` credentials in
    this process's environment, so clusters started afterwards inherit them."""
    with requires_extra("jobs", "the S3 stage"):
        import pyarrow.fs as pafs
    with requires_extra("test", "the S3 stage"):
        from moto.server import ThreadedMotoServer

    previous = {key: os.environ.get(key) for key in FAKE_AWS}
    for key, value in FAKE_AWS.items():
        os.environ.setdefault(key, value)
    port = free_port()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per S3 call
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"127.0.0.1:{port}"
        fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http",
                               region="us-east-1", allow_bucket_creation=True)
        fs.create_dir(bucket)
        yield f"s3://{bucket}/runs?endpoint_override={endpoint}&scheme=http&region=us-east-1"
    finally:
        server.stop()
        for key in FAKE_AWS:
            _restore(key, previous[key])


@dataclass
class Site:
    """One cluster of the stage: its dashboard address and its GPU nodes."""

    name: str
    cluster: LocalCluster
    gcs: str = ""
    head_killed: bool = False

    @property
    def address(self) -> str:
        """Its dashboard (Job Submission API) address, ``http://127.0.0.1:PORT``."""
        url = self.cluster._cluster.head_node.address_info["webui_url"]
        return url if "://" in url else f"http://{url}"

    def gpu_nodes(self) -> list[NodeHandle]:
        """Its GPU nodes now."""
        return self.cluster.nodes("gpu")

    def add_gpu(self) -> NodeHandle:
        """Start a GPU node (capacity returns); its processes see this cluster's address."""
        with _ray_address(self.gcs):
            return self.cluster.add_node("gpu")

    def kill_gpu(self) -> None:
        """SIGKILL every GPU node of this cluster (a lost node)."""
        for node in self.gpu_nodes():
            self.cluster.remove_node(node)

    def kill_head(self) -> None:
        """SIGKILL the head's processes and their children (the whole cluster's control
        plane, its dashboard and job drivers included), then its GPU nodes."""
        head = self.cluster._cluster.head_node
        procs: list[Any] = []
        for infos in head.all_processes.values():
            for info in infos:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc = psutil.Process(info.process.pid)
                    procs += [proc, *proc.children(recursive=True)]
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        self.head_killed = True
        for node in self.gpu_nodes():
            with contextlib.suppress(Exception):
                self.cluster.remove_node(node)

    def shutdown(self) -> None:
        """Stop what is left of the cluster."""
        with contextlib.suppress(Exception):
            self.cluster.shutdown()


def start_site(name: str, *, gpu_nodes: int = 1) -> Site:
    """Start one site: a head (1 CPU) with the dashboard and ``gpu_nodes`` GPU nodes."""
    # With the dashboard, LocalCluster has its own temp directory: a job's driver joins
    # the cluster named in its ray_current_cluster file, which two clusters must not share.
    cluster = LocalCluster({"gpu": {"num_cpus": 1, "resources": {GPU: 1}}},
                           initial={"gpu": gpu_nodes}, head={"num_cpus": 1},
                           connect=False, include_dashboard=True, log_to_driver=False)
    previous = os.environ.get("RAY_ADDRESS")
    cluster.start()
    site = Site(name, cluster, gcs=os.environ.get("RAY_ADDRESS", ""))
    # LocalCluster pins RAY_ADDRESS for its own processes; the next site pins its own.
    _restore("RAY_ADDRESS", previous)
    return site


@contextlib.contextmanager
def _ray_address(value: str) -> Iterator[None]:
    previous = os.environ.get("RAY_ADDRESS")
    os.environ["RAY_ADDRESS"] = value
    try:
        yield
    finally:
        _restore("RAY_ADDRESS", previous)


def _restore(key: str, previous: str | None) -> None:
    if previous is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = previous


@dataclass
class JobWatch:
    """Polls every site's Job Submission API, and this machine's processes, and records
    when a run's jobs were RUNNING on each site and how many of its drivers were alive: the
    evidence that a run never ran in two clusters at once.

    Attributes:
        script: The job's script path: the drivers counted are the live processes that
            run ``python SCRIPT``.
        samples: ``(time, {site: running submission ids}, live drivers)`` per poll.
    """

    sites: list[Site]
    run: str
    script: str = ""
    interval_s: float = 0.1
    samples: list[tuple[float, dict[str, list[str]], int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> JobWatch:
        """Start polling in a thread."""
        self._thread = threading.Thread(target=self._loop, daemon=True, name="job-watch")
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def running(self) -> dict[str, list[str]]:
        """Site -> the run's submission ids RUNNING there now (a dead head: none)."""
        from ray.job_submission import JobSubmissionClient

        out: dict[str, list[str]] = {}
        for site in self.sites:
            if site.head_killed:
                out[site.name] = []
                continue
            try:
                jobs = JobSubmissionClient(site.address).list_jobs()
            except Exception:
                continue
            out[site.name] = sorted(
                str(j.submission_id) for j in jobs
                if (j.metadata or {}).get("ray_ladder_run") == self.run
                and str(j.status).rsplit(".", 1)[-1] == "RUNNING")
        return out

    def drivers(self) -> int:
        """Live processes running the job's script (0 without ``script``)."""
        if not self.script:
            return 0
        count = 0
        for proc in psutil.process_iter(["cmdline", "status"]):
            cmdline = proc.info.get("cmdline") or []
            # `python SCRIPT ...`: not the shell that starts it, not a runner naming it.
            if (proc.info.get("status") != psutil.STATUS_ZOMBIE and len(cmdline) > 1
                    and cmdline[1] == self.script):
                count += 1
        return count

    def overlap_s(self) -> float:
        """Seconds during which two sites both had one of the run's jobs RUNNING, or two
        of its drivers were alive."""
        total = 0.0
        for (t0, seen, drivers), (t1, _, _) in zip(self.samples, self.samples[1:],
                                                   strict=False):
            if sum(1 for ids in seen.values() if ids) > 1 or drivers > 1:
                total += t1 - t0
        return total

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self.running(), self.drivers()))
            self._stop.wait(self.interval_s)


class EchoRung:
    """A JSON rung that answers with the payload and the name of the rung that answered
    (which cluster's rung took a request shows in the answer)."""

    def __init__(self, rung: Any) -> None:
        self.rung = rung

    def __call__(self, payload: Any) -> Any:
        """``{"echo": payload, "by": RUNG}``."""
        return {"echo": payload, "by": self.rung.name}


def deploy_serve(gcs_address: str, port: int, apps: dict[str, tuple[str, Any]]) -> None:
    """Start Serve on the cluster at ``gcs_address`` (HTTP on 127.0.0.1:``port``), run
    ``apps`` (route prefix -> (name, app)) and disconnect: the apps keep running."""
    import ray
    from ray import serve

    ray.init(address=gcs_address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port},
                    proxy_location="HeadOnly")
        for prefix, (name, app) in apps.items():
            serve.run(app, name=name, route_prefix=prefix)
    finally:
        ray.shutdown()


def counter_stream(url: str, start: int, tokens: int, model: str,
                   client: Any = None) -> dict[str, Any]:
    """Stream ``tokens`` pieces from ``URL/v1/completions`` counting on from ``start``
    (a ladder app of ``CounterRung``s serving ``model``, its ladder's name):
    ``{"status", "pieces": [(rung, text)], ...}``; status ``"broken"`` when an error chunk
    arrives mid-stream. ``client``: an ``httpx.Client`` to share (a client per call
    loads the CA bundle each time: a load generator's whole core on this machine)."""
    with requires_extra("llm", "counter_stream"):
        import httpx

    pieces: list[tuple[str, str]] = []
    with (client or httpx).stream("POST", url + "/v1/completions", timeout=60, json={
            "model": model, "prompt": str(start), "max_tokens": tokens,
            "stream": True}) as reply:
        if reply.status_code != 200:
            return {"status": reply.status_code, "pieces": pieces}
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    return {"status": "broken", "pieces": pieces, "error": chunk["error"]}
                if chunk["choices"] and chunk["choices"][0]["text"]:
                    pieces.append((chunk["ladder"]["rung"], chunk["choices"][0]["text"]))
    return {"status": 200, "pieces": pieces}


def mixed_load(llm_url: str, json_url: str, rate: float, seconds: float,
               tokens: int, model: str) -> list[dict[str, Any]]:
    """Open-loop load at ``rate`` a second: odd calls stream a counter from ``llm_url``
    (:func:`counter_stream`, counting from ``1000 * call``), even calls POST JSON to
    ``json_url``. Each result: ``kind``, ``status``, ``sent`` (monotonic), ``latency_s``,
    and ``pieces``/``start`` (streams) or ``by`` (the JSON answer's rung)."""
    with requires_extra("llm", "mixed_load"):
        import httpx

    client = httpx.Client(limits=httpx.Limits(max_connections=None))

    def send(i: int) -> dict[str, Any]:
        sent = time.monotonic()
        if i % 2:
            out = {"kind": "stream", "start": 1000 * i,
                   **counter_stream(llm_url, 1000 * i, tokens, model, client)}
        else:
            try:
                reply = client.post(json_url + "/", json={"n": i}, timeout=30)
                out = {"kind": "json", "status": reply.status_code,
                       "by": reply.json().get("by") if reply.status_code == 200 else None}
            except httpx.HTTPError as err:
                out = {"kind": "json", "status": type(err).__name__, "by": None}
        return {**out, "sent": sent, "latency_s": time.monotonic() - sent}

    with client:
        return open_loop(send, rate, seconds)
