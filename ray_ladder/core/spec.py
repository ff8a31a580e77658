"""The ladder spec: strict pydantic models for ladders, rungs and policies."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ray_ladder.core.capacity_type import CapacitySpec, check_rung_capacity
from ray_ladder.core.clusters import (
    ClusterSpec,
    DataSpec,
    RungData,
    cluster_tag_issues,
    inherit_cluster_tags,
    work_cost,
)
from ray_ladder.core.config_errors import issues_from_validation_error
from ray_ladder.core.constraints import Constraints, check_known
from ray_ladder.core.documents import load_document, parse_json, parse_yaml
from ray_ladder.core.exceptions import ConfigError, ConfigIssue
from ray_ladder.core.latency import LatencyTargets
from ray_ladder.core.spec_rules import (
    RungFacts,
    as_error,
    as_issue,
    facts_from_raw,
    ladder_rules,
    resource_rules,
)
from ray_ladder.core.train_shape import TrainShape, train_issue

SLUG_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$"
RungKind = Literal["compute", "cache", "shed"]

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


def _rule(path: str, message: str, value: object, fix: str) -> PydanticCustomError:
    """A cross-field validation error that carries its own field path and fix."""
    return PydanticCustomError(
        "ladder_rule", message, {"path": path, "value": value, "fix": fix}
    )


class CacheSettings(BaseModel):
    """Bounds of a ``cache`` rung's answer cache.

    Example:
        >>> CacheSettings(max_entries=1000, ttl_s=60)
        CacheSettings(max_entries=1000, ttl_s=60.0)
    """

    model_config = _STRICT

    max_entries: int = Field(1024, ge=1, description="Most answers kept (least recent dropped).")
    ttl_s: float = Field(300.0, gt=0, description="Seconds an answer stays servable.")


class Policy(BaseModel):
    """How a ladder moves between rungs.

    Example:
        >>> Policy(promotion_hysteresis=3, max_degraded_seconds=600)
        ... # doctest: +NORMALIZE_WHITESPACE
        Policy(promotion_hysteresis=3, max_degraded_seconds=600.0, probe_interval_s=1.0,
               pending_timeout_s=10.0, retry_after_s=5.0, targets=None)
    """

    model_config = _STRICT

    promotion_hysteresis: int = Field(
        1,
        ge=1,
        description="Consecutive observations a better rung must be seen obtainable "
        "before the ladder climbs to it. Descent never waits.",
    )
    max_degraded_seconds: float | None = Field(
        None,
        gt=0,
        description="Raise an alert (event + metric) once the ladder has been below its "
        "best eligible rung this long in one episode. Moves nothing.",
    )
    probe_interval_s: float = Field(
        1.0, gt=0, description="Seconds between capacity observations."
    )
    pending_timeout_s: float = Field(
        10.0, gt=0, description="Seconds a task may wait unscheduled on a rung before falling."
    )
    retry_after_s: float = Field(
        5.0, gt=0, description="Retry-After hint given by a shed rung or an exhausted ladder."
    )
    targets: LatencyTargets | None = Field(
        None, description="Latency targets of the ladder's requests (serving): requests "
        "spill to a lower rung that meets them; a rung that keeps breaking them is slow."
    )


class Rung(BaseModel):
    """One execution target of a ladder.

    ``compute`` rungs carry a Ray placement (custom ``resources``, ``num_gpus``,
    ``num_cpus``, ``accelerator_type``, ``label_selector``); ``cache`` answers from recent
    results; ``shed`` answers "try later".

    Example:
        >>> Rung(name="h100", resources={"ladder/h100": 1}, quality=1.0, cost_per_hour=12.3)
        ... # doctest: +ELLIPSIS
        Rung(name='h100', kind='compute', ...)
    """

    model_config = _STRICT

    name: str = Field(
        pattern=SLUG_PATTERN,
        description="Unique name; lowercase letters, digits, '.', '_', '-' (Ray-resource safe).",
    )
    kind: RungKind = Field("compute", description="compute (default), cache or shed.")
    resources: dict[str, float] = Field(
        default_factory=dict, description="Ray custom resources, e.g. {'ladder/h100': 1}."
    )
    num_gpus: float | None = Field(None, ge=0, description="Ray num_gpus for this rung.")
    num_cpus: float | None = Field(None, ge=0, description="Ray num_cpus for this rung.")
    accelerator_type: str | None = Field(None, description="Ray accelerator_type, e.g. 'H100'.")
    label_selector: dict[str, str] = Field(
        default_factory=dict, description="Ray node label selector, e.g. {'ladder.rung': 'h100'}."
    )
    quality: float = Field(1.0, ge=0, le=1, description="Answer quality in 0..1 "
                           "(default 1; 0 for a shed rung).")
    cost_per_hour: float = Field(0.0, ge=0, description="Cost of one placement per hour.")
    tags: dict[str, str] = Field(
        default_factory=dict,
        description="Free tags; documented keys: site, jurisdiction, spot.",
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="Handed to the rung's implementation: model name, quantization, batch size.",
    )
    standby_replicas: int | None = Field(
        None,
        ge=0,
        description="Serve replicas kept warm while the rung is not in use "
        "(default 1 for the top rung, 0 below).",
    )
    cache: CacheSettings | None = Field(None, description="Cache bounds (cache rungs only).")
    train: TrainShape | None = Field(
        None, description="How a Ray Train run uses this rung: workers, resources per worker."
    )
    capacity: CapacitySpec | None = Field(None, description="How its nodes are bought: "
                                          "on-demand, spot, reservation, queued, block.")
    cluster: str | None = Field(None, description="The cluster it lives on (a name under "
                                "the ladder's clusters:); default: the driver's own.")
    data: RungData | None = Field(None, description="Where it is from the ladder's data: "
                                  "region, transfer_gb_per_s, egress_per_gb.")

    @property
    def is_compute(self) -> bool:
        """True for rungs that run user code."""
        return self.kind == "compute"

    def placement(self) -> dict[str, Any]:
        """Ray scheduling options for this rung (only the fields that are set).

        Example:
            >>> Rung(name="a100", resources={"ladder/a100": 1}, num_cpus=1).placement()
            {'resources': {'ladder/a100': 1.0}, 'num_cpus': 1.0}
        """
        out: dict[str, Any] = {}
        if self.resources:
            out["resources"] = dict(self.resources)
        for key in ("num_gpus", "num_cpus", "accelerator_type"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.label_selector:
            out["label_selector"] = dict(self.label_selector)
        return out

    @model_validator(mode="before")
    @classmethod
    def _shed_quality_is_zero(cls, data: Any) -> Any:
        # A shed rung answers "try later": quality 0 unless set (1.0 would fail the
        # "quality must not increase going down" rule under any rung below 1).
        if isinstance(data, dict) and data.get("kind") == "shed" and "quality" not in data:
            return {**data, "quality": 0.0}
        return data

    @model_validator(mode="after")
    def _check_kind_fields(self) -> Rung:
        has_placement = bool(
            self.resources
            or self.num_gpus is not None
            or self.num_cpus is not None
            or self.accelerator_type
            or self.label_selector
        )
        if self.kind == "compute" and not has_placement:
            raise _rule(
                "",
                "compute rung {value} has no placement",
                self.name,
                "give it resources (e.g. {'ladder/h100': 1}), num_gpus, num_cpus, "
                "accelerator_type or label_selector",
            )
        if self.kind != "compute" and has_placement:
            raise _rule(
                "kind",
                "a {value} rung runs no code and takes no placement",
                self.kind,
                "remove resources/num_gpus/num_cpus/accelerator_type/label_selector",
            )
        if self.cache is not None and self.kind != "cache":
            raise _rule("cache", "only a cache rung takes cache settings, not a {value} rung",
                        self.kind, "remove 'cache' or set kind: cache")
        if self.standby_replicas is not None and self.kind != "compute":
            raise _rule("standby_replicas", "only compute rungs have replicas, not a {value} rung",
                        self.kind, "remove standby_replicas")
        if (issue := train_issue(self)) is not None:
            raise _rule(*issue)
        check_rung_capacity(self.kind, self.tags, self.capacity)
        return self

    @field_validator("resources")
    @classmethod
    def _ray_accepts_the_resources(cls, value: dict[str, float]) -> dict[str, float]:
        # A field check, so it is reported beside the rung's other field errors.
        for path, message, bad, fix in resource_rules(value)[:1]:
            raise as_error((path.partition(".")[2], message, bad, fix))
        return value


class Ladder(BaseModel):
    """An ordered list of rungs, best first, and the policy that moves between them.

    Example:
        >>> ladder = Ladder.from_yaml('''
        ... name: gpu
        ... rungs:
        ...   - {name: h100, resources: {ladder/h100: 1}}
        ...   - {name: cpu, num_cpus: 1, quality: 0.5}
        ...   - {name: shed, kind: shed, quality: 0}
        ... ''')
        >>> [r.name for r in ladder.rungs]
        ['h100', 'cpu', 'shed']
    """

    model_config = _STRICT

    schema_version: Literal[1] = Field(1, description="Spec version; only 1 exists.")
    name: str = Field(pattern=SLUG_PATTERN, description="Ladder name (labels metrics/events).")
    description: str = Field("", description="Free text.")
    rungs: list[Rung] = Field(min_length=1, description="Rungs, best first.")
    policy: Policy = Field(default_factory=Policy, description="How the ladder moves.")
    clusters: dict[str, ClusterSpec] = Field(
        default_factory=dict, description="Ray clusters its rungs live on, by name.")
    data: DataSpec | None = Field(None, description="The data its work reads and where it "
                                  "may go (binds every piece of work).")

    @model_validator(mode="before")
    @classmethod
    def _rungs_take_cluster_tags(cls, data: Any) -> Any:
        return inherit_cluster_tags(data)

    @model_validator(mode="after")
    def _check_rungs(self) -> Ladder:
        # The first broken rule; from_dict lists the others (spec_rules runs them all).
        for rule in ladder_rules([RungFacts(r.name, r.kind, r.quality)
                                  for r in self.rungs])[:1]:
            raise as_error(rule)
        raw = [r.model_dump(include={"cluster", "tags"}) for r in self.rungs]
        for issue in cluster_tag_issues(raw, self.clusters)[:1]:
            raise as_error(issue)
        return self

    # --- loading -------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> Ladder:
        """Validate a plain dict; raises :class:`ConfigError` naming every problem.

        Field errors and the rules across fields come together: where a field error
        stops pydantic before the ladder's rules, they run on the raw rungs (see
        :mod:`ray_ladder.core.spec_rules`).
        """
        if not isinstance(data, dict):
            raise ConfigError(
                [ConfigIssue("", "a ladder must be a mapping", type(data).__name__,
                             "start the document with 'name:' and 'rungs:'")],
                source,
            )
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            issues = issues_from_validation_error(err, data, cls)
        rungs = data.get("rungs")
        if isinstance(rungs, list):
            seen = {(i.path, i.message) for i in issues}
            issues += [issue for issue in map(as_issue, ladder_rules(
                [facts_from_raw(r) for r in rungs])) if (issue.path, issue.message) not in seen]
        raise ConfigError(issues, source) from None

    @classmethod
    def from_yaml(cls, text: str, source: str = "<string>") -> Ladder:
        """Parse and validate YAML (JSON is valid YAML too); a key given twice in one
        mapping is an error."""
        return cls.from_dict(parse_yaml(text, source), source)

    @classmethod
    def from_json(cls, text: str, source: str = "<string>") -> Ladder:
        """Parse and validate JSON; a key given twice in one object is an error."""
        return cls.from_dict(parse_json(text, source), source)

    def to_yaml(self) -> str:
        """Dump to YAML that :meth:`from_yaml` reads back."""
        return yaml.safe_dump(self.model_dump(mode="json", exclude_defaults=True),
                              sort_keys=False)

    # --- queries -------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Rung names, best first."""
        return [r.name for r in self.rungs]

    def rung(self, name: str) -> Rung:
        """The rung called ``name``; ``KeyError`` listing the valid names otherwise."""
        for r in self.rungs:
            if r.name == name:
                return r
        raise KeyError(f"no rung {name!r} in ladder {self.name!r}; rungs: {self.names}")

    def index(self, name: str) -> int:
        """Position of rung ``name`` (0 is the best)."""
        return self.names.index(name)

    def eligible(self, constraints: Constraints | None = None) -> list[Rung]:
        """Rungs a request with ``constraints`` may use, best first.

        Example:
            >>> ladder.eligible(Constraints(jurisdiction="eu"))  # doctest: +SKIP
        """
        bound = self.data.constraints() if self.data is not None else None
        if (constraints is None or constraints.empty) and bound is None:
            return list(self.rungs)
        return [r for r in self.rungs if (bound is None or bound.allows(r)) and (
            constraints is None or constraints.allows(self._costed(r)))]

    def work_cost_per_hour(self, name: str) -> float:
        """What an hour of work costs on rung ``name``, moving the ladder's data counted
        (:func:`ray_ladder.core.clusters.work_cost`); its ``cost_per_hour`` without data."""
        rung = self.rung(name)
        return work_cost(rung.cost_per_hour, rung.data, self.data).cost_per_hour

    def _costed(self, rung: Rung) -> Rung:
        cost = work_cost(rung.cost_per_hour, rung.data, self.data).cost_per_hour
        return rung if cost == rung.cost_per_hour else rung.model_copy(
            update={"cost_per_hour": cost})

    def check_constraints(self, constraints: Constraints) -> None:
        """Raise :class:`InvalidConstraintsError` for values no rung of this ladder knows.

        A jurisdiction or site that no rung carries can never be satisfied: it is a
        caller's mistake (HTTP 400), not a capacity problem (503).
        """
        check_known(constraints, self.rungs, self.name)

def load_ladder(path: str | Path) -> Ladder:
    """Load a ladder from a YAML or JSON file.

    Raises:
        ConfigError: naming the file, each field path, the bad value and the fix (also
            for a file that cannot be read or is not UTF-8).

    Example:
        >>> ladder = load_ladder("examples/ladders/gpu-serving.yaml")
        >>> ladder.names[0]
        'h100'
    """
    return Ladder.from_dict(load_document(path), source=str(Path(path)))


def as_ladder(ladder: Ladder | str | Path) -> Ladder:
    """Accept a :class:`Ladder` or a path to its file."""
    if isinstance(ladder, Ladder):
        return ladder
    if isinstance(ladder, (str, Path)):
        return load_ladder(ladder)
    raise TypeError(f"expected a Ladder or a path to a ladder file, got {type(ladder).__name__}")
