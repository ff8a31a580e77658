"""The fleet file: the teams that share a cluster's scarce rungs (strict pydantic models).

A fleet file sits next to the ladder files. It names the **shared rungs** (what one unit
of each is, in Ray resources, and whether it is bought in the cloud) and the **teams**:
a weight, per-rung nominal quotas in units, borrowing and lending limits, an optional
cohort (teams lend and borrow only within theirs), a reclaim grace period, constraints
bound to every piece of the team's work, and an optional budget.

Example:
    >>> fleet = Fleet.from_yaml('''
    ... fleet: platform
    ... rungs: {h100: {resources: {ladder/h100: 1}, cost_per_hour: 10}}
    ... teams:
    ...   - {name: research, quota: {h100: 2}, cohort: onprem}
    ...   - {name: product, quota: {h100: 2}, cohort: onprem, weight: 2}
    ... ''')
    >>> fleet.team("product").weight, fleet.nominal("research", "h100")
    (2.0, 2)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from ray_ladder.core.config_errors import FLEET_KEYS, issues_from_validation_error
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.documents import parse_yaml, read_text
from ray_ladder.core.exceptions import ConfigError, ConfigIssue
from ray_ladder.core.spec import SLUG_PATTERN

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)
OnExhausted = Literal["demote", "queue", "reject"]


def _rule(path: str, message: str, value: object, fix: str) -> PydanticCustomError:
    return PydanticCustomError("ladder_rule", message, {"path": path, "value": value,
                                                        "fix": fix})


class SharedRung(BaseModel):
    """One rung the teams share: what one unit of it is.

    Attributes:
        resources: Ray resources of one unit (one placement), e.g. ``{"ladder/h100": 1}``.
        cloud: Bought through the autoscaler on demand (no quota: the hook asks for it
            for a team only when the team cannot get an on-prem rung of its ladder).
        cost_per_hour: Cost of one unit per hour (budgets count it).
        jurisdiction: Where its nodes are (``eu``...); bound constraints apply to it.
    """

    model_config = _STRICT

    resources: dict[str, float] = Field(min_length=1, description="Ray resources of one unit.")
    cloud: bool = Field(False, description="Bought on demand in the cloud (no quota).")
    cost_per_hour: float = Field(0.0, ge=0, description="Cost of one unit per hour.")
    jurisdiction: str | None = Field(None, description="Where its nodes are, e.g. 'eu'.")


class Budget(BaseModel):
    """What a team may spend per window, and what happens once it has.

    Example:
        >>> Budget(max_cost=100.0, window_s=3600).on_exhausted
        'demote'
    """

    model_config = _STRICT

    max_cost: float = Field(gt=0, description="Cost allowed per window (rungs' cost_per_hour).")
    window_s: float = Field(86400.0, gt=0, description="Length of the budget window.")
    on_exhausted: OnExhausted = Field(
        "demote", description="demote (cheapest rungs the ladder allows), queue (wait for "
        "the next window) or reject (HTTP 429 / BudgetExhaustedError).")


class Team(BaseModel):
    """One team: its share of the scarce rungs and what binds its work."""

    model_config = _STRICT

    name: str = Field(pattern=SLUG_PATTERN, description="Unique team name.")
    weight: float = Field(1.0, gt=0, description="Share of lent capacity under contention.")
    cohort: str | None = Field(None, pattern=SLUG_PATTERN,
                               description="Teams lend and borrow only within one cohort.")
    quota: dict[str, int] = Field(default_factory=dict,
                                  description="Nominal units per shared rung: its own.")
    borrowing_limit: dict[str, int] | None = Field(
        None, description="Most units per rung borrowed beyond the quota (unset: no limit).")
    lending_limit: dict[str, int] | None = Field(
        None, description="Most idle quota units per rung lent to others (unset: all).")
    reclaim_grace_s: float = Field(30.0, ge=0,
                                   description="Notice a borrower gets before a reclaim.")
    constraints: Constraints | None = Field(
        None, description="Bound to every piece of the team's work (a request narrows).")
    budget: Budget | None = Field(None, description="Spending per window, and what then.")

    def limit(self, which: Literal["borrowing", "lending"], rung: str) -> int | None:
        """The team's borrowing or lending limit on ``rung`` (``None``: no limit)."""
        table = self.borrowing_limit if which == "borrowing" else self.lending_limit
        if table is None:
            return None
        return table.get(rung, 0) if which == "borrowing" else table.get(rung)

    def may_use(self, rung: SharedRung) -> bool:
        """Whether the team's bound constraints allow a unit of ``rung`` (its
        ``jurisdiction`` and ``max_cost_per_hour``; a rung with no jurisdiction is not in
        the team's). The arbiter grants no unit a team may not use, borrowed or not.

        Example:
            >>> eu = Team(name="r", constraints=Constraints(jurisdiction="eu"))
            >>> eu.may_use(SharedRung(resources={"ladder/h100": 1}, jurisdiction="us"))
            False
        """
        c = self.constraints
        if c is None:
            return True
        if c.jurisdiction is not None and rung.jurisdiction != c.jurisdiction:
            return False
        return c.max_cost_per_hour is None or rung.cost_per_hour <= c.max_cost_per_hour


