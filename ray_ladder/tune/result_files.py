"""A moved trial's result files stay whole: the driver's copy is stored before Tune
restores the trial's files from storage.

Tune's loggers write each result to the driver's staging copy of the trial folder
(``result.json``, ``progress.csv``), which Tune syncs to the run's storage path with the
experiment state (every ~10 s). When a trial that has a checkpoint starts again (the
ladder paused it to move it; its node was lost), ``JsonLoggerCallback`` copies the stored
``result.json`` over the driver's copy before it appends (``CSVLoggerCallback`` does the
same with ``progress.csv`` when its file was closed, after a failure). The stored copy
misses every result reported since the last sync, so those results vanished from
``result.json``, hence from ``Result.metrics_dataframe``, which is read from it.

:class:`~ray_ladder.tune.LadderCallback` calls :func:`store_driver_copies` in
``on_trial_start``, before Tune's loggers (which come after the run's own callbacks):
the stored copy is then the driver's, and the loggers' restore loses nothing. Whether a
file is stored is the pure :func:`should_store`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: The files Tune's default loggers restore from storage when a trial starts again
#: (``ray.air.constants.EXPR_RESULT_FILE`` and ``EXPR_PROGRESS_FILE``).
RESULT_FILES = ("result.json", "progress.csv")


def should_store(driver: bytes | None, stored: bytes | None) -> bool:
    """Whether the driver's copy of a result file replaces the stored one.

    Only when the driver's copy holds the stored one and more (the stored one is a
    prefix: results appended since the last sync). Never when the driver has none or
    less: after ``Tuner.restore`` in a new driver the stored copy is the whole history,
    and a stored copy that is not a prefix was written by something else; both stay.

    Example:
        >>> should_store(b'{"step": 1}\\n{"step": 2}\\n', b'{"step": 1}\\n')
        True
        >>> should_store(None, b'{"step": 1}\\n'), should_store(b"", None)
        (False, False)
        >>> should_store(b'{"step": 9}\\n{"step": 10}\\n', b'{"step": 1}\\n')
        False
    """
    if not driver:
        return False
    stored = stored or b""
    return len(driver) > len(stored) and driver.startswith(stored)


def _read_local(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _read_stored(filesystem: Any, path: str) -> bytes | None:
    try:
        with filesystem.open_input_stream(path) as f:
            return bytes(f.readall())
    except FileNotFoundError:
        return None


def store_driver_copies(trial: Any) -> list[str]:
    """Write the driver's copy of each of the trial's result files to the run's storage
    where :func:`should_store` says so; returns the names written.

    Never raises: a failure is logged (the run goes on, as Tune's own restore does).
    """
    written: list[str] = []
    try:
        local_dir, stored_dir = trial.local_path, trial.path
        filesystem = trial.storage.storage_filesystem
    except Exception:  # no folder yet (never started): nothing was written
        return written
    for name in RESULT_FILES:
        stored_path = Path(stored_dir, name).as_posix()
        try:
            driver = _read_local(Path(local_dir, name))
            if not should_store(driver, _read_stored(filesystem, stored_path)):
                continue
            filesystem.create_dir(Path(stored_dir).as_posix(), recursive=True)
            with filesystem.open_output_stream(stored_path) as f:
                f.write(driver)
            written.append(name)
        except Exception:
            logger.warning("could not store the driver's %s of trial %s at %s", name,
                           getattr(trial, "trial_id", "?"), stored_path, exc_info=True)
    if written:
        logger.debug("trial %s: stored the driver's %s before its restart",
                     getattr(trial, "trial_id", "?"), ", ".join(written))
    return written
