"""What a replay means: time per rung, moves, degraded episodes, quality and cost."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from ray_ladder.simulate.align import Timeline
from ray_ladder.simulate.figures import cost_per_served_hour as per_served_hour
from ray_ladder.simulate.figures import (
    count_flaps,
    p95,
    served_hours,
    start_and_standby_bills,
    time_per_rung,
)
from ray_ladder.simulate.loss import Loss
from ray_ladder.simulate.reference import Reference
from ray_ladder.simulate.replay import Replay
from ray_ladder.simulate.spread import Interval, against
from ray_ladder.simulate.traces import Trace


@dataclass(frozen=True)
class PolicyReport:
    """The figures of one policy (the ladder at a hysteresis, or a baseline) over one replay.

    Seconds are simulated seconds. "Degraded" means served below the *top* eligible
    rung, obtainable or not, or nothing served; an episode is one unbroken degraded
    stretch. "Below the best available" and "regret" measure against the best rung the
    traces let anyone have at that moment instead (:mod:`ray_ladder.simulate.spread`).
    Every policy has every figure, so baselines and the ladder compare column by column.

    Attributes:
        policy: Which policy: ``"ladder"`` or a baseline's label (``"karpenter"``,
            ``"gke-computeclass (when_unsatisfiable=ScaleUpAnyway)"``).
        params: The policy's parameters.
        hysteresis: Promotion hysteresis used, in observations (ticks); ``None`` for
            baselines, which have none.
        hysteresis_s: The same in seconds (``hysteresis * tick_s``): the hysteresis
            used.
        hysteresis_asked_s: The hysteresis asked, in seconds, when it came from the
            ladder (``promotion_hysteresis x probe_interval_s``, turned into ticks of the
            trace rounded up, at least 1); ``None`` when it was given in ticks.
        promotion_delay_s: Seconds from a climb decision to the new rung serving.
        demotion_delay_s: Cold-start seconds after a fall onto a rung that is not warm.
        rung_fraction: Fraction of time each eligible rung served.
        unserved_fraction: Fraction of time with no rung (cold starts, exhaustion);
            with ``rung_fraction`` it sums to 1.
        shed_fraction: Fraction of time on the shed rung ("try later"): a rung, but not
            served time (see :mod:`ray_ladder.simulate.figures`).
        served_hours: Hours served: on a compute or cache rung, for every policy alike
            (shed time and time with no rung are not served).
        served_fraction: ``served_hours`` as a share of the time replayed.
        falls: Selector decisions to move down (including to "nothing obtainable").
        climbs: Selector decisions to move up; each one starts the new rung's replicas.
        climbs_abandoned: Climbs dropped because the selector moved on before the new
            rung was up (only with ``promotion_delay_s > 0``).
        climbs_per_day: ``climbs`` per simulated day.
        falls_per_day: ``falls`` per simulated day.
        flaps: Climbs followed by a fall (the next move) within ``flap_window_s``.
        flap_window_s: The window flaps are counted in (one hysteresis window).
        top_fraction: Share of time the best eligible rung served.
        degraded_s_total: Seconds degraded (below the top rung, or nothing) in all.
        degraded_episodes: Number of degraded episodes.
        degraded_longest_s: Longest episode.
        degraded_p95_episode_s: 95th percentile of episode lengths (nearest rank).
        below_best_s_total: Seconds on a rung worse than the best one obtainable at that
            tick, or on none while one could be had.
        below_best_fraction: The same as a share of the time replayed.
        regret: Quality-weighted availability lost against the best rung obtainable at
            each tick (share of time, never negative; the oracle's is 0).
        regret_hours: The same in quality-weighted hours.
        alerts: ``max_degraded_seconds`` alerts the selector fired.
        quality_weighted_availability: Sum of quality x time served / total time.
        cost: Sum of ``cost_per_hour`` x hours served, plus hours spent starting rungs.
        cost_starting: The part of ``cost`` spent on replicas that were still starting.
        cost_standby: The bill of warm standby, *not* in ``cost``: for each warm compute
            rung, ``standby_replicas x cost_per_hour`` for the time it is obtainable but
            neither serving nor starting.
        cost_standby_by_rung: ``cost_standby`` split by rung.
        cost_always_top: The bill for holding the best eligible rung the whole time.
        cost_oracle: The bill of the oracle (hysteresis 1, no switching cost).
        cost_per_served_hour: ``(cost + cost_standby) / served_hours`` (``None`` when
            nothing ever served): the whole bill per hour of service, the same
            definition for every policy.
        spread: ``served_fraction``, ``cost_per_served_hour`` and ``regret`` -> their
            90 % block-bootstrap interval over days ``(low, high)``, ``None`` where the
            figure is undefined (:mod:`ray_ladder.simulate.spread`).
        replay: The raw replay (change points), for plots; not in :meth:`to_dict`,
            but its ``requests`` are (:attr:`requests`: LiteLLM's tries of dead
            deployments, ``None`` for the others).

    Example:
        >>> report.policies[0].rung_fraction  # doctest: +SKIP
        {'h100': 0.48, 'a100': 0.2, 'l4': 0.25, 'cpu': 0.07, 'cache': 0.0, 'shed': 0.0}
    """

    policy: str
    params: dict[str, Any]
    hysteresis: int | None
    hysteresis_s: float | None
    hysteresis_asked_s: float | None
    promotion_delay_s: float
    demotion_delay_s: float
    rung_fraction: dict[str, float]
    unserved_fraction: float
    shed_fraction: float
    served_hours: float
    served_fraction: float
    falls: int
    climbs: int
    climbs_abandoned: int
    climbs_per_day: float
    falls_per_day: float
    flaps: int
    flap_window_s: float
    top_fraction: float
    degraded_s_total: float
    degraded_episodes: int
    degraded_longest_s: float
    degraded_p95_episode_s: float
    below_best_s_total: float
    below_best_fraction: float
    regret: float
    regret_hours: float
    alerts: int
    quality_weighted_availability: float
    cost: float
    cost_starting: float
    cost_standby: float
    cost_standby_by_rung: dict[str, float]
    cost_always_top: float
    cost_oracle: float
    cost_per_served_hour: float | None
    spread: dict[str, Interval | None]
    replay: Replay = field(repr=False, compare=False)

    @property
    def requests(self) -> dict[str, Any] | None:
        """The replay's request figures (``Replay.requests``), where its model has them."""
        return self.replay.requests

    @property
    def label(self) -> str:
        """``policy``, with the hysteresis for the ladder's sweep: ``"ladder h=2"``."""
        if self.policy == "ladder" and self.hysteresis is not None and not self.params:
            return f"ladder h={self.hysteresis}"
        return self.policy

    @property
    def cost_vs_top(self) -> float | None:
        """``cost / cost_always_top`` (``None`` when the top rung is free)."""
        return self.cost / self.cost_always_top if self.cost_always_top else None

    @property
    def cost_vs_oracle(self) -> float | None:
        """``cost / cost_oracle`` (``None`` when the oracle costs nothing)."""
        return self.cost / self.cost_oracle if self.cost_oracle else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures (everything but the raw replay)."""
        out = {k: v for k, v in self.__dict__.items() if k != "replay"}
        out["cost_vs_top"] = self.cost_vs_top
        out["cost_vs_oracle"] = self.cost_vs_oracle
        out["requests"] = self.requests
        return out


NoteKind = Literal["above_oracle", "cannot_run"]
"""What a :class:`Note` is about."""


@dataclass(frozen=True)
class Note:
    """One loud note of a report: its kind, the policy it names, and the sentence.

    Attributes:
        kind: ``"above_oracle"``: the policy's figures beat the oracle's, and ``text``
            says which and why (:func:`~ray_ladder.simulate.bounds.oracle_notes`);
            ``"cannot_run"``: the system cannot run this workload (a Serve-only system
            on a training gang), so it has no row.
        policy: The label of the policy it names (``"litellm"``, ``"ladder h=2"``).
        text: The note as a sentence, for people.

    Example:
        >>> Note("cannot_run", "litellm", "no row for litellm: ...").to_dict()
        {'kind': 'cannot_run', 'policy': 'litellm', 'text': 'no row for litellm: ...'}
    """

    kind: NoteKind
    policy: str
    text: str

    def to_dict(self) -> dict[str, str]:
        """The note as a JSON object."""
        return {"kind": self.kind, "policy": self.policy, "text": self.text}


@dataclass(frozen=True)
class SimulationReport:
    """A whole simulation: the ladder, the traces, the oracle and each policy.

    Attributes:
        ladder: Ladder name.
        rungs: Per eligible rung: name, kind, quality, cost_per_hour, warm, trace
            source and the fraction of ticks it was obtainable.
        ticks: Observations replayed.
        tick_s: Seconds between observations.
        duration_s: ``ticks * tick_s``.
        warm: Compute rungs treated as warm (instant falls).
        oracle: Hysteresis 1 and no switching cost: the best any policy can do.
        policies: One report per ``hysteresis`` value, in the order asked.
        comparison: One report per compared policy (``compare=``), in the order asked.
        flap_window_s: The window every report counts flaps in.
        spread_method: How the policies' ``spread`` intervals were drawn (blocks, their
            length, resamples, seed, level).
        losses: Each figure on which a peer beats a ladder row, with both values and
            why (:func:`~ray_ladder.simulate.losses.where_ladder_loses`); empty when the
            ladder loses on none.
        notes: Loud notes, one :class:`Note` each (a JSON object in :meth:`to_dict`):
            ``"above_oracle"`` for each policy whose figures beat the oracle's, and why
            (:func:`~ray_ladder.simulate.bounds.oracle_notes`); ``"cannot_run"`` for each
            compared policy that cannot run the workload and so has no row. Empty when
            there is neither.
        timeline: The aligned observations (not in :meth:`to_dict`).
        traces: The traces replayed (not in :meth:`to_dict`).

    Example:
        >>> report = simulate("ladder.yaml", {"h100": "h100.json"})  # doctest: +SKIP
        >>> report.to_json()  # doctest: +SKIP
    """

    ladder: str
    rungs: list[dict[str, Any]]
    ticks: int
    tick_s: float
    duration_s: float
    warm: list[str]
    oracle: PolicyReport
    policies: list[PolicyReport]
    timeline: Timeline = field(repr=False, compare=False)
    traces: dict[str, Trace] = field(repr=False, compare=False)
    comparison: list[PolicyReport] = field(default_factory=list)
    flap_window_s: float = 0.0
    notes: list[Note] = field(default_factory=list)
    spread_method: dict[str, Any] = field(default_factory=dict)
    losses: list[Loss] = field(default_factory=list)

    def compared(self, label: str) -> PolicyReport:
        """The compared policy with this label (``"karpenter"``, ``"ladder"``, ...).

        Example:
            >>> report.compared("ray-native").quality_weighted_availability  # doctest: +SKIP
            0.61
        """
        for p in self.comparison:
            if p.policy == label:
                return p
        raise KeyError(f"no compared policy {label!r}; have "
                       f"{[p.policy for p in self.comparison]}")

    def policy(self, hysteresis: int) -> PolicyReport:
        """The report of the policy with this hysteresis."""
        for p in self.policies:
            if p.hysteresis == hysteresis:
                return p
        raise KeyError(f"no policy with hysteresis {hysteresis}; have "
                       f"{[p.hysteresis for p in self.policies]}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON report."""
        return {
            "ladder": self.ladder,
            "rungs": self.rungs,
            "ticks": self.ticks,
            "tick_s": self.tick_s,
            "duration_s": self.duration_s,
            "warm": self.warm,
            "flap_window_s": self.flap_window_s,
            "spread_method": self.spread_method,
            "oracle": self.oracle.to_dict(),
            "policies": [p.to_dict() for p in self.policies],
            "comparison": [p.to_dict() for p in self.comparison],
            "notes": [n.to_dict() for n in self.notes],
            "losses": [x.to_dict() for x in self.losses],
        }

    def to_json(self, indent: int | None = 2) -> str:
        """The JSON report as text."""
        return json.dumps(self.to_dict(), indent=indent)


