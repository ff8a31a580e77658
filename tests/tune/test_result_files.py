"""A restarted trial's result files keep every result: Tune's own loggers, no cluster.

Tune's ``JsonLoggerCallback`` (and ``CSVLoggerCallback`` after a failure) copies the
stored file over the driver's copy when a trial with a checkpoint starts again; the
stored one lags by up to one experiment sync. The ladder's callback, ahead of them,
stores the driver's copy first.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.fs
import pytest
from ray import tune
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

from ray_ladder.tune import LadderCallback, ladder_configs
from ray_ladder.tune.result_files import should_store, store_driver_copies


class _Storage:
    def __init__(self, stored: Path) -> None:
        self.storage_filesystem = pyarrow.fs.LocalFileSystem()
        self.trial_fs_path = stored.as_posix()


class _Trial:
    """What Tune's loggers and the ladder's callback read of a ``Trial``."""

    trial_id = "t1"
    config: dict[str, Any] = {}
    checkpoint = object()  # has one: Tune's loggers restore its files on a start
    last_result: dict[str, Any] = {}

    def __init__(self, driver: Path, stored: Path) -> None:
        self.local_path, self.path = str(driver), stored.as_posix()
        self.storage = _Storage(stored)

    def init_local_path(self) -> None:
        Path(self.local_path).mkdir(parents=True, exist_ok=True)


class _NoHistory:
    def summary(self, trial_id: str) -> dict[str, Any]:
        return {}

    def stop(self) -> None:
        pass


def _run(tmp_path: Path, *, ladder: bool, failed: bool) -> _Trial:
    """Steps 1-3, Tune's periodic sync, steps 4-6, a restart (a move; a failure and a
    recovery with ``failed``), steps 7-8: the callbacks in Tune's order."""
    driver, stored = tmp_path / "driver" / "trial", tmp_path / "stored" / "trial"
    trial = _Trial(driver, stored)
    trial.init_local_path()  # Tune makes the folder when it creates the trial
    callbacks: list[Any] = [CSVLoggerCallback(), JsonLoggerCallback()]
    if ladder:
        callbacks.insert(0, LadderCallback(_NoHistory()))

    def each(hook: str, **kw: Any) -> None:
        for cb in callbacks:
            getattr(cb, hook)(iteration=0, trials=[trial], trial=trial, **kw)

    def report(steps: range) -> None:
        for step in steps:
            each("on_trial_result", result={"step": step, "trial_id": trial.trial_id})

    each("on_trial_start")
    report(range(1, 4))
    shutil.copytree(driver, stored, dirs_exist_ok=True)  # Tune's sync to the storage path
    report(range(4, 7))
    if failed:
        each("on_trial_error")
    each("on_trial_start")
    report(range(7, 9))
    each("on_trial_complete")
    for cb in callbacks:
        cb.on_experiment_end(trials=[trial])
    shutil.copytree(driver, stored, dirs_exist_ok=True)  # the final sync
    return trial


def _steps(folder: Path) -> tuple[list[int], list[int]]:
    in_json = [json.loads(line)["step"]
               for line in (folder / "result.json").read_text().splitlines()]
    with open(folder / "progress.csv", newline="") as f:
        in_csv = [int(row["step"]) for row in csv.DictReader(f)]
    return in_json, in_csv


@pytest.mark.parametrize("failed", [False, True], ids=["moved", "recovered"])
def test_a_restarted_trial_keeps_every_result(tmp_path, failed):
    trial = _run(tmp_path, ladder=True, failed=failed)
    every = list(range(1, 9))
    assert _steps(Path(trial.path)) == (every, every)
    assert _steps(Path(trial.local_path)) == (every, every)


def test_without_the_ladder_callback_tune_loses_the_results_since_the_sync(tmp_path):
    # The failure this module guards against, on Tune's own loggers (Ray 2.60).
    trial = _run(tmp_path, ladder=False, failed=True)
    assert _steps(Path(trial.path)) == ([1, 2, 3, 7, 8], [1, 2, 3, 7, 8])


def test_the_stored_copy_is_replaced_only_by_a_longer_copy_that_holds_it():
    one, two = b'{"step": 1}\n', b'{"step": 1}\n{"step": 2}\n'
    assert should_store(two, one) and should_store(one, None) and should_store(one, b"")
    assert not should_store(one, one)  # nothing new
    assert not should_store(one, two)  # Tuner.restore in a new driver: storage has more
    assert not should_store(None, one) and not should_store(b"", None)
    assert not should_store(b'{"step": 9}\n{"step": 10}\n', one)  # not the same history


def test_storing_never_raises_and_leaves_a_richer_stored_copy_alone(tmp_path):
    driver, stored = tmp_path / "driver", tmp_path / "stored"
    driver.mkdir()
    stored.mkdir()
    (driver / "result.json").write_text('{"step": 1}\n')
    (stored / "result.json").write_text('{"step": 1}\n{"step": 2}\n')
    trial = _Trial(driver, stored)
    assert store_driver_copies(trial) == []
    assert (stored / "result.json").read_text() == '{"step": 1}\n{"step": 2}\n'

    class Unstarted:
        trial_id = "t0"

        @property
        def local_path(self) -> str:
            raise RuntimeError("Should not access `trial_driver_staging_path` ...")

    assert store_driver_copies(Unstarted()) == []


def test_the_ladder_callback_goes_before_the_runs_own_loggers(tmp_path):
    mine = JsonLoggerCallback()
    other = tune.Callback()
    _, run_config = ladder_configs(None, tune.RunConfig(storage_path=str(tmp_path),
                                                        callbacks=[other, mine]))
    assert run_config.callbacks[0] is other and run_config.callbacks[2] is mine
    assert isinstance(run_config.callbacks[1], LadderCallback)
