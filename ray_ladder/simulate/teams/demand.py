"""Per-team demand traces: the units each team wants of each shared rung, over time.

A trace is a list of rows ``time_s,team,rung,units``: from ``time_s`` on, ``team`` wants
``units`` units of the on-prem shared rung ``rung`` (until a later row for the same team
and rung says otherwise). Teams and rungs start at 0 units. CSV files have that header
(optional) and allow ``#`` comments; :func:`generate_bursts` writes synthetic ones.

Example:
    >>> trace = DemandTrace.from_rows([(0, "b", "h100", 4), (10, "a", "h100", 2),
    ...                                (30, "b", "h100", 0)], duration_s=40)
    >>> trace.at(15.0)
    {'b': {'h100': 4}, 'a': {'h100': 2}}
"""

from __future__ import annotations

import csv
import io
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ray_ladder.core.fleet import Fleet

HEADER = ("time_s", "team", "rung", "units")


@dataclass(frozen=True, slots=True)
class DemandRow:
    """From ``time_s`` on, ``team`` wants ``units`` units of ``rung``."""

    time_s: float
    team: str
    rung: str
    units: int


@dataclass(frozen=True)
class DemandTrace:
    """Rows sorted by time (stable: a later row at the same time wins).

    Attributes:
        rows: The changes.
        duration_s: How long the replay runs (default: the last row's time).
        source: Where it came from (a file, ``bursts:seed=...``).
    """

    rows: tuple[DemandRow, ...]
    duration_s: float
    source: str = "<rows>"

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[float, str, str, int] | DemandRow],
                  duration_s: float | None = None, source: str = "<rows>") -> DemandTrace:
        """Build a trace from ``(time_s, team, rung, units)`` tuples or rows."""
        out = [r if isinstance(r, DemandRow) else
               DemandRow(float(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in rows]
        for r in out:
            if r.time_s < 0 or r.units < 0:
                raise ValueError(f"demand {source}: {r}: time_s and units must be >= 0")
        out.sort(key=lambda r: r.time_s)
        end = max((r.time_s for r in out), default=0.0)
        return cls(tuple(out), float(end if duration_s is None else duration_s), source)

    @property
    def teams(self) -> list[str]:
        """Teams the trace names, in first-seen order."""
        return list(dict.fromkeys(r.team for r in self.rows))

    def at(self, t: float) -> dict[str, dict[str, int]]:
        """Team -> rung -> units wanted at ``t`` (rows at ``t`` included)."""
        out: dict[str, dict[str, int]] = {}
        for r in self.rows:
            if r.time_s > t:
                break
            out.setdefault(r.team, {})[r.rung] = r.units
        return out

    def check(self, fleet: Fleet) -> None:
        """Raise ``ValueError`` naming the first row whose team or rung the fleet lacks."""
        teams = {t.name for t in fleet.teams}
        for n, r in enumerate(self.rows, start=1):
            if r.team not in teams:
                raise ValueError(f"demand {self.source}: row {n}: team {r.team!r} is not "
                                 f"in fleet {fleet.fleet!r}; use one of {sorted(teams)}")
            if r.rung not in fleet.onprem_rungs:
                raise ValueError(f"demand {self.source}: row {n}: rung {r.rung!r} is not "
                                 f"an on-prem shared rung; use one of {fleet.onprem_rungs} "
                                 "(a team's demand beyond it is bought on the cloud rung)")

    def to_csv(self) -> str:
        """The trace as CSV with a header (what :func:`load_demand` reads)."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(HEADER)
        for r in self.rows:
            writer.writerow([f"{r.time_s:g}", r.team, r.rung, r.units])
        return buf.getvalue()


def load_demand(path: str | Path, duration_s: float | None = None) -> DemandTrace:
    """Read a ``time_s,team,rung,units`` CSV; errors name the file, row and fix."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"demand {p}: cannot read file: {err}") from None
    return parse_demand(text, str(p), duration_s)


def parse_demand(text: str, source: str = "<string>",
                 duration_s: float | None = None) -> DemandTrace:
    """Parse demand CSV text (header optional, ``#`` comments and blank lines skipped)."""
    lines = [line for line in text.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    rows = list(csv.reader(lines))
    cols = {name: i for i, name in enumerate(HEADER)}
    if rows and not _is_number(rows[0][0]):
        header = [h.strip() for h in rows[0]]
        missing = [h for h in HEADER if h not in header]
        if missing:
            raise ValueError(f"demand {source}: the header must name {','.join(HEADER)}; "
                             f"missing {missing}")
        cols, rows = {h: header.index(h) for h in HEADER}, rows[1:]
    out: list[DemandRow] = []
    for n, row in enumerate(rows, start=1):
        try:
            out.append(DemandRow(float(row[cols["time_s"]]), row[cols["team"]].strip(),
                                 row[cols["rung"]].strip(), int(row[cols["units"]])))
        except (IndexError, ValueError) as err:
            raise ValueError(f"demand {source}: row {n}: expected 'time_s,team,rung,units' "
                             f"(units a whole number), got {row} ({err})") from None
    if not out:
        raise ValueError(f"demand {source}: no rows")
    return DemandTrace.from_rows(out, duration_s, source)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def generate_bursts(teams: Fleet | Sequence[str], duration_s: float, seed: int = 0, *,
                    rung: str = "h100", base: Mapping[str, int] | int | None = None,
                    burst_units: Mapping[str, int] | int | None = None,
                    mean_gap_s: float = 3600.0, mean_burst_s: float = 900.0,
                    step_s: float = 60.0) -> DemandTrace:
    """Each team's base demand plus random bursts (deterministic by ``seed``).

    Bursts arrive per team as a Poisson process (exponential gaps of mean ``mean_gap_s``)
    and last an exponential time of mean ``mean_burst_s``; both are rounded up to whole
    ``step_s``. During a burst a team wants ``base + burst_units``. With a fleet, ``rung``
    defaults to its first on-prem rung, ``base`` to half a team's quota and
    ``burst_units`` to its quota (a burst borrows); with names, ``base`` defaults to 0 and
    ``burst_units`` to 1. The last row of each team sets 0 at ``duration_s``.

    Example:
        >>> t = generate_bursts(["a", "b"], 7200, seed=1, burst_units=2)
        >>> t.duration_s, t.rows[0]
        (7200.0, DemandRow(time_s=0.0, team='a', rung='h100', units=0))
    """
    if duration_s <= 0 or mean_gap_s <= 0 or mean_burst_s <= 0 or step_s <= 0:
        raise ValueError("generate_bursts: duration_s, mean_gap_s, mean_burst_s and "
                         "step_s must be > 0")
    fleet: Fleet | None = None
    if isinstance(teams, Fleet):
        fleet, names = teams, [t.name for t in teams.teams]
        if rung == "h100" and "h100" not in fleet.onprem_rungs:
            rung = fleet.onprem_rungs[0]
    else:
        names = [str(n) for n in teams]
    quota = {n: fleet.nominal(n, rung) if fleet is not None else 0 for n in names}
    rng = random.Random(seed)
    rows: list[DemandRow] = []
    for name in names:
        low = _per_team(base, name, quota[name] // 2)
        high = low + _per_team(burst_units, name, quota[name] if fleet is not None else 1)
        rows.append(DemandRow(0.0, name, rung, low))
        t = _round_up(rng.expovariate(1.0 / mean_gap_s), step_s)
        while t < duration_s:
            end = t + _round_up(rng.expovariate(1.0 / mean_burst_s), step_s)
            rows.append(DemandRow(t, name, rung, high))
            if end < duration_s:
                rows.append(DemandRow(end, name, rung, low))
            t = end + _round_up(rng.expovariate(1.0 / mean_gap_s), step_s)
        rows.append(DemandRow(float(duration_s), name, rung, 0))
    return DemandTrace.from_rows(rows, float(duration_s), f"bursts:seed={seed},"
                                 f"gap={mean_gap_s:g},burst={mean_burst_s:g}")


def _per_team(value: Mapping[str, int] | int | None, team: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, int):
        return value
    return int(value.get(team, default))


def _round_up(seconds: float, step_s: float) -> float:
    return max(1, math.ceil(seconds / step_s)) * step_s