class Fleet(BaseModel):
    """The fleet file: shared rungs and the teams that share them."""

    model_config = _STRICT

    fleet: str = Field(pattern=SLUG_PATTERN, description="The fleet's name.")
    description: str = Field("", description="Free text.")
    control_period_s: float = Field(1.0, gt=0, description="Seconds between arbiter rounds.")
    node_table_period_s: float = Field(
        0.25, gt=0, description="Seconds between the arbiter's reads of Ray's node table, "
        "published for every ladder on the cluster (a part that refreshes more often "
        "than this reads the GCS itself).")
    demand_hold_s: float = Field(
        3.0, ge=0, description="Seconds a drop in the demand a part reports is held before "
        "the arbiter acts on it (at least two control periods): a dip shorter than this "
        "neither withdraws a reclaim notice nor hands a unit back (docs/teams.md).")
    rungs: dict[str, SharedRung] = Field(min_length=1, description="The shared rungs.")
    teams: list[Team] = Field(min_length=1, description="The teams.")

    @model_validator(mode="after")
    def _check(self) -> Fleet:
        seen: set[str] = set()
        for i, team in enumerate(self.teams):
            if team.name in seen:
                raise _rule(f"teams[{i}].name", "team {value} is listed twice", team.name,
                            "give each team a unique name")
            seen.add(team.name)
            for field in ("quota", "borrowing_limit", "lending_limit"):
                table = getattr(team, field) or {}
                for rung, units in table.items():
                    self._check_units(i, field, rung, units)
        return self

    def _check_units(self, i: int, field: str, rung: str, units: int) -> None:
        path = f"teams[{i}].{field}.{rung}"
        if rung not in self.rungs:
            raise _rule(path, "rung {value} is not a shared rung", rung,
                        f"use one of {sorted(self.rungs)} or add it under 'rungs:'")
        if units < 0:
            raise _rule(path, "units must be >= 0, got {value}", units, "use 0 or more")
        if field == "quota" and self.rungs[rung].cloud:
            raise _rule(path, "cloud rung {value} takes no quota", rung,
                        "remove it: a cloud rung is bought for a team that needs it")

    # --- loading -------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> Fleet:
        """Validate a plain dict; raises :class:`ConfigError` naming every problem."""
        if not isinstance(data, dict):
            raise ConfigError([ConfigIssue("", "a fleet file must be a mapping",
                                           type(data).__name__,
                                           "start the document with 'fleet:', 'rungs:' "
                                           "and 'teams:'")], source, "fleet file")
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise ConfigError(issues_from_validation_error(err, data, FLEET_KEYS),
                              source, "fleet file") from None

    @classmethod
    def from_yaml(cls, text: str, source: str = "<string>") -> Fleet:
        """Parse and validate YAML (JSON is valid YAML too); duplicate keys are errors."""
        return cls.from_dict(parse_yaml(text, source, "fleet file"), source)

    # --- queries -------------------------------------------------------------------------

    def team(self, name: str) -> Team:
        """The team called ``name``; ``KeyError`` listing the teams otherwise."""
        for team in self.teams:
            if team.name == name:
                return team
        raise KeyError(f"no team {name!r} in fleet {self.fleet!r}; teams: "
                       f"{[t.name for t in self.teams]}")

    def nominal(self, team: str, rung: str) -> int:
        """``team``'s nominal quota of ``rung`` in units (0 when it has none)."""
        return self.team(team).quota.get(rung, 0)

    @property
    def hold_window_s(self) -> float:
        """Seconds a reported demand drop is held: ``demand_hold_s``, at least two control
        periods (so a one-round dip is always held)."""
        return max(self.demand_hold_s, 2 * self.control_period_s)

    @property
    def onprem_rungs(self) -> list[str]:
        """Shared rungs under quota (not cloud)."""
        return [name for name, rung in self.rungs.items() if not rung.cloud]


def is_fleet_document(data: Any) -> bool:
    """Whether a parsed YAML document is a fleet file (it has a ``fleet:`` key)."""
    return isinstance(data, dict) and "fleet" in data


def load_fleet(path: str | Path) -> Fleet:
    """Read and validate a fleet file (YAML or JSON); errors name the file."""
    return Fleet.from_yaml(read_text(path, "fleet file"), str(path))
