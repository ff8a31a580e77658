"""How a rung's capacity is bought (its capacity type) and when a capacity block may serve."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

CapacityTypeName = Literal["on-demand", "spot", "reservation", "flex-start", "capacity-block"]
CLOUDS = ("aws", "gcp", "azure")
#: GCE keeps a flex-start VM request queued for at most two hours (requestValidForDuration).
DEFAULT_MAX_WAIT_S = 7200.0
#: Flex-start capacity runs at most seven days (GCE maxRunDuration, GKE maxRunDurationSeconds).
MAX_RUN_S = 604800.0
#: EC2 warns 40 min before a Capacity Block ends and starts terminating 10 min later.
DEFAULT_LEAVE_BEFORE_S = 2400.0
#: Why a capacity view counts a block with nodes as unobtainable.
WINDOW_CLOSED_REASON = "outside its capacity block window"
_WINDOW_KEYS = ("start", "end", "leave_before_s")
_FLEX_KEYS = ("max_wait_s", "max_run_s")


def _rule(path: str, message: str, value: object, fix: str) -> PydanticCustomError:
    """A cross-field error in the spec's form (``ladder_rule``: path, value, fix)."""
    return PydanticCustomError("ladder_rule", message, {"path": path, "value": value, "fix": fix})


class CapacitySpec(BaseModel):
    """How a rung's nodes are bought: on demand, spot, from a reservation, queued, or a block.

    ``flex-start`` is *queued* capacity (GCP Dynamic Workload Scheduler): requested early,
    granted after a wait of up to ``max_wait_s``, never waited for. ``capacity-block`` is
    capacity bought for a fixed window (AWS Capacity Blocks for ML, GCP calendar-mode
    reservations): usable from ``start`` until ``leave_before_s`` before ``end``.

    Example:
        >>> CapacitySpec(type="flex-start", max_wait_s=3600).describe()
        'flex-start (max wait 1h)'
        >>> CapacitySpec(type="reservation", reservation={"aws": "cr-0abc"}).reservation_for("aws")
        'cr-0abc'
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    type: CapacityTypeName = Field(
        "on-demand", description="on-demand (default), spot, reservation, flex-start (queued) "
        "or capacity-block (a bought window).")
    reservation: str | dict[str, str] | None = Field(
        None, description="reservation and capacity-block: the reservation to launch into, one "
        "name for every cloud or one per cloud (aws: cr-... id or resource group ARN; gcp: "
        "reservation name; azure: capacity reservation group resource id).")
    max_wait_s: float | None = Field(
        None, gt=0, description="flex-start: seconds the request may stay queued before it "
        "counts as a stock-out (default 7200, GCE's longest queue).")
    max_run_s: float | None = Field(
        None, gt=0, le=MAX_RUN_S, description="flex-start: seconds the provider lets the "
        "granted capacity run (at most 7 days; default: the provider's).")
    start: AwareDatetime | None = Field(
        None, strict=False, description="capacity-block: when the window opens (ISO 8601 "
        "with a time zone, e.g. 2026-03-02T11:30:00Z).")
    end: AwareDatetime | None = Field(
        None, strict=False, description="capacity-block: when the window ends (ISO 8601 with "
        "a time zone).")
    leave_before_s: float | None = Field(
        None, ge=0, description="capacity-block: seconds before end the ladder leaves the "
        "rung (default 2400, when EC2 warns; it terminates 10 min later).")

    @field_validator("start", "end", mode="before")
    @classmethod
    def _datetime_or_text(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, (str, datetime)):
            raise PydanticCustomError("datetime_type", "Input should be a date and time, "
                                      "e.g. 2026-03-02T11:30:00Z")
        return value

    @model_validator(mode="after")
    def _check_type_fields(self) -> CapacitySpec:
        kind = self.type
        needs_reservation = kind in ("reservation", "capacity-block")
        if needs_reservation and not self.reservation:
            raise _rule("reservation", "a {value} rung names the reservation it launches into",
                        kind, "add reservation: NAME (or one per cloud: {aws: cr-..., "
                        "gcp: NAME, azure: /subscriptions/.../capacityReservationGroups/NAME})")
        if not needs_reservation and self.reservation is not None:
            raise _rule("reservation", "only reservation and capacity-block rungs launch into "
                        "a reservation, not type {value}", kind,
                        "remove reservation or set type: reservation")
        if isinstance(self.reservation, dict):
            unknown = sorted(set(self.reservation) - set(CLOUDS))
            if unknown or not self.reservation:
                raise _rule("reservation", "reservation ids are per cloud (aws, gcp, azure), "
                            "got {value}", unknown or "{}", "key each id by aws, gcp or azure, "
                            "or give one name for every cloud")
            if not all(self.reservation.values()):
                raise _rule("reservation", "a reservation id must not be empty", None,
                            "give each cloud's reservation id, or remove that cloud")
        elif self.reservation == "":
            raise _rule("reservation", "a reservation id must not be empty", None,
                        "name the reservation")
        for key in _FLEX_KEYS:
            if getattr(self, key) is not None and kind != "flex-start":
                raise _rule(key, f"only a flex-start rung waits in a queue; {key} does not "
                            "apply to type {value}", kind, f"remove {key} or set type: "
                            "flex-start")
        for key in _WINDOW_KEYS:
            if getattr(self, key) is not None and kind != "capacity-block":
                raise _rule(key, f"only a capacity-block rung has a window; {key} does not "
                            "apply to type {value}", kind,
                            f"remove {key} or set type: capacity-block")
        if kind == "capacity-block":
            for key in ("start", "end"):
                if getattr(self, key) is None:
                    raise _rule(key, f"a capacity block needs its window's {key}", None,
                                f"add {key}: an ISO 8601 time with a zone, e.g. "
                                "2026-03-02T11:30:00Z")
            assert self.start is not None and self.end is not None
            length = (self.end - self.start).total_seconds()
            if length <= 0:
                raise _rule("end", "the window must end after it starts: {value}",
                            f"end ({self.end.isoformat()}) <= start ({self.start.isoformat()})",
                            "set end after start")
            if self.leave_before >= length:
                raise _rule("leave_before_s", "the ladder would never use the block: {value}",
                            f"leave_before_s ({self.leave_before:g}) >= the window "
                            f"({length:g} s)", "lower leave_before_s below the window length")
        return self

    # --- queries -------------------------------------------------------------------------

    @property
    def queued(self) -> bool:
        """Queued capacity (flex-start): requested early, granted after a wait."""
        return self.type == "flex-start"

    @property
    def wait_s(self) -> float:
        """Seconds a queued request may wait (``max_wait_s`` or the default, 7200)."""
        return self.max_wait_s if self.max_wait_s is not None else DEFAULT_MAX_WAIT_S

    @property
    def leave_before(self) -> float:
        """Seconds before ``end`` the ladder leaves a capacity block (default 2400)."""
        return self.leave_before_s if self.leave_before_s is not None else DEFAULT_LEAVE_BEFORE_S

    def window(self) -> tuple[float, float] | None:
        """``(opens, closes)`` in unix seconds for a capacity block (closes = end - leave).

        Example:
            >>> CapacitySpec(type="capacity-block", reservation="cr-1", leave_before_s=0,
            ...              start="1970-01-01T00:01:00Z", end="1970-01-01T00:02:00Z").window()
            (60.0, 120.0)
        """
        if self.start is None or self.end is None:
            return None
        return self.start.timestamp(), self.end.timestamp() - self.leave_before

    def reservation_for(self, cloud: str) -> str | None:
        """The reservation to launch into on ``cloud`` (``None`` when it names none there)."""
        if isinstance(self.reservation, dict):
            return self.reservation.get(cloud)
        return self.reservation

    def describe(self) -> str:
        """One line for ``ray-ladder show``."""
        if self.type == "flex-start":
            run = f", max run {_span(self.max_run_s)}" if self.max_run_s else ""
            return f"flex-start (max wait {_span(self.wait_s)}{run})"
        if self.type in ("reservation", "capacity-block"):
            res = self.reservation
            names = ", ".join(f"{k}={_short(v)}" for k, v in res.items()) \
                if isinstance(res, dict) else _short(str(res))
            if self.type == "reservation":
                return f"reservation {names}"
            assert self.start is not None and self.end is not None
            return (f"capacity-block {names} {_iso(self.start)}..{_iso(self.end)} "
                    f"(leaves {_span(self.leave_before)} early)")
        return self.type


def _short(reservation: str) -> str:
    """A resource id's last segment (Azure's ids are 150 characters long)."""
    return ".../" + reservation.rsplit("/", 1)[1] if reservation.count("/") > 2 else reservation


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def check_rung_capacity(kind: str, tags: Mapping[str, str],
                        capacity: CapacitySpec | None) -> None:
    """The rung-level rules of ``capacity``: compute rungs only, and ``tags.spot`` agrees.

    Raises:
        PydanticCustomError: the spec's ``ladder_rule`` error, naming the field and the fix.
    """
    if capacity is None:
        return
    if kind != "compute":
        raise _rule("capacity", "only compute rungs run on bought capacity, not a {value} rung",
                    kind, "remove capacity")
    spot_tag = tags.get("spot")
    if spot_tag is not None and (spot_tag.lower() == "true") != (capacity.type == "spot"):
        raise _rule("capacity.type", "capacity.type {value} contradicts tags.spot "
                    f"({spot_tag!r})", capacity.type,
                    "remove tags.spot (capacity.type says how the rung is bought) or make "
                    "them agree")


class _HasCapacity(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def capacity(self) -> CapacitySpec | None: ...


def usable_at(capacity: CapacitySpec | None, now: float) -> bool:
    """Whether capacity of this type may serve at unix time ``now``.

    Always, except a capacity block outside ``[start, end - leave_before_s)``.

    Example:
        >>> block = CapacitySpec(type="capacity-block", reservation="cr-1", leave_before_s=30,
        ...                      start="1970-01-01T00:01:00Z", end="1970-01-01T00:02:00Z")
        >>> [usable_at(block, t) for t in (59, 60, 89, 90)]
        [False, True, True, False]
    """
    window = capacity.window() if capacity is not None else None
    return window is None or window[0] <= now < window[1]


def gate(rungs: Iterable[_HasCapacity], obtainable: Mapping[str, bool],
         now: float) -> dict[str, bool]:
    """``obtainable`` with every capacity block outside its usable window unobtainable.

    What callers feed :meth:`~ray_ladder.core.selector.Selector.observe`, so the one
    decision rule also covers windows: the selector falls from a block at the observation
    where it closes (at once, like any lost rung) and climbs to it after the hysteresis
    once it opens and its nodes are up. Rungs not in ``obtainable`` stay out.

    Example:
        >>> gate(ladder.rungs, {"h100-block": True, "a100": True}, now=0.0)  # doctest: +SKIP
        {'h100-block': False, 'a100': True}
    """
    out = dict(obtainable)
    for rung in rungs:
        if rung.name in out and out[rung.name] and not usable_at(rung.capacity, now):
            out[rung.name] = False
    return out
