"""Clusters as rung locations, and where a ladder's data lives and may go.

A ladder file may name the Ray clusters its rungs live on (``clusters:``: each one's Job
Submission address, Serve address, site and jurisdiction) and the data its work reads
(``data:``: where it lives, how much an hour of work reads, where it may go). A rung says
``cluster: NAME`` and, where it is far from the data, ``data: {region, transfer_gb_per_s,
egress_per_gb}``. See docs/clusters.md.

Example:
    >>> spec = ClusterSpec(address="http://10.0.0.1:8265", site="onprem", jurisdiction="eu")
    >>> spec.tags()
    {'site': 'onprem', 'jurisdiction': 'eu'}
    >>> DataSpec(stays=["onprem"]).constraints().sites
    ('onprem',)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ray_ladder.core.constraints import Constraints

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)
SECONDS_PER_HOUR = 3600.0


class ClusterSpec(BaseModel):
    """One Ray cluster that rungs may live on.

    Attributes:
        address: Its Job Submission API / dashboard address (``http://HEAD:8265``).
        serve: Its Serve HTTP address (``http://HEAD:8000``), for rungs served there.
        site: The site its nodes are in (the rungs on it get ``tags.site``).
        jurisdiction: The jurisdiction its nodes are in (``tags.jurisdiction``).
        poll_interval_s: Seconds between two readings of its capacity and jobs.
        stale_after_s: A capacity reading older than this is not trusted: the cluster's
            rungs count unobtainable until it answers again (default 10 s, or
            ``lost_after_s`` when shorter; never longer than it).
        lost_after_s: A cluster that has not answered for this long is lost: work placed
            there is placed again elsewhere.
    """

    model_config = _STRICT

    address: str = Field(pattern=r"^https?://", description="Job Submission API address, "
                         "e.g. http://10.0.0.1:8265.")
    serve: str | None = Field(None, pattern=r"^https?://", description="Serve HTTP address, "
                              "e.g. http://10.0.0.1:8000.")
    site: str | None = Field(None, description="Site of its nodes (rungs' tags.site).")
    jurisdiction: str | None = Field(None, description="Jurisdiction of its nodes.")
    poll_interval_s: float = Field(1.0, gt=0, description="Seconds between two readings.")
    stale_after_s: float | None = Field(None, gt=0, description="A reading older than this "
                                        "is not trusted (default: 10 s or lost_after_s).")
    lost_after_s: float = Field(15.0, gt=0, description="Not answering this long: lost.")

    @model_validator(mode="after")
    def _stale_before_lost(self) -> ClusterSpec:
        if self.stale_after_s is not None and self.stale_after_s > self.lost_after_s:
            raise PydanticCustomError(
                "ladder_rule", "stale_after_s {value} is longer than lost_after_s",
                {"path": "stale_after_s", "value": self.stale_after_s,
                 "fix": f"set stale_after_s <= lost_after_s ({self.lost_after_s:g}): a lost "
                 "cluster's rungs are unobtainable"})
        if self.poll_interval_s >= self.stale_s:
            raise PydanticCustomError(
                "ladder_rule", "poll_interval_s {value} is not shorter than the "
                "{stale:g} s a reading is trusted",
                {"path": "poll_interval_s", "value": self.poll_interval_s,
                 "stale": self.stale_s,
                 "fix": f"set poll_interval_s below {self.stale_s:g} (or raise "
                 "stale_after_s): each reading would go stale before the next"})
        return self

    @property
    def stale_s(self) -> float:
        """Seconds a reading is trusted (``stale_after_s``, else 10 s or ``lost_after_s``)."""
        return self.stale_after_s or min(10.0, self.lost_after_s)

    def tags(self) -> dict[str, str]:
        """The tags a rung on this cluster carries (site and jurisdiction, where set)."""
        out = {"site": self.site, "jurisdiction": self.jurisdiction}
        return {key: value for key, value in out.items() if value is not None}


class RungData(BaseModel):
    """Where a rung is relative to the ladder's data (``rungs[].data``).

    Attributes:
        region: The region the rung's nodes read from; the same as ``data.region``
            means next to the data (no egress, no transfer limit).
        transfer_gb_per_s: How fast the rung reads the data from afar (GB/s).
        egress_per_gb: What one GB moved to the rung costs.
    """

    model_config = _STRICT

    region: str | None = Field(None, description="Region the rung reads its data in.")
    transfer_gb_per_s: float | None = Field(None, gt=0, description="GB/s the rung reads "
                                            "the data at from afar.")
    egress_per_gb: float = Field(0.0, ge=0, description="Cost of one GB moved to the rung.")


class DataSpec(BaseModel):
    """The data a ladder's work reads, and where it may go (``data:``).

    ``stays`` and ``jurisdiction`` bind every piece of the ladder's work as an operator's
    constraint does: a rung outside is never chosen, whatever a request asks.

    Example:
        >>> DataSpec(region="onprem", read_gb_per_hour=200).read_gb_per_hour
        200.0
    """

    model_config = _STRICT

    name: str = Field("", description="The dataset's name (free text).")
    region: str | None = Field(None, description="Region the data lives in.")
    read_gb_per_hour: float = Field(0.0, ge=0, description="GB an hour of work reads.")
    stays: tuple[str, ...] | None = Field(None, description="Sites the data may go to "
                                          "(e.g. [onprem]).")
    jurisdiction: str | None = Field(None, description="Jurisdiction the data may not leave.")

    @field_validator("stays", mode="before")
    @classmethod
    def _stays_as_tuple(cls, value: object) -> object:
        if isinstance(value, str):
            return (value,)
        return tuple(value) if isinstance(value, list) else value

    def constraints(self) -> Constraints:
        """The binding this data puts on every piece of the ladder's work."""
        return Constraints(jurisdiction=self.jurisdiction, sites=self.stays)


@dataclass(frozen=True)
class WorkCost:
    """What an hour of work costs on one rung, the data's move counted.

    Attributes:
        cost_per_hour: The rung's cost plus egress for the GB an hour reads, divided by
            ``speed`` (an hour of work takes longer where the link is slower).
        speed: Work done per hour there, 0..1 (1: the link keeps up with the reads).
        egress_per_hour: Egress cost of an hour of reads.
    """

    cost_per_hour: float
    speed: float
    egress_per_hour: float


def work_cost(cost_per_hour: float, rung_data: RungData | None,
              data: DataSpec | None) -> WorkCost:
    """The cost of an hour of work on a rung that costs ``cost_per_hour``.

    A rung without ``data`` or in the data's region reads for free at full speed. Far from
    the data, each GB read costs ``egress_per_gb`` and the work runs no faster than
    ``transfer_gb_per_s`` can feed it.

    Example:
        >>> far = RungData(region="cloud", transfer_gb_per_s=0.025, egress_per_gb=0.05)
        >>> work_cost(2.0, far, DataSpec(region="onprem", read_gb_per_hour=180))
        WorkCost(cost_per_hour=22.0, speed=0.5, egress_per_hour=9.0)
    """
    if (rung_data is None or data is None or data.read_gb_per_hour == 0
            or rung_data.region is None or rung_data.region == data.region):
        return WorkCost(cost_per_hour, 1.0, 0.0)
    egress = data.read_gb_per_hour * rung_data.egress_per_gb
    speed = 1.0
    if rung_data.transfer_gb_per_s is not None:
        speed = min(1.0, rung_data.transfer_gb_per_s * SECONDS_PER_HOUR
                    / data.read_gb_per_hour)
    return WorkCost((cost_per_hour + egress) / speed, speed, egress)


def cluster_tag_issues(rungs: Sequence[Mapping[str, object]],
                       clusters: Mapping[str, ClusterSpec]) -> list[tuple[str, str, object,
                                                                          str]]:
    """Issues ``(path, message, value, fix)`` with the rungs' ``cluster`` fields: an
    unknown cluster, or a tag that contradicts the cluster's site or jurisdiction."""
    issues: list[tuple[str, str, object, str]] = []
    for i, rung in enumerate(rungs):
        name = rung.get("cluster")
        if name is None:
            continue
        spec = clusters.get(str(name))
        if spec is None:
            issues.append((f"rungs.{i}.cluster", "unknown cluster {value}", name,
                           f"use one of {sorted(clusters)} or declare it under clusters:"))
            continue
        tags = rung.get("tags") or {}
        for key, value in spec.tags().items():
            if isinstance(tags, Mapping) and key in tags and tags[key] != value:
                issues.append((f"rungs.{i}.tags.{key}", "tag {value} contradicts the "
                               f"cluster's {key} {value!r}", tags[key],
                               f"remove tags.{key} (the cluster sets it) or fix the cluster"))
    return issues


def inherit_cluster_tags(data: object) -> object:
    """A raw ladder document whose rungs carry their cluster's site and jurisdiction as
    tags (where the rung does not set them itself); anything else is returned as is."""
    if not isinstance(data, dict):
        return data
    clusters, rungs = data.get("clusters"), data.get("rungs")
    if not isinstance(clusters, dict) or not isinstance(rungs, list):
        return data
    out = []
    for rung in rungs:
        # A malformed `cluster` (a list, a mapping) is left to the field's own error.
        name = rung.get("cluster") if isinstance(rung, dict) else None
        spec = clusters.get(name) if isinstance(name, str) else None
        if isinstance(spec, dict):
            known = {key: spec[key] for key in ("site", "jurisdiction")
                     if isinstance(spec.get(key), str)}
            tags = rung.get("tags")
            if tags is None or isinstance(tags, dict):
                rung = {**rung, "tags": {**known, **(tags or {})}}
        out.append(rung)
    return {**data, "rungs": out}
