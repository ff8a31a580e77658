"""One ladder over several trace sets (zones, months, seeds): each headline figure per set,
its range across the sets, and whether each margin between the ladder and a peer holds in
every set.

A report's 90 % intervals (:mod:`ray_ladder.simulate.spread`) resample the days of *one*
trace set; they say nothing of another zone or month. Replaying the same ladder and the
same policies on each set, one :func:`~ray_ladder.simulate.api.simulate` call a set, shows
how far each figure moves from set to set, and so whether a margin between two policies
is larger than the difference between zones:

* **per set and range**: each headline figure of :data:`~ray_ladder.simulate.losses.FIGURES`
  (quality x availability, regret, time below the best rung, time not served, flaps, cost
  per served hour) of each row, per set, with its lowest and highest value;
* **margins**: for each ladder row and each peer, the ladder's lead on each figure per set
  (positive: the ladder does better), at the precision the report prints, and a verdict:
  ``"ladder"`` (ahead in every set), ``"peer"`` (the peer ahead in every set), ``"tie"``
  (equal in every set) or ``"depends"`` (the sign changes with the set: the margin is
  within the difference between sets).

    from ray_ladder.simulate import expand_sets, simulate_sets
    sets = expand_sets({"h100": "traces/{set}_v100_8.json"}, ["us-west-2a", "us-west-2b"])
    out = simulate_sets("ladder.yaml", sets, compare="all")
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from ray_ladder.core.spec import Ladder, as_ladder
from ray_ladder.simulate.api import simulate
from ray_ladder.simulate.losses import FIGURES
from ray_ladder.simulate.report import PolicyReport, SimulationReport
from ray_ladder.simulate.zones import RungTraces, TraceLike

SET_FIELD = "{set}"
"""Where a trace spec names its set (:func:`expand_sets`)."""

Verdict = Literal["ladder", "peer", "tie", "depends"]


@dataclass(frozen=True)
class SetFigure:
    """One headline figure of one row across the trace sets.

    Attributes:
        row: The row's label (``"ladder"``, ``"karpenter"``, ``"oracle"``).
        figure: A key of :data:`~ray_ladder.simulate.losses.FIGURES`.
        values: Set name -> the figure in that set (``None``: undefined there, e.g. no
            cost per served hour when nothing was served).
        low: The lowest value across the sets (``None`` when none is defined).
        high: The highest.

    Example:
        >>> SetFigure("ladder", "regret", {"a": 0.25, "b": 0.75}, 0.25, 0.75).spread
        0.5
    """

    row: str
    figure: str
    values: dict[str, float | None]
    low: float | None
    high: float | None

    @property
    def spread(self) -> float | None:
        """``high - low``: how far the figure moves from set to set."""
        return None if self.low is None or self.high is None else self.high - self.low

    def to_dict(self) -> dict[str, Any]:
        """The figure as a JSON object."""
        return {**asdict(self), "spread": self.spread}


@dataclass(frozen=True)
class SetMargin:
    """The ladder's lead over a peer on one figure, per trace set.

    Attributes:
        ladder: The ladder row's label.
        peer: The peer's label.
        figure: A key of :data:`~ray_ladder.simulate.losses.FIGURES`.
        lead: Set name -> the ladder's lead, positive when the ladder does better
            (higher quality, lower cost...), from the two values rounded as the report
            prints them (``None``: undefined in that set).
        low: The smallest lead across the sets.
        high: The largest.
        verdict: ``"ladder"`` (ahead in every set), ``"peer"`` (behind in every set),
            ``"tie"`` (equal in every set) or ``"depends"`` (the sign changes with the
            set, or a set has no value).

    Example:
        >>> m = SetMargin("ladder", "litellm", "regret", {"a": 0.002, "b": -0.001},
        ...               -0.001, 0.002, "depends")
        >>> m.verdict
        'depends'
    """

    ladder: str
    peer: str
    figure: str
    lead: dict[str, float | None]
    low: float | None
    high: float | None
    verdict: Verdict

    def to_dict(self) -> dict[str, Any]:
        """The margin as a JSON object."""
        return asdict(self)


@dataclass(frozen=True)
class TraceSetReport:
    """One ladder over several trace sets.

    Attributes:
        sets: Set name -> its whole report, in the order given.
        figures: Each headline figure of each row across the sets, rows in report order
            (the compared policies and the oracle; the hysteresis sweep and the oracle
            when nothing is compared).
        margins: Each ladder row against each compared peer, per figure (empty when
            nothing is compared).

    Example:
        >>> out = simulate_sets(ladder, sets, compare="all")  # doctest: +SKIP
        >>> out.figure("litellm", "regret").values  # doctest: +SKIP
        {'us-west-2a': 0.0123, 'us-west-2b': 0.0311}
    """

    sets: dict[str, SimulationReport]
    figures: list[SetFigure]
    margins: list[SetMargin]

    @property
    def names(self) -> list[str]:
        """The set names, in order."""
        return list(self.sets)

    def figure(self, row: str, figure: str) -> SetFigure:
        """The :class:`SetFigure` of ``row`` (a label) and ``figure`` (a FIGURES key)."""
        for f in self.figures:
            if f.row == row and f.figure == figure:
                return f
        raise KeyError(f"no figure {figure!r} of row {row!r}; rows: "
                       f"{sorted({f.row for f in self.figures})}, figures: {list(FIGURES)}")

    def margin(self, ladder: str, peer: str, figure: str) -> SetMargin:
        """The :class:`SetMargin` of the ``ladder`` row over ``peer`` on ``figure``."""
        for m in self.margins:
            if (m.ladder, m.peer, m.figure) == (ladder, peer, figure):
                return m
        raise KeyError(f"no margin of {ladder!r} over {peer!r} on {figure!r}; pairs: "
                       f"{sorted({(m.ladder, m.peer) for m in self.margins})}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON report: the set names, each set's own report, the figures across the
        sets and the margins."""
        return {"trace_sets": self.names,
                "reports": {name: r.to_dict() for name, r in self.sets.items()},
                "across": [f.to_dict() for f in self.figures],
                "margins": [m.to_dict() for m in self.margins]}

    def to_json(self, indent: int | None = 2) -> str:
        """The JSON report as text."""
        return json.dumps(self.to_dict(), indent=indent)


