"""simulate(): replay capacity traces through the live Selector and report per policy."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from ray_ladder.core.constraints import Constraints
from ray_ladder.core.placement import standby_replicas
from ray_ladder.core.spec import Ladder, as_ladder
from ray_ladder.simulate.align import Timeline, align
from ray_ladder.simulate.baselines import Baseline, LadderPolicy, PolicyContext, parse_policies
from ray_ladder.simulate.bounds import oracle_notes
from ray_ladder.simulate.compare import run_comparison
from ray_ladder.simulate.figures import serving_rungs
from ray_ladder.simulate.loss import Loss
from ray_ladder.simulate.losses import where_ladder_loses
from ray_ladder.simulate.reference import build_reference
from ray_ladder.simulate.replay import Replay, replay, resolve_hysteresis
from ray_ladder.simulate.report import Note, PolicyReport, SimulationReport, summarise
from ray_ladder.simulate.specs import resolve_traces, split_need
from ray_ladder.simulate.traces import Trace, tick_index
from ray_ladder.simulate.zones import ZONE_SEP, RungTraces, flatten_zones, group_zones

DEFAULT_TICK_S = 60.0
"""Tick used when no trace has a natural gap (e.g. only ``always`` traces)."""


def default_warm(ladder: Ladder) -> list[str]:
    """Compute rungs with standby replicas (``standby_replicas``; default 1 on the top).

    Example:
        >>> default_warm(load_ladder("examples/ladders/gpu-serving.yaml"))  # doctest: +SKIP
        ['h100', 'l4']
    """
    return [r.name for r in ladder.rungs if standby_replicas(ladder, r) >= 1]


def _standby_cost(ladder: Ladder, name: str) -> float:
    """Hourly bill of a warm rung's standby replicas (at least 1: it was named warm)."""
    return max(1, ladder.rung(name).standby_replicas or 0) * ladder.rung(name).cost_per_hour


def _hysteresis_list(hysteresis: int | Iterable[int] | None, ladder: Ladder,
                     comparing: bool = False) -> list[int | None]:
    """The sweep's hysteresis values in ticks; ``None``: the ladder's own, in seconds
    (``promotion_hysteresis x probe_interval_s``), turned into ticks once the tick is known."""
    values: list[int | None]
    if hysteresis is None:
        values = [] if comparing else [None]
    elif isinstance(hysteresis, int):
        values = [hysteresis]
    else:
        values = list(hysteresis)
    if not values and not comparing:
        raise ValueError("give at least one hysteresis value")
    for h in values:
        if h is not None and (isinstance(h, bool) or not isinstance(h, int) or h < 1):
            raise ValueError(f"hysteresis values must be integers >= 1, got {h!r}")
    return values