def summarise(
    rep: Replay,
    *,
    quality: list[float],
    cost_per_hour: list[float],
    serves: list[bool],
    reference: Reference,
    cost_oracle: float | None = None,
    standby_per_hour: list[float] | None = None,
    obtainable_ticks: list[int] | None = None,
    flap_window_s: float | None = None,
) -> PolicyReport:
    """Turn a replay's change points into a :class:`PolicyReport`.

    Args:
        rep: The replay.
        quality: Quality of each eligible rung (``rep.names`` order).
        cost_per_hour: Cost of each eligible rung.
        serves: Whether time on each eligible rung is served time
            (:func:`~ray_ladder.simulate.figures.serving_rungs`).
        reference: The best available rung per tick and the blocks of the spread
            (:func:`~ray_ladder.simulate.reference.build_reference`).
        cost_oracle: The oracle's bill (``None``: this replay is the oracle).
        standby_per_hour: Standby bill per hour of each rung while it idles warm (0 for
            rungs that are not warm); ``None``: no standby.
        obtainable_ticks: Ticks each rung is obtainable (needed with ``standby_per_hour``).
        flap_window_s: Window for flaps (default: this replay's hysteresis, else a tick).
    """
    ticks, tick = rep.ticks, rep.tick_s
    units, unserved, episodes = time_per_rung(rep)
    hours, days = tick / 3600.0, ticks * tick / 86400.0
    starting, standby = start_and_standby_bills(rep, units, cost_per_hour, standby_per_hour,
                                                 obtainable_ticks)
    cost = sum(c * u * hours for c, u in zip(cost_per_hour, units, strict=True)) + starting
    window = (rep.hysteresis or 1) * tick if flap_window_s is None else flap_window_s
    served_h = served_hours(units, serves, tick)
    shed = sum((u for u, s in zip(units, serves, strict=True) if not s), 0.0)
    standby_total = sum(standby.values())
    vs_best = against(rep, reference, cost_per_hour=cost_per_hour, serves=serves,
                      standby_per_hour=standby_per_hour)
    return PolicyReport(
        **_episode_fields(episodes),
        **_best_fields(vs_best.below_best_ticks, vs_best.regret_ticks, ticks, tick),
        policy=rep.policy,
        params=dict(rep.params),
        hysteresis=rep.hysteresis,
        hysteresis_s=None if rep.hysteresis is None else rep.hysteresis * tick,
        hysteresis_asked_s=rep.hysteresis_asked_s,
        promotion_delay_s=rep.promotion_delay_s,
        demotion_delay_s=rep.demotion_delay_s,
        rung_fraction={name: u / ticks for name, u in zip(rep.names, units, strict=True)},
        unserved_fraction=unserved / ticks,
        shed_fraction=shed / ticks,
        served_hours=served_h,
        served_fraction=served_h * 3600.0 / (ticks * tick),
        falls=rep.falls,
        climbs=rep.climbs,
        climbs_abandoned=rep.climbs_abandoned,
        climbs_per_day=rep.climbs / days,
        falls_per_day=rep.falls / days,
        flaps=count_flaps(rep.target, len(rep.names), window / tick, rep.lost),
        flap_window_s=window,
        top_fraction=units[0] / ticks if units else 0.0,
        alerts=rep.alerts,
        quality_weighted_availability=sum(
            q * u for q, u in zip(quality, units, strict=True)) / ticks,
        cost=cost,
        cost_starting=starting,
        cost_standby=standby_total,
        cost_standby_by_rung=standby,
        cost_always_top=cost_per_hour[0] * ticks * hours,
        cost_oracle=cost if cost_oracle is None else cost_oracle,
        cost_per_served_hour=per_served_hour(cost + standby_total, served_h),
        spread=vs_best.spread,
        replay=rep,
    )


def _episode_fields(episodes: list[float]) -> dict[str, Any]:
    """The degraded figures (against the top rung) from the episodes' seconds."""
    return {"degraded_s_total": sum(episodes), "degraded_episodes": len(episodes),
            "degraded_longest_s": max(episodes, default=0.0),
            "degraded_p95_episode_s": p95(episodes)}


def _best_fields(below_ticks: float, regret_ticks: float, ticks: int,
                 tick_s: float) -> dict[str, Any]:
    """The figures against the best available rung, in seconds, shares and hours."""
    return {"below_best_s_total": round(below_ticks * tick_s, 3),  # ms: float noise
            "below_best_fraction": below_ticks / ticks, "regret": regret_ticks / ticks,
            "regret_hours": regret_ticks * tick_s / 3600.0}
