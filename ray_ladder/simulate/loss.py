"""A figure on which a peer beats the ladder: the two values and why, as data."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Loss:
    """One figure on which a peer beats a ladder row.

    Attributes:
        figure: Which figure (a key of :data:`~ray_ladder.simulate.losses.FIGURES`:
            ``"cost_per_served_hour"``, ...).
        ladder: The ladder row's label.
        peer: The peer's label.
        ladder_value: The ladder's figure.
        peer_value: The peer's.
        cause: Why, as a low-cardinality code: ``more_time_on`` (the peer serves a better
            rung longer), ``less_time_on`` (it serves a dearer rung less), ``standby``
            (the ladder's standby bill), ``starting`` (its bill for replicas starting),
            ``sheds`` (the ladder sheds or has no rung longer), ``climbs`` (it climbs
            more often).
        rung: The rung the cause names, if any.
        why: The cause as a sentence, from the figures.
        overlap: Whether the two 90 % intervals overlap (``None``: no interval).

    Example:
        >>> loss.why  # doctest: +SKIP
        'cheaper per served hour: serves on h100 18.4% vs 47.9% of the time'
    """

    figure: str
    ladder: str
    peer: str
    ladder_value: float
    peer_value: float
    cause: str
    rung: str | None
    why: str
    overlap: bool | None

    def to_dict(self) -> dict[str, Any]:
        """The loss as a JSON object."""
        return asdict(self)
