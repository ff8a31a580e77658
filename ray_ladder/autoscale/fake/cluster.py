"""A local autoscaling Ray cluster (Ray's real autoscaler, fake nodes) that stops only itself."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from ray_ladder.autoscale.fake.schedule import CapacitySchedule, as_schedule
from ray_ladder.testing import HEAD_TYPE, NODE_TYPE_LABEL, free_port

logger = logging.getLogger(__name__)

PROVIDER_MODULE = "ray_ladder.autoscale.fake.provider.StockoutProvider"
HEAD_NODE_TYPE = "ray.head.default"
_MIB = 2**20
# Everything a full cluster config has; the monitor's validator wants them present.
_EMPTY_SECTIONS: dict[str, Any] = {
    "docker": {}, "initialization_commands": [], "setup_commands": [],
    "head_setup_commands": [], "worker_setup_commands": [], "head_start_ray_commands": [],
    "worker_start_ray_commands": [], "file_mounts": {}, "cluster_synced_files": [],
    "file_mounts_sync_continuously": False, "rsync_exclude": [], "rsync_filter": [],
    "auth": {"ssh_user": "ray"},
}


def fake_worker_type(resources: Mapping[str, float], *, labels: Mapping[str, str] | None = None,
                     max_workers: int = 1, min_workers: int = 0,
                     object_store_mib: int = 80) -> dict[str, Any]:
    """An ``available_node_types`` entry for a fake node (``CPU`` defaults to 1).

    Example:
        >>> fake_worker_type({"ladder/h100": 1})["resources"]["CPU"]
        1
    """
    res: dict[str, Any] = {"CPU": 1, **resources}
    res.setdefault("object_store_memory", object_store_mib * _MIB)
    return {"resources": res, "labels": dict(labels or {}), "node_config": {},
            "min_workers": min_workers, "max_workers": max_workers}


def fake_cluster_config(worker_types: Mapping[str, Mapping[str, Any]], *,
                        head_resources: Mapping[str, float] | None = None,
                        idle_timeout_minutes: float = 0.1, upscaling_speed: float = 1.0,
                        provider: Mapping[str, Any] | None = None,
                        cluster_name: str = "ray-ladder-fake") -> dict[str, Any]:
    """A complete autoscaling config for the stock-out fake provider (``ray start`` reads it)."""
    types = {name: dict(t) for name, t in worker_types.items()}
    types[HEAD_NODE_TYPE] = {"resources": dict(head_resources or {"CPU": 1}),
                             "node_config": {}, "max_workers": 0}
    prov = {"type": "external", "module": PROVIDER_MODULE, "use_node_id_as_ip": True,
            "disable_node_updaters": True, "disable_launch_config_check": True,
            **(provider or {})}
    return {"cluster_name": cluster_name,
            "max_workers": sum(int(t.get("max_workers", 1)) for t in worker_types.values()),
            "upscaling_speed": upscaling_speed, "idle_timeout_minutes": idle_timeout_minutes,
            "provider": prov, "available_node_types": types, "head_node_type": HEAD_NODE_TYPE,
            **_EMPTY_SECTIONS}


def _session_pids(sid: int) -> list[int]:
    """Every live process of session ``sid`` (Ray's daemons never leave their session)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            if os.getsid(pid) == sid and pid != os.getpid():
                with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":  # skip zombies
                        pids.append(pid)
        except (OSError, IndexError):
            continue
    return pids


class FakeAutoscalingCluster:
    """A head started with Ray's real autoscaler and the stock-out fake node provider.

    Unlike ``ray.cluster_utils.AutoscalingCluster`` it never runs ``ray stop``: the head is
    started in a new session with its own temp dir and ports, and :meth:`shutdown` stops
    exactly the processes of that session (head daemons, the autoscaler monitor, every fake
    node it launched and their workers), then checks that none is left.

    Args:
        worker_types: Autoscaler node types (see :func:`fake_worker_type`).
        head_resources: The head's resources (``CPU`` and custom ones).
        head_labels: Extra labels of the head (it always has ``ladder.node-type=head``).
        schedule: When launches are refused (script, dict or :class:`CapacitySchedule`).
        idle_timeout_minutes: The autoscaler's idle timeout.
        system_config: ``_system_config`` for the head (default: Ray's).
        env: Extra environment for the Ray processes.

    Example:
        >>> with FakeAutoscalingCluster({"h100": fake_worker_type({"ladder/h100": 1})},
        ...                             schedule="h100 unavailable") as c:  # doctest: +SKIP
        ...     ray.init(address=c.address)
    """

    def __init__(self, worker_types: Mapping[str, Mapping[str, Any]], *,
                 head_resources: Mapping[str, float] | None = None,
                 head_labels: Mapping[str, str] | None = None,
                 schedule: CapacitySchedule | Mapping[str, Any] | str | None = None,
                 idle_timeout_minutes: float = 0.1,
                 system_config: Mapping[str, Any] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.worker_types = {k: dict(v) for k, v in worker_types.items()}
        self.head_resources = dict(head_resources or {"CPU": 1})
        self.head_labels = {NODE_TYPE_LABEL: HEAD_TYPE, **(head_labels or {})}
        self._schedule = as_schedule(schedule)
        self.idle_timeout_minutes = idle_timeout_minutes
        # Ray's default health checks: the fast ones of LocalCluster (a killed node seen in
        # ~1 s) mark a live but starved raylet dead on a loaded machine, head included, and
        # here nodes leave gracefully (the autoscaler terminates them).
        self.system_config = dict(system_config or {})
        self.env = dict(env or {})
        self.dir: Path | None = None
        self.port: int | None = None
        self.sid: int | None = None
        self.epoch: float | None = None

    @property
    def address(self) -> str:
        """The GCS address (``ray.init(address=...)``)."""
        if self.port is None:
            raise RuntimeError("FakeAutoscalingCluster is not started")
        from ray_ladder.cluster import ray_private

        return f"{ray_private.node_ip_address()}:{self.port}"

    @property
    def schedule_path(self) -> Path:
        """The schedule file the provider re-reads."""
        return self._path("schedule.yaml")

    @property
    def events_path(self) -> Path:
        """The provider's JSON-lines log of launches, refusals and terminations."""
        return self._path("provider-events.jsonl")

    def _path(self, name: str) -> Path:
        if self.dir is None:
            raise RuntimeError("FakeAutoscalingCluster is not started")
        return self.dir / name

    def start(self, attempts: int = 3) -> FakeAutoscalingCluster:
        """Start the head (and so the autoscaler); returns when the GCS answers.

        Ray gives a raylet 30 s to register; on a loaded machine that can fail, so the
        start is tried ``attempts`` times (each failed try is stopped completely).
        """
        for attempt in range(attempts):
            try:
                return self._start_once()
            except RuntimeError:
                if attempt == attempts - 1:
                    raise
                logger.warning("fake cluster head failed to start; trying again")
        return self

    def _start_once(self) -> FakeAutoscalingCluster:
        # A short path: Ray's unix sockets live under it (107-byte limit).
        self.dir = Path(tempfile.mkdtemp(prefix="rlf-", dir="/tmp"))
        self.port = free_port()
        self.epoch = time.time()
        self.set_schedule(self._schedule)
        config = fake_cluster_config(
            self.worker_types, head_resources=self.head_resources,
            idle_timeout_minutes=self.idle_timeout_minutes,
            provider={"gcs_address": self.address,
                      "capacity_schedule": str(self.schedule_path),
                      "events_log": str(self.events_path)})
        config_path = self._path("autoscaling.yaml")
        config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        head = dict(self.head_resources)
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head",
               f"--port={self.port}", f"--temp-dir={self.dir / 'ray'}",
               f"--autoscaling-config={config_path}",
               f"--num-cpus={int(head.pop('CPU', 1))}",
               f"--object-store-memory={int(head.pop('object_store_memory', 100 * _MIB))}",
               "--include-dashboard=false", "--disable-usage-stats",
               f"--ray-client-server-port={free_port()}",
               f"--dashboard-agent-listen-port={free_port()}",
               f"--dashboard-agent-grpc-port={free_port()}",
               f"--metrics-export-port={free_port()}",
               f"--runtime-env-agent-port={free_port()}",
               "--labels=" + ",".join(f"{k}={v}" for k, v in self.head_labels.items()),
               ]
        if self.system_config:
            cmd.append("--system-config=" + json.dumps(self.system_config, separators=(",", ":")))
        if head:
            cmd.append("--resources=" + json.dumps(head))
        # Token auth off unless asked: Ray turns it on whenever ~/.ray/auth_token exists, and
        # that file is shared by every cluster of the user (a private test cluster needs none).
        env = {**os.environ, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1",
               "RAY_USAGE_STATS_ENABLED": "0",
               "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"), **self.env}
        log = self._path("ray-start.log").open("wb")
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.sid = proc.pid  # the session leader's pid is the session id
        try:
            rc = proc.wait(timeout=120)
            if rc != 0:
                raise RuntimeError(f"ray start --head failed (rc={rc}):\n"
                                   + self._path("ray-start.log").read_text(errors="replace"))
        except BaseException:
            self.shutdown()
            raise
        finally:
            log.close()
        return self

    def set_schedule(self, schedule: CapacitySchedule | Mapping[str, Any] | str | None) -> None:
        """Replace the capacity schedule (t=0 is the cluster's start unless it says)."""
        sched = as_schedule(schedule)
        data = sched.to_dict()
        data.setdefault("epoch", self.epoch)
        tmp = self._path("schedule.yaml.tmp")
        tmp.write_text(yaml.safe_dump(data), encoding="utf-8")
        os.replace(tmp, self.schedule_path)  # atomic: the provider never reads half a file
        self._schedule = sched

    def events(self) -> list[dict[str, Any]]:
        """The provider's events so far (``launched``, ``refused``, ``terminated``)."""
        try:
            lines = self.events_path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    def processes(self) -> list[int]:
        """Pids of every process this cluster started that is still alive."""
        return [] if self.sid is None else _session_pids(self.sid)

    def shutdown(self, timeout_s: float = 10.0, grace_s: float = 1.0) -> None:
        """Stop every process of this cluster (SIGTERM, ``grace_s`` later SIGKILL) and
        remove its files.

        The grace is short: the cluster keeps nothing worth a clean exit (its GCS is in
        memory, its nodes are fake), Ray's own ``cluster_utils`` SIGKILLs its test nodes
        without one, and here the GCS, the raylets and their agents catch SIGTERM and were
        all still running 10 s after it.

        Raises:
            RuntimeError: if a process of the cluster survives SIGKILL for ``timeout_s``.
        """
        if self.sid is not None:
            self._signal_all(signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.1)
            self._signal_all(signal.SIGKILL)
            deadline = time.monotonic() + timeout_s
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.1)
            left = self.processes()
            if left:
                raise RuntimeError(f"fake cluster processes survived SIGKILL: {left}")
            self.sid = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        self.port = None

    def _signal_all(self, sig: int) -> None:
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def __enter__(self) -> FakeAutoscalingCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
