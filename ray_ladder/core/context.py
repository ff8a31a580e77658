"""RungContext: what user code sees of the rung it runs on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ray_ladder.core.spec import Ladder


@dataclass(frozen=True)
class RungContext:
    """The rung a task, replica or trial runs on.

    Attributes:
        name: Rung name.
        index: Position in the ladder (0 is the best).
        ladder: Ladder name.
        kind: ``compute``, ``cache`` or ``shed``.
        quality: The rung's quality (0..1).
        cost_per_hour: The rung's cost.
        params: The rung's ``params`` (model name, quantization, batch size...).
        tags: The rung's tags (site, jurisdiction, spot...).
        serve: The Serve address of the cluster the rung lives on (``rungs[].cluster``'s
            ``serve``), for a rung that is another cluster's ladder app; ``None`` for a
            rung of the cluster the work runs in.

    Example:
        >>> ctx = RungContext.of(ladder, "a100")  # doctest: +SKIP
        >>> ctx.params["model"]  # doctest: +SKIP
        'llama-70b'
    """

    name: str
    index: int
    ladder: str
    kind: str = "compute"
    quality: float = 1.0
    cost_per_hour: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    serve: str | None = None

    @classmethod
    def of(cls, ladder: Ladder, name: str) -> RungContext:
        """Build the context of rung ``name`` of ``ladder``."""
        rung = ladder.rung(name)
        return cls(
            name=rung.name,
            index=ladder.index(name),
            ladder=ladder.name,
            kind=rung.kind,
            quality=rung.quality,
            cost_per_hour=rung.cost_per_hour,
            params=dict(rung.params),
            tags=dict(rung.tags),
            serve=ladder.clusters[rung.cluster].serve if rung.cluster else None,
        )
