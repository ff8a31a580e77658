"""Trace specs as written on the command line: a file, always, never, markov:, outage:."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from ray_ladder.simulate.generators import (
    always_on,
    markov_trace,
    never_on,
    outage_trace,
    queued_trace,
)
from ray_ladder.simulate.trace_files import load_trace
from ray_ladder.simulate.traces import Trace

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([smhdw]?)\s*$")
_MARKOV_KEYS = ("up", "down", "seed", "gap", "start")
_QUEUED_KEYS = ("wait", "run", "at", "requeue")
_NEED = re.compile(r"^(.*\S)\s*@\s*([0-9]+)\s*$")
SPEC_FORMS = ("FILE.json", "FILE.csv", "always", "never",
              "markov:up=DUR,down=DUR[,seed=N][,gap=DUR][,start=up|down]",
              "outage:START-END[,START-END...]",
              "queued:wait=DUR[,run=DUR][,at=DUR][,requeue=on|off]",
              "any of these + @K (obtainable when the trace counts >= K)")


def parse_duration(text: str | float) -> float:
    """Seconds from ``600``, ``"600"``, ``"600s"``, ``"10m"``, ``"1.5h"``, ``"30d"``, ``"1w"``.

    Example:
        >>> parse_duration("1.5h"), parse_duration("341")
        (5400.0, 341.0)
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    match = _DURATION.match(str(text))
    if match is None:
        raise ValueError(f"not a duration: {text!r}; use seconds or a number with "
                         "s, m, h, d or w (e.g. 600, 10m, 1.5h, 30d)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def split_need(spec: str) -> tuple[str, int | None]:
    """Split a spec's ``@K`` suffix (the instances a rung needs at once) from the spec.

    Example:
        >>> split_need("traces/v100_16.json@8"), split_need("always")
        (('traces/v100_16.json', 8), ('always', None))
    """
    match = _NEED.match(spec)
    if match is None:
        return spec.strip(), None
    k = int(match.group(2))
    if k < 1:
        raise ValueError(f"trace {spec!r}: @K needs K >= 1 (the instances the rung needs)")
    return match.group(1).strip(), k


def is_generated(spec: str) -> bool:
    """Whether ``spec`` names a generator (not a file)."""
    spec = split_need(spec)[0]
    return spec in ("always", "never") or spec.startswith(("markov:", "outage:", "queued:"))


def parse_trace_spec(spec: str, *, duration_s: float | None = None) -> Trace:
    """Build the trace a spec names.

    Forms: a ``.json`` or ``.csv`` file; ``always``; ``never``;
    ``markov:up=1h,down=10m[,seed=1][,gap=60][,start=up|down]`` (mean up and down
    times; needs ``duration_s``); ``outage:100-400,900-1000`` (windows without capacity);
    ``queued:wait=2h,run=7d`` (queued capacity: granted after the wait, for the run, then
    queued again; ``at`` delays the request, ``requeue=off`` asks once).
    Durations take an optional unit: s, m, h, d, w. A suffix ``@K`` keeps only the times
    the trace counts at least ``K`` instances (a rung that needs ``K`` nodes at once).

    Example:
        >>> parse_trace_spec("outage:1m-2m").starts
        (0.0, 60.0, 120.0)
        >>> parse_trace_spec("markov:up=1h,down=10m,seed=3", duration_s=86400).source
        'markov:up=3600,down=600,seed=3,gap=60'
    """
    spec, need = split_need(spec)
    if need is not None:
        return parse_trace_spec(spec, duration_s=duration_s).at_least(need)
    if spec == "always":
        return always_on()
    if spec == "never":
        return never_on()
    if spec.startswith("markov:"):
        return _markov(spec, spec[len("markov:"):], duration_s)
    if spec.startswith("outage:"):
        return _outage(spec, spec[len("outage:"):], duration_s)
    if spec.startswith("queued:"):
        return _queued(spec, spec[len("queued:"):], duration_s)
    if not Path(spec).exists():
        raise ValueError(f"trace {spec!r}: no such file; a trace is one of: "
                         + ", ".join(SPEC_FORMS))
    return load_trace(spec)


def _keywords(spec: str, args: str, valid: tuple[str, ...]) -> dict[str, str]:
    """``key=value`` arguments of a generator spec, each key one of ``valid``."""
    kw: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in args.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in valid:
            raise ValueError(f"trace {spec!r}: bad argument {part!r}; valid keys: "
                             + ", ".join(valid))
        kw[key] = value
    return kw


def _markov(spec: str, args: str, duration_s: float | None) -> Trace:
    kw = _keywords(spec, args, _MARKOV_KEYS)
    missing = [k for k in ("up", "down") if k not in kw]
    if missing:
        raise ValueError(f"trace {spec!r}: missing {', '.join(missing)} "
                         "(mean up and down times, e.g. markov:up=1h,down=10m)")
    if duration_s is None:
        raise ValueError(f"trace {spec!r}: a generated trace needs a duration "
                         "(give --duration, or a file trace to take it from)")
    start = kw.get("start")
    if start not in (None, "up", "down"):
        raise ValueError(f"trace {spec!r}: start must be up or down, got {start!r}")
    try:
        seed = int(kw.get("seed", "0"))
    except ValueError:
        raise ValueError(f"trace {spec!r}: seed must be an integer, got {kw['seed']!r}") from None
    return markov_trace(
        parse_duration(kw["up"]), parse_duration(kw["down"]), duration_s,
        seed=seed, gap_s=parse_duration(kw.get("gap", "60")),
        start=None if start is None else start == "up",
    )


def _queued(spec: str, args: str, duration_s: float | None) -> Trace:
    kw = _keywords(spec, args, _QUEUED_KEYS)
    if "wait" not in kw:
        raise ValueError(f"trace {spec!r}: missing wait (how long the queue waits before "
                         "capacity is granted, e.g. queued:wait=2h,run=7d)")
    requeue = kw.get("requeue", "on")
    if requeue not in ("on", "off"):
        raise ValueError(f"trace {spec!r}: requeue must be on or off, got {requeue!r}")
    run = parse_duration(kw["run"]) if "run" in kw else None
    if run is not None and requeue == "on" and duration_s is None:
        raise ValueError(f"trace {spec!r}: a queue granted again and again needs a duration "
                         "(give --duration, or a file trace to take it from)")
    try:
        return queued_trace(parse_duration(kw["wait"]), run,
                            at_s=parse_duration(kw.get("at", "0")), requeue=requeue == "on",
                            duration_s=duration_s)
    except ValueError as err:
        raise ValueError(f"trace {spec!r}: {err}") from None


def _outage(spec: str, args: str, duration_s: float | None) -> Trace:
    windows: list[tuple[float, float]] = []
    for part in filter(None, (p.strip() for p in args.split(","))):
        start, sep, end = part.partition("-")
        if not sep:
            raise ValueError(f"trace {spec!r}: outage window {part!r} must be START-END")
        windows.append((parse_duration(start), parse_duration(end)))
    if not windows:
        raise ValueError(f"trace {spec!r}: give at least one window, e.g. outage:100-400")
    return outage_trace(windows, duration_s)


def parse_trace_arg(text: str) -> tuple[str, str]:
    """Split a command-line ``RUNG=SPEC`` into its two parts.

    Example:
        >>> parse_trace_arg("h100=markov:up=1h,down=10m")
        ('h100', 'markov:up=1h,down=10m')
    """
    rung, sep, spec = text.partition("=")
    if not sep or not rung.strip() or not spec.strip():
        raise ValueError(f"--trace {text!r}: expected RUNG=SPEC, e.g. h100=trace.json")
    return rung.strip(), spec.strip()


def resolve_traces(
    specs: Mapping[str, Trace | str | Path],
    duration_s: float | None = None,
    need: Mapping[str, int] | None = None,
) -> tuple[dict[str, Trace], float | None]:
    """Turn specs into traces and find the horizon to replay.

    Files load first; the horizon is ``duration_s`` or else the shortest file trace, and
    generated traces are then built for that horizon. ``need`` gives, per rung, the
    instances it needs at once; a spec's own ``@K`` wins over it.

    Returns:
        ``(traces, horizon_s)``; ``horizon_s`` is ``None`` when nothing bounds it.

    Example:
        >>> traces, horizon = resolve_traces({"h100": "outage:100-400"}, duration_s=1000)
        >>> horizon
        1000.0
    """
    traces: dict[str, Trace] = {}
    generated: dict[str, str] = {}
    for rung, spec in specs.items():
        if isinstance(spec, Trace):
            traces[rung] = spec
        elif isinstance(spec, str) and is_generated(spec.strip()):
            generated[rung] = spec
        else:
            traces[rung] = parse_trace_spec(str(spec))
    horizon = None if duration_s is None else float(duration_s)
    if horizon is None:
        bounded = [t.duration_s for t in traces.values() if t.duration_s is not None]
        horizon = min(bounded) if bounded else None
    for rung, spec in generated.items():
        traces[rung] = parse_trace_spec(spec, duration_s=horizon)
    for rung, k in (need or {}).items():
        given = specs.get(rung)
        own = isinstance(given, (str, Path)) and split_need(str(given))[1] is not None
        if rung in traces and not own:
            traces[rung] = traces[rung].at_least(k)
    return {rung: traces[rung] for rung in specs}, horizon
