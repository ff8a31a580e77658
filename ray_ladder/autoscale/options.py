"""How the autoscaler hook asks for nodes (its options), and a launch Ray's autoscaler refused."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ray_ladder.core.backoff import Backoff


class AutoscaleOptions(BaseModel):
    """How the autoscaler hook asks for nodes and backs off after a stock-out.

    Example:
        >>> AutoscaleOptions(retry_initial_s=5, retry_max_s=60).retry_delay_s(3)
        20.0
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    node_types: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Rung -> autoscaler node types that host it (default: the node type "
        "named after the rung, as `ray-ladder render` writes it). An empty list marks a "
        "static rung (fixed on-prem machines): never requested, used while present.")
    bundles_per_rung: int = Field(1, ge=1, description="Placements of a rung to request.")
    provision_timeout_s: float = Field(
        300.0, gt=0, description="A requested rung with no node after this long counts as "
        "stocked out even without a refusal record.")
    retry_initial_s: float = Field(
        30.0, gt=0, description="Wait before the first retry of a stocked-out rung.")
    retry_max_s: float = Field(600.0, gt=0, description="Longest wait between retries.")
    retry_multiplier: float = Field(2.0, ge=1, description="Backoff growth per refusal.")
    drain_s: float = Field(
        10.0, ge=0, description="Seconds a lesser rung keeps its node request after traffic "
        "moved up (in-flight work finishes) before it is released.")
    interval_s: float | None = Field(
        None, gt=0, description="Seconds between hook steps (default: the ladder policy's "
        "probe_interval_s).")
    promotion_hysteresis: int | None = Field(
        None, ge=1, description="Override the ladder policy's promotion_hysteresis.")

    @model_validator(mode="after")
    def _check(self) -> AutoscaleOptions:
        if self.retry_max_s < self.retry_initial_s:
            raise ValueError(f"retry_max_s ({self.retry_max_s}) must be >= retry_initial_s "
                             f"({self.retry_initial_s})")
        return self

    @property
    def backoff(self) -> Backoff:
        """The stock-out backoff these options describe (``retry_*``)."""
        return Backoff(self.retry_initial_s, self.retry_max_s, self.retry_multiplier)

    def retry_delay_s(self, failures: int) -> float:
        """Backoff after ``failures`` consecutive refusals (1 -> ``retry_initial_s``; any
        count, however large, waits at most ``retry_max_s`` and never raises)."""
        return float(self.backoff.delay(failures))


@dataclass(frozen=True)
class LaunchFailure:
    """One failed node launch, as Ray's autoscaler recorded it.

    Attributes:
        node_type: Autoscaler node type.
        time: Unix time of the attempt (whole seconds in autoscaler v1).
        category: Short error label, e.g. ``InsufficientInstanceCapacity``.
        description: The provider's message.
    """

    node_type: str
    time: float
    category: str = ""
    description: str = ""