def expand_sets(traces: Mapping[str, RungTraces],
                sets: Mapping[str, str] | Iterable[str]) -> dict[str, dict[str, RungTraces]]:
    """One mapping of traces per set: ``{set}`` in each spec string replaced by the set's
    value (a mapping name -> value, or names that are their own values).

    Raises:
        ValueError: no set, or no spec that names ``{set}`` (every set would be the same).

    Example:
        >>> expand_sets({"h100": "t/{set}_v100_8.json", "l4": "always"}, ["a", "b"])["b"]
        {'h100': 't/b_v100_8.json', 'l4': 'always'}
        >>> expand_sets({"h100": "markov:up=1h,down=1h,seed={set}"}, {"s1": "1"})
        {'s1': {'h100': 'markov:up=1h,down=1h,seed=1'}}
    """
    values = dict(sets) if isinstance(sets, Mapping) else {s: s for s in sets}
    if not values:
        raise ValueError("give at least one trace set")
    if not names_a_set(traces):
        raise ValueError(f"no trace names {SET_FIELD}, so every set would replay the same "
                         f"traces: put {SET_FIELD} where the set goes, e.g. "
                         f"h100=traces/{SET_FIELD}_v100_8.json")
    return {name: {rung: _fill(given, value) for rung, given in traces.items()}
            for name, value in values.items()}


def names_a_set(traces: Mapping[str, RungTraces]) -> bool:
    """Whether a spec of ``traces`` (a zone's included) names ``{set}``.

    Example:
        >>> names_a_set({"h100": {"a": "{set}/a.json"}}), names_a_set({"h100": "always"})
        (True, False)
    """
    return any(SET_FIELD in spec for spec in _specs(traces))


def _specs(traces: Mapping[str, RungTraces]) -> list[str]:
    """Every spec string of ``traces``, a zoned rung's zones included."""
    out: list[str] = []
    for given in traces.values():
        for spec in given.values() if isinstance(given, Mapping) else [given]:
            if isinstance(spec, str):
                out.append(spec)
    return out


def _fill(given: RungTraces, value: str) -> RungTraces:
    if isinstance(given, Mapping):
        return {zone: _fill_one(spec, value) for zone, spec in given.items()}
    return _fill_one(given, value)


def _fill_one(spec: TraceLike, value: str) -> TraceLike:
    return spec.replace(SET_FIELD, value) if isinstance(spec, str) else spec


