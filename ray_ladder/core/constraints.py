"""Per-request constraints: which rungs a request or task may use."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator


class RungFacts(Protocol):
    """What a constraint reads of a rung (``ray_ladder.Rung`` has it; spec imports this
    module, so this one names the shape instead of importing the class)."""

    @property
    def kind(self) -> str: ...
    @property
    def cost_per_hour(self) -> float: ...
    @property
    def quality(self) -> float: ...
    @property
    def tags(self) -> Mapping[str, str]: ...


class Constraints(BaseModel):
    """Hard limits on the rungs a request or task may run on.

    A constraint is a guarantee, not a preference: a rung that fails any of them is never
    selected, also during retries. ``shed`` rungs produce no data and are always allowed;
    a ``cache`` rung is allowed on cost and quality, and the cache itself only serves an
    entry whose producing rung satisfied the same constraints.

    Example:
        >>> Constraints(jurisdiction="eu", max_cost_per_hour=10.0)
        Constraints(jurisdiction='eu', max_cost_per_hour=10.0, min_quality=None, sites=None)
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    jurisdiction: str | None = Field(
        None, description="Only rungs whose tags.jurisdiction equals this value (e.g. 'eu')."
    )
    max_cost_per_hour: float | None = Field(
        None, ge=0, description="Only rungs with cost_per_hour <= this value."
    )
    min_quality: float | None = Field(
        None, ge=0, le=1, description="Only rungs with quality >= this value."
    )
    sites: tuple[str, ...] | None = Field(
        None, description="Only rungs whose tags.site is one of these (e.g. ('onprem',))."
    )

    @field_validator("sites", mode="before")
    @classmethod
    def _sites_as_tuple(cls, value: object) -> object:
        # Strict mode takes only tuples; a list is the natural way to write a few sites.
        return tuple(value) if isinstance(value, list) else value

    def allows(self, rung: RungFacts) -> bool:
        """Return whether ``rung`` satisfies every constraint.

        Example:
            >>> Constraints(min_quality=0.5).allows(Rung(name="cpu", num_cpus=1, quality=0.2))
            False
        """
        if rung.kind == "shed":
            return True
        if self.max_cost_per_hour is not None and rung.cost_per_hour > self.max_cost_per_hour:
            return False
        if self.min_quality is not None and rung.quality < self.min_quality:
            return False
        if rung.kind == "cache":
            # Residency and site are enforced per cached entry (its producing rung).
            return True
        if self.jurisdiction is not None and rung.tags.get("jurisdiction") != self.jurisdiction:
            return False
        return not (self.sites is not None and rung.tags.get("site") not in self.sites)

    @property
    def empty(self) -> bool:
        """True when no constraint is set."""
        return (
            self.jurisdiction is None
            and self.max_cost_per_hour is None
            and self.min_quality is None
            and self.sites is None
        )

    def narrow(self, request: Constraints | None) -> Constraints:
        """These constraints (an operator's binding) narrowed by one request's own.

        A request may only narrow: the same jurisdiction or none, a cost cap at or below
        the bound one, a quality floor at or above it, sites among the bound sites. The
        result holds the tighter value of each field.

        Raises:
            ConstraintNotAllowedError: the request asks for more than the binding allows
                (each offending field named with both values).

        Example:
            >>> Constraints(max_cost_per_hour=5.0).narrow(Constraints(min_quality=0.5))
            Constraints(jurisdiction=None, max_cost_per_hour=5.0, min_quality=0.5, sites=None)
        """
        from ray_ladder.core.exceptions import ConstraintNotAllowedError

        if request is None or request.empty:
            return self
        problems = []
        jurisdiction = self.jurisdiction
        if request.jurisdiction is not None:
            if jurisdiction is not None and request.jurisdiction != jurisdiction:
                problems.append(f"jurisdiction {request.jurisdiction!r}: bound to "
                                f"{jurisdiction!r}")
            jurisdiction = request.jurisdiction
        cost = self.max_cost_per_hour
        if request.max_cost_per_hour is not None:
            if cost is not None and request.max_cost_per_hour > cost:
                problems.append(f"max_cost_per_hour {request.max_cost_per_hour:g}: bound to "
                                f"at most {cost:g}")
            cost = request.max_cost_per_hour if cost is None \
                else min(cost, request.max_cost_per_hour)
        quality = self.min_quality
        if request.min_quality is not None:
            if quality is not None and request.min_quality < quality:
                problems.append(f"min_quality {request.min_quality:g}: bound to at least "
                                f"{quality:g}")
            quality = request.min_quality if quality is None \
                else max(quality, request.min_quality)
        sites = self.sites
        if request.sites is not None:
            outside = [s for s in request.sites if sites is not None and s not in sites]
            if outside:
                problems.append(f"sites {outside}: bound to {list(sites or ())}")
            sites = request.sites
        if problems:
            raise ConstraintNotAllowedError(
                "the request asks for more than the bound constraints allow: "
                + "; ".join(problems))
        return Constraints(jurisdiction=jurisdiction, max_cost_per_hour=cost,
                           min_quality=quality, sites=sites)

    def key(self) -> tuple[object, ...]:
        """A hashable key (used by caches keyed on constraints)."""
        return (self.jurisdiction, self.max_cost_per_hour, self.min_quality, self.sites)


def check_known(constraints: Constraints, rungs: Iterable[RungFacts], ladder: str) -> None:
    """Raise :class:`InvalidConstraintsError` for a jurisdiction or site none of ``rungs``
    (of ladder ``ladder``) carries in its tags."""
    from ray_ladder.core.exceptions import InvalidConstraintsError

    rungs = list(rungs)
    if constraints.jurisdiction is not None:
        known = sorted({r.tags["jurisdiction"] for r in rungs if "jurisdiction" in r.tags})
        if constraints.jurisdiction not in known:
            raise InvalidConstraintsError(f"unknown jurisdiction {constraints.jurisdiction!r} "
                                          f"for ladder {ladder!r}; known: {known}")
    if constraints.sites is not None:
        known = sorted({r.tags["site"] for r in rungs if "site" in r.tags})
        unknown = [s for s in constraints.sites if s not in known]
        if unknown:
            raise InvalidConstraintsError(
                f"unknown site(s) {unknown} for ladder {ladder!r}; known: {known}")