def needs(ladder: Ladder, need: Mapping[str, int] | None = None) -> dict[str, int]:
    """Instances each compute rung needs at once: ``need``, else the rung's ``params.nodes``.

    A rung that needs ``k`` (a training gang, a rung of ``k`` replicas) is obtainable
    only while its trace counts at least ``k``. Rungs needing 1 are left out.

    Example:
        >>> needs(Ladder.from_dict({"name": "t", "rungs": [  # doctest: +SKIP
        ...     {"name": "gang", "num_gpus": 8, "params": {"nodes": 4}}]}))
        {'gang': 4}
    """
    out: dict[str, int] = {}
    for rung in ladder.rungs:
        k = rung.params.get("nodes", 1) if rung.is_compute else 1
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"rung {rung.name!r}: params.nodes must be an integer >= 1 "
                             f"(the nodes it needs at once), got {k!r}")
        if k > 1:
            out[rung.name] = k
    for name, k in (need or {}).items():
        if name not in ladder.names or not ladder.rung(name).is_compute:
            raise ValueError(f"need for {name!r}: not a compute rung of {ladder.name!r}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"need for {name!r} must be an integer >= 1, got {k!r}")
        out[name] = k
    return {n: k for n, k in out.items() if k > 1}


def applied_needs(traces: Mapping[str, Trace],
                  need: Mapping[str, int]) -> dict[str, int]:
    """Instances each rung needs, as its trace was cut for them (``@K`` in its source,
    whichever way ``K`` was given: the spec, ``need``, ``params.nodes``); ``need`` for
    rungs without a trace.

    Example:
        >>> t = Trace.from_counts([(0, 16), (300, 5)], duration_s=600, source="v100.json")
        >>> applied_needs({"gang": t.at_least(16)}, {"gang": 8, "pool": 4})
        {'pool': 4, 'gang': 16}
    """
    out = {n: k for n, k in need.items() if n not in traces}
    for name, trace in traces.items():
        k = split_need(trace.source)[1]
        if k is not None and k > 1:
            out[name] = k
    return out


def simulate(
    ladder: Ladder | str | Path,
    traces: Mapping[str, RungTraces],
    *,
    hysteresis: int | Iterable[int] | None = None,
    tick_s: float | None = None,
    duration_s: float | None = None,
    promotion_delay_s: float = 0.0,
    demotion_delay_s: float = 0.0,
    warm: Collection[str] | None = None,
    constraints: Constraints | None = None,
    compare: str | Baseline | Iterable[str | Baseline] | None = None,
    need: Mapping[str, int] | None = None,
    flap_window_s: float | None = None,
) -> SimulationReport:
    """Replay per-rung capacity traces through :class:`~ray_ladder.Selector`.

    One observation per tick; a compute rung without a trace is always obtainable (as
    are cache and shed rungs). Besides each policy, an oracle (hysteresis 1, no switching
    cost) is replayed for the ``cost_oracle`` figure. With ``compare``, the same traces
    also go through the named policies (:mod:`ray_ladder.simulate.baselines`: the
    ladder with measured switching costs, Ray native, GKE ComputeClass, Karpenter,
    LiteLLM), each reported with the same figures in ``report.comparison``.

    Args:
        ladder: A :class:`~ray_ladder.Ladder` or a path to its file.
        traces: Rung name -> :class:`Trace`, file path, or spec string (``always``,
            ``never``, ``markov:up=1h,down=10m,seed=1``, ``outage:100-400``); or a
            mapping zone -> one of those, for a rung offered in several zones
            (``{"h100": {"us-west-2a": "a.json", "us-west-2b": "b.json"}}``): every
            policy sees the rung obtainable while any zone is, and Karpenter launches
            and caches per zone (:mod:`ray_ladder.simulate.zones`).
        hysteresis: One value or several to compare, in ticks (default: the ladder's
            ``promotion_hysteresis x probe_interval_s`` seconds, in ticks of the replay
            rounded up, at least 1; the report gives the seconds).
        tick_s: Seconds between observations (default: the finest trace gap, else 60).
        duration_s: Seconds to replay (default: the shortest file trace; required when
            every trace is generated).
        promotion_delay_s: Seconds from a climb decision to the new rung serving.
        demotion_delay_s: Cold-start seconds after a fall onto a rung that is not warm.
        warm: Compute rungs whose standby replicas make falls onto them instant
            (default: :func:`default_warm`).
        constraints: Restrict the eligible rungs, as for a live request.
        compare: Policies to replay side by side: names or specs
            (``"karpenter:consolidation=on"``, ``"all"``) or policy objects. Without
            ``hysteresis``, comparing skips the hysteresis sweep (and the two delays,
            which belong to it, are refused: each compared policy has its own).
        need: Rung -> instances it needs at once (default: the rung's ``params.nodes``;
            a trace spec's ``@K`` wins over both).
        flap_window_s: Window for counting flaps (default: one hysteresis window of the
            compared ladder, else of the first hysteresis value).

    Raises:
        ValueError: a trace for an unknown or non-compute rung, a trace shorter than the
            replay, a bad spec or parameter.

    Example:
        >>> report = simulate("examples/ladders/gpu-serving.yaml",
        ...                   {"h100": "outage:1h-2h"}, hysteresis=[1, 3],
        ...                   duration_s=86400, tick_s=60)
        >>> round(report.policy(1).rung_fraction["h100"], 3)
        0.958
    """
    ladder = as_ladder(ladder)
    _check_args(ladder, traces, promotion_delay_s=promotion_delay_s,
                demotion_delay_s=demotion_delay_s, tick_s=tick_s, duration_s=duration_s,
                flap_window_s=flap_window_s)
    compared = parse_policies(compare) if compare is not None else []
    _check_delays(bool(compared) and hysteresis is None, promotion_delay_s, demotion_delay_s)
    hs = _hysteresis_list(hysteresis, ladder, comparing=bool(compared))
    need_by_rung = needs(ladder, need)
    resolved, ordered, timeline, tick_s, zt = _timeline(ladder, traces, duration_s, tick_s,
                                                       need_by_rung)  # zt: the zones
    warm_list = _warm_list(ladder, warm)

    oracle_rep = replay(ladder, timeline, hysteresis=1, constraints=constraints)
    names = oracle_rep.names
    quality = [ladder.rung(n).quality for n in names]
    cost = [ladder.work_cost_per_hour(n) for n in names]  # the data's move counted
    serves = serving_rungs(ladder, names)
    obtainable = [timeline.obtainable_ticks(n) if n in timeline.names else timeline.ticks
                  for n in names]
    standby = [_standby_cost(ladder, n) if n in warm_list else 0.0 for n in names]
    window = _flap_window(ladder, compared, hs, tick_s, flap_window_s)
    ref = build_reference(timeline, names, quality)
    oracle = summarise(oracle_rep, quality=quality, cost_per_hour=cost, serves=serves,
                       reference=ref, flap_window_s=window)
    policies = [summarise(rep, quality=quality, cost_per_hour=cost, serves=serves,
                          reference=ref, cost_oracle=oracle.cost, standby_per_hour=standby,
                          obtainable_ticks=obtainable, flap_window_s=window)
                for rep in _sweep(ladder, timeline, hs, oracle_rep, promotion_delay_s,
                                  demotion_delay_s, warm_list, constraints)]
    ctx = PolicyContext.build(ladder, timeline, warm=warm_list, constraints=constraints, zones=zt)
    compared, skipped = _runnable(compared, ctx)  # a Serve-only system on a gang: no row
    comparison = run_comparison(
        ctx, compared, quality=quality, cost_per_hour=cost, serves=serves, reference=ref,
        cost_oracle=oracle.cost, obtainable_ticks=obtainable, flap_window_s=window,
        oracle=oracle_rep, standby_rate=lambda n: _standby_cost(ladder, n),
    ) if compared else []
    notes = skipped + oracle_notes(oracle, [*((p, None) for p in policies), *(
        (p, b.beyond_the_oracle(ctx)) for p, b in zip(comparison, compared, strict=True))])
    rungs = _rung_rows(ladder, names, timeline, ordered, warm_list, need_by_rung, obtainable)
    return SimulationReport(
        ladder=ladder.name, rungs=rungs, losses=_losses(policies, comparison, compared, rungs),
        ticks=timeline.ticks, tick_s=float(tick_s), duration_s=timeline.ticks * float(tick_s),
        warm=[n for n in names if n in warm_list],
        oracle=oracle, policies=policies, timeline=timeline, traces=resolved,
        comparison=comparison, flap_window_s=window, notes=notes, spread_method=ref.method(),
    )


def _losses(sweep: list[PolicyReport], comparison: list[PolicyReport],
            compared: list[Baseline], rungs: list[dict[str, Any]]) -> list[Loss]:
    """Where a peer beats the ladder: the compared ladder rows (else the sweep's) against
    every compared peer."""
    is_ladder = [isinstance(b, LadderPolicy) for b in compared]
    ladders = [p for p, lad in zip(comparison, is_ladder, strict=True) if lad] or sweep
    peers = [p for p, lad in zip(comparison, is_ladder, strict=True) if not lad]
    return where_ladder_loses(ladders, peers, rungs)


def _runnable(compared: list[Baseline], ctx: PolicyContext) -> tuple[list[Baseline], list[Note]]:
    """The policies that can run ``ctx``'s workload, and a ``"cannot_run"`` note for each
    that cannot (a Serve-only system on a training gang): it gets no row."""
    skipped = [Note("cannot_run", b.label, f"no row for {b.label}: {why}") for b in compared
               if (why := b.cannot_run(ctx)) is not None]
    return [b for b in compared if b.cannot_run(ctx) is None], skipped


def _sweep(ladder: Ladder, timeline: Timeline, hs: list[int | None], oracle_rep: Replay,
           promotion_delay_s: float, demotion_delay_s: float, warm_list: list[str],
           constraints: Constraints | None) -> list[Replay]:
    """One replay per hysteresis value (``None``: the ladder's own, in seconds)."""
    out = []
    for asked in hs:
        h, asked_s = resolve_hysteresis(ladder, timeline.tick_s, asked)
        if h == 1 and promotion_delay_s == 0 and demotion_delay_s == 0:
            # The same replay as the oracle's: no need to run it twice.
            out.append(oracle_rep if asked_s is None else Replay(**{
                **oracle_rep.__dict__, "hysteresis_asked_s": asked_s}))
        else:
            out.append(replay(ladder, timeline, hysteresis=asked,
                              promotion_delay_s=promotion_delay_s,
                              demotion_delay_s=demotion_delay_s, warm=warm_list,
                              constraints=constraints))
    return out


def _check_args(ladder: Ladder, traces: Mapping[str, object], *, promotion_delay_s: float,
                demotion_delay_s: float, tick_s: float | None,
                duration_s: float | None, flap_window_s: float | None = None) -> None:
    """Raise ``ValueError`` for a trace of an unknown or non-compute rung, or a bad number."""
    for name in traces:
        if name not in ladder.names:
            raise ValueError(f"trace for unknown rung {name!r}; rungs of {ladder.name!r}: "
                             f"{ladder.names}")
        if not ladder.rung(name).is_compute:
            raise ValueError(f"rung {name!r} is a {ladder.rung(name).kind} rung, always "
                             "obtainable: remove its trace")
    for label, value in (("promotion_delay_s", promotion_delay_s),
                         ("demotion_delay_s", demotion_delay_s)):
        if value < 0:
            raise ValueError(f"{label} must be >= 0, got {value}")
    if tick_s is not None and tick_s <= 0:
        raise ValueError(f"tick_s must be > 0, got {tick_s}")
    if duration_s is not None and duration_s <= 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    if flap_window_s is not None and flap_window_s < 0:
        raise ValueError(f"flap_window_s must be >= 0, got {flap_window_s}")


def _check_delays(sweep_skipped: bool, promotion_delay_s: float,
                  demotion_delay_s: float) -> None:
    """Comparing alone skips the sweep the two delays belong to: refuse them, never drop."""
    if sweep_skipped and (promotion_delay_s or demotion_delay_s):
        raise ValueError(
            "promotion_delay_s / demotion_delay_s (--promotion-delay / --demotion-delay) "
            "apply to the hysteresis sweep, which comparing alone skips; give each "
            "compared policy its own switching costs (ladder:start=341,climb=0, "
            "ray-native:start=341...) or add hysteresis (--hysteresis) to sweep as well")


def _timeline(ladder: Ladder, traces: Mapping[str, RungTraces],
              duration_s: float | None, tick_s: float | None, need_by_rung: dict[str, int],
              ) -> tuple[dict[str, Trace], dict[str, Trace], Timeline, float, Timeline | None]:
    """Resolve the traces and align them on one tick: (resolved, in ladder order,
    timeline, tick seconds, the zoned rungs' zones aligned on the same ticks or None).

    A rung given several zones is one column of the timeline, obtainable while any zone
    is (:func:`~ray_ladder.simulate.zones.union_trace`); each zone's ``@K`` is cut first.
    """
    flat, zones = flatten_zones(traces)
    zone_need = {k: need_by_rung[k.split(ZONE_SEP, 1)[0]] for k in flat
                 if ZONE_SEP in k and k.split(ZONE_SEP, 1)[0] in need_by_rung}
    resolved_flat, horizon = resolve_traces(flat, duration_s, need={**need_by_rung, **zone_need})
    if horizon is None:
        raise ValueError("nothing bounds the replay: give duration_s (--duration) when "
                         "every trace is generated")
    for name, trace in resolved_flat.items():
        if trace.duration_s is not None and trace.duration_s < horizon:
            raise ValueError(f"trace for {name!r} ({trace.source}) covers "
                             f"{trace.duration_s:g} s, less than the {horizon:g} s to replay")
    _same_need(resolved_flat, zones)
    if tick_s is None:
        gaps = [t.resolution_s for t in resolved_flat.values() if t.resolution_s is not None]
        tick_s = min(gaps) if gaps else DEFAULT_TICK_S
    ticks = max(1, tick_index(horizon, tick_s))
    resolved, by_zone = group_zones(resolved_flat, zones)
    ordered = {n: resolved[n] for n in ladder.names if n in resolved}
    zone_tl = None if not by_zone else align(
        {f"{r}{ZONE_SEP}{z}": t for r in ordered if r in by_zone for z, t in by_zone[r].items()},
        tick_s=tick_s, ticks=ticks)
    return resolved, ordered, align(ordered, tick_s=tick_s, ticks=ticks), tick_s, zone_tl


def _same_need(flat: Mapping[str, Trace], zones: Mapping[str, list[str]]) -> None:
    """Refuse a zoned rung whose zones were cut at different ``@K``: a rung needs one
    number of instances at once, in whichever zone it runs."""
    for rung, names in zones.items():
        ks = {split_need(flat[f"{rung}{ZONE_SEP}{z}"].source)[1] or 1 for z in names}
        if len(ks) > 1:
            raise ValueError(f"rung {rung!r}: its zones need different counts "
                             f"(@{', @'.join(map(str, sorted(ks)))}); give every zone the same @K")


def _flap_window(ladder: Ladder, compared: list[Baseline], hs: list[int | None],
                 tick_s: float, flap_window_s: float | None) -> float:
    """Seconds of the flap window: ``flap_window_s``, else one hysteresis window of the
    compared ladder, else of the first hysteresis value (the ladder's own: in seconds,
    turned into ticks)."""
    if flap_window_s is not None:
        return float(flap_window_s)
    own, _ = resolve_hysteresis(ladder, tick_s, None)
    window_h = next((p.hysteresis or own for p in compared if isinstance(p, LadderPolicy)),
                    (hs[0] or own) if hs else own)
    return window_h * float(tick_s)


def _warm_list(ladder: Ladder, warm: Collection[str] | None) -> list[str]:
    """The warm compute rungs (default :func:`default_warm`); ``ValueError`` for others."""
    warm_list = default_warm(ladder) if warm is None else list(warm)
    for name in warm_list:
        if name not in ladder.names or not ladder.rung(name).is_compute:
            raise ValueError(f"warm rung {name!r} is not a compute rung of {ladder.name!r}; "
                             f"compute rungs: {[r.name for r in ladder.rungs if r.is_compute]}")
    return warm_list


def _rung_rows(ladder: Ladder, names: list[str], timeline: Timeline,
               ordered: Mapping[str, Trace], warm_list: list[str],
               need_by_rung: Mapping[str, int], obtainable: list[int],
               ) -> list[dict[str, Any]]:
    """The report's table of rungs, one row each in replay order (``need_by_rung``: as
    asked; each row's ``need`` is as its trace was cut, :func:`applied_needs`)."""
    need_by_rung = applied_needs(ordered, need_by_rung)
    rows: list[dict[str, Any]] = []
    for name, count in zip(names, obtainable, strict=True):
        rung = ladder.rung(name)
        rows.append({
            "name": name, "kind": rung.kind, "quality": rung.quality,
            "cost_per_hour": ladder.work_cost_per_hour(name),
            "warm": name in warm_list or not rung.is_compute,
            "trace": ordered[name].source if name in timeline.names else "always (no trace)",
            "need": need_by_rung.get(name, 1),
            "obtainable_fraction": count / timeline.ticks,
        })
    return rows
