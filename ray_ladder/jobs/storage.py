"""A job run's shared storage: its checkpoints, the attempt that owns it, climb requests.

Any ``pyarrow.fs`` URI: ``s3://bucket/runs?endpoint_override=10.0.0.9:9000&scheme=http``
for S3-compatible storage (Ceph, MinIO, a provider's object store; credentials from the
standard ``AWS_*`` environment of the nodes, never from the ladder), or a path every
cluster can read (NFS). Layout under ``URI/RUN/``::

    attempt.json        the attempt that owns the run (written before it is submitted)
    climb.json          a request that attempt N stop at its next checkpoint
    yielded.json        attempt N stopped at its committed checkpoint for a climb
    latest.json         the last committed checkpoint (the commit point) and its metrics
    checkpoints/STEP/   the checkpoints' files
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

from ray_ladder._lazy import requires_extra

with requires_extra("jobs", "the run storage"):
    import pyarrow.fs as pafs


@dataclass
class RunStorage:
    """One run's directory in shared storage.

    Example:
        >>> store = RunStorage.open("/tmp/ladder-doc-runs", "demo")
        >>> store.write("attempt.json", {"attempt": 1}); store.read("attempt.json")
        {'attempt': 1}
    """

    fs: pafs.FileSystem
    base: str
    uri: str
    run: str

    @classmethod
    def open(cls, uri: str, run: str) -> RunStorage:
        """The run ``run`` under the storage ``uri`` (a ``pyarrow.fs`` URI or a path)."""
        fs, path = pafs.FileSystem.from_uri(uri) if "://" in uri \
            else (pafs.LocalFileSystem(), uri)
        base = f"{path.rstrip('/')}/{run}"
        fs.create_dir(base, recursive=True)
        return cls(fs, base, uri, run)

    def path(self, name: str) -> str:
        """The storage path of ``name`` in the run's directory."""
        return f"{self.base}/{name}"

    def write(self, name: str, value: dict[str, Any]) -> None:
        """Write ``value`` as JSON to ``name`` (one object written whole)."""
        with self.fs.open_output_stream(self.path(name)) as out:
            out.write(json.dumps(value, sort_keys=True).encode())

    def read(self, name: str) -> dict[str, Any] | None:
        """The JSON object in ``name``; ``None`` when there is none."""
        try:
            with self.fs.open_input_stream(self.path(name)) as src:
                value = json.loads(src.read().decode())
        except FileNotFoundError:
            return None
        return value if isinstance(value, dict) else None

    def delete(self, name: str) -> None:
        """Remove ``name`` if it exists."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.path(name))

    def upload(self, local_dir: str, step: int) -> str:
        """Copy a local checkpoint directory to ``checkpoints/STEP``; its storage path."""
        dest = self.path(f"checkpoints/{step:09d}")
        self.fs.create_dir(dest, recursive=True)
        pafs.copy_files(local_dir, dest, source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=self.fs)
        return dest

    def download(self, path: str, local_dir: str) -> str:
        """Copy the checkpoint at storage ``path`` into ``local_dir``; ``local_dir``."""
        pafs.LocalFileSystem().create_dir(local_dir, recursive=True)
        pafs.copy_files(path, local_dir, source_filesystem=self.fs,
                        destination_filesystem=pafs.LocalFileSystem())
        return local_dir
