"""The sample traces of examples/traces are what their generator writes, byte for byte."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from ray_ladder.simulate import load_trace

SAMPLES = Path(__file__).resolve().parent.parent / "examples" / "traces"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_samples", SAMPLES / "make_samples.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_regenerating_the_samples_gives_the_committed_files(tmp_path: Path) -> None:
    written = _generator().write_samples(tmp_path)
    assert sorted(p.name for p in written) == sorted(p.name for p in SAMPLES.glob("*.json"))
    changed = [p.name for p in written if p.read_bytes() != (SAMPLES / p.name).read_bytes()]
    assert not changed, (f"{changed} differ from what examples/traces/make_samples.py writes: "
                         "run it, and update the figures the docs show for them")


def test_the_samples_load_as_traces_of_28_days_at_600_s() -> None:
    for path in sorted(SAMPLES.glob("*.json")):
        trace = load_trace(path)
        assert (trace.duration_s, trace.resolution_s) == (28 * 86400, 600), path.name
        assert 0.25 < trace.obtainable_fraction() < 0.85, path.name
