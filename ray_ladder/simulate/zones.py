"""A rung offered in several zones: one trace per zone, the rung's union, the offerings.

Every policy sees one capacity per rung: a rung given several zones is obtainable while
*any* of its zones is (:func:`union_trace`), the way a Ray node type with several subnets,
a GKE node pool spanning zones, or a LiteLLM deployment kept up in whichever zone has
room would be. Only Karpenter looks inside: it launches per *offering* (instance type x
zone x capacity type) and keeps its insufficient-capacity cache per offering
(:class:`~ray_ladder.simulate.baselines.offerings.Offerings`).

    simulate(ladder, {"h100": {"us-west-2a": "a.json", "us-west-2b": "b.json"}})
    ray-ladder simulate ladder.yaml --trace h100/us-west-2a=a.json --trace h100/us-west-2b=b.json
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from pathlib import Path
from typing import TypeAlias

from ray_ladder.simulate.traces import Trace

ZONE_SEP = "/"
"""Between a rung and a zone: ``h100/us-west-2a`` (the CLI's ``--trace RUNG/ZONE=SPEC``)."""

TraceLike: TypeAlias = "Trace | str | Path"
RungTraces: TypeAlias = "TraceLike | Mapping[str, TraceLike]"


def flatten_zones(traces: Mapping[str, RungTraces]) -> tuple[dict[str, TraceLike],
                                                            dict[str, list[str]]]:
    """Rung -> trace specs with each zone of a zoned rung as its own ``rung/zone`` key,
    and the zones of each zoned rung (in the order given).

    Raises:
        ValueError: a rung with no zones, or a zone name that is empty or has a ``/``.

    Example:
        >>> flatten_zones({"h100": {"a": "x.json", "b": "y.json"}, "l4": "always"})
        ({'h100/a': 'x.json', 'h100/b': 'y.json', 'l4': 'always'}, {'h100': ['a', 'b']})
    """
    flat: dict[str, TraceLike] = {}
    zones: dict[str, list[str]] = {}
    for rung, given in traces.items():
        if not isinstance(given, Mapping):
            flat[rung] = given
            continue
        if not given:
            raise ValueError(f"rung {rung!r}: give at least one zone's trace")
        for zone, spec in given.items():
            if not zone.strip() or ZONE_SEP in zone:
                raise ValueError(f"rung {rung!r}: bad zone name {zone!r} (not empty, no "
                                 f"{ZONE_SEP!r})")
            flat[f"{rung}{ZONE_SEP}{zone}"] = spec
        zones[rung] = list(given)
    return flat, zones


def group_zones(flat: Mapping[str, Trace], zones: Mapping[str, list[str]],
                ) -> tuple[dict[str, Trace], dict[str, dict[str, Trace]]]:
    """Each rung's trace (a zoned rung's :func:`union_trace`) in the order of ``flat``,
    and the zoned rungs' traces per zone.

    Example:
        >>> on, off = Trace.from_steps([(0, True)]), Trace.from_steps([(0, False)])
        >>> rungs, by_zone = group_zones({"h100/a": on, "h100/b": off}, {"h100": ["a", "b"]})
        >>> rungs["h100"].values, list(by_zone["h100"])
        ((True,), ['a', 'b'])
    """
    by_zone = {rung: {z: flat[f"{rung}{ZONE_SEP}{z}"] for z in zs} for rung, zs in zones.items()}
    rungs: dict[str, Trace] = {}
    for key, trace in flat.items():
        rung = key.split(ZONE_SEP, 1)[0] if ZONE_SEP in key else key
        if rung in by_zone:
            if rung not in rungs:
                rungs[rung] = union_trace(by_zone[rung])
        else:
            rungs[key] = trace
    return rungs, by_zone


def union_trace(zones: Mapping[str, Trace]) -> Trace:
    """The trace of a rung offered in several zones: obtainable while any zone's is.

    It ends with the shortest zone trace and keeps the finest gap; its source lists
    each zone (``a=FILE | b=FILE``). A zone's ``@K`` is applied before the union: a gang
    of ``K`` is placed in one zone.

    Example:
        >>> a = Trace.from_steps([(0, True), (60, False)], duration_s=180)
        >>> b = Trace.from_steps([(0, False), (120, True)], duration_s=240)
        >>> u = union_trace({"a": a, "b": b})
        >>> u.starts, u.values, u.duration_s
        ((0.0, 60.0, 120.0), (True, False, True), 180)
    """
    names = list(zones)
    events = heapq.merge(*([(s, j, v) for s, v in zip(t.starts, t.values, strict=True)]
                           for j, t in enumerate(zones[n] for n in names)))
    state = [False] * len(names)
    steps: list[tuple[float, bool]] = []
    for start, j, value in events:
        state[j] = value
        steps.append((start, any(state)))
    ends = [t.duration_s for t in zones.values() if t.duration_s is not None]
    gaps = [t.resolution_s for t in zones.values() if t.resolution_s is not None]
    return Trace.from_steps(steps, duration_s=min(ends) if ends else None,
                            resolution_s=min(gaps) if gaps else None,
                            source=" | ".join(f"{n}={zones[n].source}" for n in names))