def simulate_sets(ladder: Ladder | str | Path,
                  trace_sets: Mapping[str, Mapping[str, RungTraces]],
                  **options: Any) -> TraceSetReport:
    """Replay ``ladder`` on each trace set with the same ``options`` (those of
    :func:`~ray_ladder.simulate.api.simulate`: ``compare``, ``hysteresis``, ``tick_s``...)
    and put each headline figure side by side across the sets.

    Args:
        ladder: A :class:`~ray_ladder.Ladder` or a path to its file.
        trace_sets: Set name -> the traces of that set, as ``simulate``'s ``traces``
            (:func:`expand_sets` makes them from one template).
        **options: Passed to every ``simulate`` call.

    Raises:
        ValueError: no set, or what ``simulate`` raises for a set (the set is named).

    Example:
        >>> out = simulate_sets("examples/ladders/gpu-serving.yaml", {
        ...     "calm": {"h100": "outage:1h-2h"},
        ...     "rough": {"h100": "outage:1h-9h", "a100": "outage:3h-5h"}},
        ...     duration_s=86400, tick_s=600, compare="ladder,karpenter")
        >>> {k: round(v, 2) for k, v in out.figure("ladder", "cost_per_served_hour").values.items()}
        {'calm': 12.76, 'rough': 10.03}
        >>> m = out.margin("ladder", "karpenter", "quality_weighted_availability")
        >>> m.lead, m.verdict
        ({'calm': 0.0, 'rough': 0.175}, 'depends')
    """
    if not trace_sets:
        raise ValueError("give at least one trace set")
    lad = as_ladder(ladder)
    reports: dict[str, SimulationReport] = {}
    for name, traces in trace_sets.items():
        try:
            reports[name] = simulate(lad, traces, **options)
        except ValueError as err:
            raise ValueError(f"trace set {name!r}: {err}") from err
    return across_sets(reports)


def _rows(report: SimulationReport) -> list[PolicyReport]:
    rows = report.comparison or report.policies
    return [*rows, report.oracle]


def _label(p: PolicyReport, report: SimulationReport) -> str:
    return "oracle" if p is report.oracle else p.label


def across_sets(reports: Mapping[str, SimulationReport]) -> TraceSetReport:
    """The :class:`TraceSetReport` of reports of one ladder and the same policies.

    Raises:
        ValueError: the reports do not have the same rows (another ladder or policies).

    Example:
        >>> across_sets({"a": report_a, "b": report_b}).margins[0].verdict  # doctest: +SKIP
        'ladder'
    """
    names = list(reports)
    rows = {name: _rows(r) for name, r in reports.items()}
    labels = [_label(p, reports[names[0]]) for p in rows[names[0]]]
    for name in names[1:]:
        theirs = [_label(p, reports[name]) for p in rows[name]]
        if theirs != labels:
            raise ValueError(f"trace set {name!r} has rows {theirs}, the first set "
                             f"{labels}: compare the same ladder and policies on every set")
    figures = [_figure(label, figure, {n: rows[n][i] for n in names})
               for i, label in enumerate(labels) for figure in FIGURES]
    first = reports[names[0]]
    ladders = [i for i, p in enumerate(first.comparison) if _is_ladder(p)]
    peers = [i for i, p in enumerate(first.comparison) if not _is_ladder(p)]
    margins = [_margin(figure, {n: (reports[n].comparison[i], reports[n].comparison[j])
                                for n in names})
               for i in ladders for j in peers for figure in FIGURES]
    return TraceSetReport(dict(reports), figures, margins)


def _is_ladder(p: PolicyReport) -> bool:
    return p.policy == "ladder" or p.policy.startswith("ladder (")


def _figure(label: str, figure: str, by_set: Mapping[str, PolicyReport]) -> SetFigure:
    get = FIGURES[figure][1]
    values = {name: get(p) for name, p in by_set.items()}
    defined = [v for v in values.values() if v is not None]
    return SetFigure(label, figure, values, min(defined, default=None),
                     max(defined, default=None))


def _margin(figure: str, pairs: Mapping[str, tuple[PolicyReport, PolicyReport]]) -> SetMargin:
    """The ladder's lead on ``figure`` per set, at the precision the report prints."""
    _, get, higher, digits, _, _ = FIGURES[figure]
    lead: dict[str, float | None] = {}
    for name, (lad, peer) in pairs.items():
        a, b = get(lad), get(peer)
        if a is None or b is None:
            lead[name] = None
            continue
        diff = round(a, digits) - round(b, digits)
        lead[name] = round(diff if higher else -diff, digits) + 0.0  # no -0.0
    ladder, peer = next(iter(pairs.values()))
    return SetMargin(ladder.label, peer.label, figure, lead, *_range(list(lead.values())),
                     _verdict(list(lead.values())))


def _range(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    defined = [v for v in values if v is not None]
    return min(defined, default=None), max(defined, default=None)


def _verdict(leads: Sequence[float | None]) -> Verdict:
    defined = [v for v in leads if v is not None]
    if len(defined) < len(leads):
        return "depends"
    if all(v > 0 for v in defined):
        return "ladder"
    if all(v < 0 for v in defined):
        return "peer"
    return "tie" if all(v == 0 for v in defined) else "depends"
