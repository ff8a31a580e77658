"""Trace files: the public spot traces' JSON and ``t_s,available`` CSV, parsed into a Trace."""

from __future__ import annotations

import csv
import json
import math
from itertools import pairwise
from pathlib import Path

from ray_ladder.simulate.traces import Trace


def load_trace(path: str | Path) -> Trace:
    """Load a trace file: JSON (``gap_seconds`` + ``data``) or CSV (``t_s,available``).

    JSON is the format of the public spot traces: ``{"metadata": {"gap_seconds": 600},
    "data": [0, 1, ...]}`` where ``data[i]`` counts the instances obtainable during
    ``[i * gap, (i + 1) * gap)``; ``gap_seconds`` may also sit at the top level. CSV has
    one row per change or sample, ``t_s,available`` (header optional, ``#`` comments
    allowed); each value holds until the next row, the last one for the smallest gap
    between rows. Times are shifted so the first row is time 0. Any count > 0 (or
    ``true``) means obtainable; the counts are kept (``Trace.counts``) for rungs that
    need several instances (:meth:`Trace.at_least`).

    Raises:
        ValueError: naming the file and what is wrong with it.

    Example:
        >>> load_trace("../shared/traces/aws-10-26-2022_us-west-2a_v100_8.json")  # doctest: +SKIP
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"trace {p}: cannot read file: {err.strerror}") from None
    if p.suffix.lower() == ".csv":
        return _parse_csv(text, str(p))
    if p.suffix.lower() == ".json":
        return _parse_json(text, str(p))
    raise ValueError(f"trace {p}: unknown file type {p.suffix!r}; use .json or .csv")


def _truthy(raw: object, where: str) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, (int, float)):
        return raw > 0
    if isinstance(raw, str):
        low = raw.strip().lower()
        if low in ("true", "yes"):
            return True
        if low in ("false", "no"):
            return False
        try:
            return float(low) > 0
        except ValueError:
            pass
    raise ValueError(f"{where}: availability must be a count or true/false, got {raw!r}")


def _count(raw: object, where: str) -> int:
    """Instances a trace value counts: a number (rounded up), or 1/0 for true/false."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return math.ceil(raw) if raw > 0 else 0
    if isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            return int(_truthy(raw, where))
        return math.ceil(value) if value > 0 else 0
    return int(_truthy(raw, where))


def _parse_json(text: str, source: str) -> Trace:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"trace {source}: not valid JSON: {err.msg} (line {err.lineno})") from None
    if not isinstance(doc, dict) or "data" not in doc:
        raise ValueError(f"trace {source}: expected an object with 'data' and "
                         "'metadata': {'gap_seconds': ...}")
    meta = doc.get("metadata") or {}
    gap = meta.get("gap_seconds", doc.get("gap_seconds")) if isinstance(meta, dict) else None
    if isinstance(gap, bool) or not isinstance(gap, (int, float)) or gap <= 0:
        raise ValueError(f"trace {source}: metadata.gap_seconds must be a number > 0, "
                         f"got {gap!r}")
    data = doc["data"]
    if not isinstance(data, list) or not data:
        raise ValueError(f"trace {source}: 'data' must be a non-empty list")
    steps = [(i * float(gap), _count(v, f"trace {source}: data[{i}]"))
             for i, v in enumerate(data)]
    return Trace.from_counts(steps, duration_s=len(data) * float(gap),
                             resolution_s=float(gap), source=source)


def _parse_csv(text: str, source: str) -> Trace:
    rows = [r for r in csv.reader(line for line in text.splitlines()
                                  if line.strip() and not line.lstrip().startswith("#"))]
    t_col, a_col = 0, 1
    if rows and not _is_number(rows[0][0]):
        header = [h.strip() for h in rows[0]]
        if "t_s" not in header or "available" not in header:
            raise ValueError(f"trace {source}: CSV header must name t_s and available, "
                             f"got {header}")
        t_col, a_col = header.index("t_s"), header.index("available")
        rows = rows[1:]
    if len(rows) < 2:
        raise ValueError(f"trace {source}: a CSV trace needs at least 2 rows")
    times: list[float] = []
    steps: list[tuple[float, int]] = []
    for n, row in enumerate(rows, start=1):
        where = f"trace {source}: row {n}"
        try:
            t = float(row[t_col])
            value = _count(row[a_col], where)
        except (IndexError, ValueError) as err:
            raise ValueError(f"{where}: expected 't_s,available', got {row} ({err})") from None
        if times and t <= times[-1]:
            raise ValueError(f"{where}: t_s must increase ({t:g} after {times[-1]:g})")
        times.append(t)
        steps.append((t - times[0], value))
    gap = min(b - a for a, b in pairwise(times))
    return Trace.from_counts(steps, duration_s=times[-1] - times[0] + gap,
                             resolution_s=gap, source=source)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
