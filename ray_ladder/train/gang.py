"""Gang capacity (pure): whether all N worker bundles of a rung's training shape fit now."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from ray_ladder.core.placement import NodeState, demand, fits, label_matches
from ray_ladder.core.spec import Ladder, Rung

#: Ray placement-group strategies (``ScalingConfig.placement_strategy``).
Strategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
STRATEGIES: tuple[str, ...] = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")

#: node id -> resources; what a run's own worker group holds on each node (free for it).
Held = Mapping[str, Mapping[str, float]]


def worker_demand(rung: Rung) -> dict[str, float]:
    """The Ray resources of one worker of ``rung``'s training shape (no zero amounts).

    ``train.resources_per_worker`` when set, else the rung's own placement: one worker is
    one placement of the rung.

    Example:
        >>> worker_demand(Rung(name="a", resources={"ladder/a100": 2}, train={"workers": 4}))
        {'ladder/a100': 2.0}
    """
    if rung.train is None:
        raise ValueError(f"rung {rung.name!r} has no training shape (train: {{workers: N}})")
    need = rung.train.resources_per_worker or demand(rung)
    return {k: float(v) for k, v in need.items() if v}


def gang_size(rung: Rung) -> int:
    """Workers in ``rung``'s gang."""
    if rung.train is None:
        raise ValueError(f"rung {rung.name!r} has no training shape (train: {{workers: N}})")
    return rung.train.workers


@dataclass(frozen=True)
class GangCapacity:
    """How much of one rung's gang fits.

    Attributes:
        workers: Workers in the gang.
        fit_now: Workers that fit on alive nodes right now (a run's own bundles count free).
        fit_empty: Workers that would fit on the alive nodes if they were empty.
        excluded: Alive nodes left out (suspected lost, or named by a preemption notice).
        draining: Matching nodes Ray is draining: they count on empty nodes, never now (a
            draining node takes no new work).
    """

    workers: int
    fit_now: int
    fit_empty: int
    excluded: int = 0
    draining: int = 0

    @property
    def obtainable(self) -> bool:
        """The whole gang fits now."""
        return self.fit_now >= self.workers

    @property
    def state(self) -> str:
        """``never`` (it cannot fit even on empty nodes), ``busy`` or ``free``."""
        if self.fit_empty < self.workers:
            return "never"
        return "free" if self.obtainable else "busy"

    def why(self) -> str:
        """A short sentence for an exhausted-ladder error or an event."""
        text = (f"{self.state}: {self.workers} workers needed, {self.fit_now} fit now, "
                f"{self.fit_empty} on empty nodes")
        if self.excluded:
            text += f" ({self.excluded} node(s) left out)"
        return text + (f" ({self.draining} node(s) draining)" if self.draining else "")


def _count(per_node: list[int], workers: int, strategy: str) -> int:
    if strategy == "STRICT_PACK":
        return max(per_node, default=0)
    if strategy == "STRICT_SPREAD":
        return sum(1 for n in per_node if n > 0)
    return sum(per_node)  # PACK, SPREAD: bundles may land on any node


def gang_capacity(
    rung: Rung,
    nodes: Iterable[NodeState],
    *,
    held: Held | None = None,
    exclude: Collection[str] = (),
    strategy: str = "PACK",
) -> GangCapacity:
    """Capacity of ``rung``'s gang on ``nodes``: N bundles of :func:`worker_demand` each.

    Args:
        rung: A rung with a training shape.
        nodes: Node states (Ray's GCS view).
        held: Resources the run's own worker group holds per node; counted free, since the
            group is replaced by the one being placed.
        exclude: Node ids not to count (a node whose workers just died, a node a
            preemption notice named): they may still look alive in the GCS. Nodes Ray
            reports draining never count now either.
        strategy: The placement-group strategy: ``PACK``/``SPREAD`` count bundles on any
            node, ``STRICT_PACK`` needs them all on one node, ``STRICT_SPREAD`` one a node.

    Example:
        >>> big = NodeState("n1", True, {"ladder/h100": 8}, {"ladder/h100": 8})
        >>> rung = Rung(name="h", resources={"ladder/h100": 2}, train={"workers": 4})
        >>> gang_capacity(rung, [big]).obtainable
        True
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown placement strategy {strategy!r}; valid: {STRATEGIES}")
    need = worker_demand(rung)
    workers = gang_size(rung)
    held = held or {}
    now: list[int] = []
    empty: list[int] = []
    excluded = draining = 0
    for node in nodes:
        if not node.alive or not label_matches(rung.label_selector, node.labels):
            continue
        if node.node_id in exclude:
            excluded += 1
            continue
        empty.append(fits(need, node.total))
        if node.draining:  # a preemption notice: it goes away and takes no new work
            draining += 1
            now.append(0)
            continue
        free = dict(node.available)
        for key, amount in held.get(node.node_id, {}).items():
            free[key] = free.get(key, 0.0) + amount
        now.append(fits(need, free))
    return GangCapacity(workers, _count(now, workers, strategy), _count(empty, workers, strategy),
                        excluded, draining)


def train_ladder(ladder: Ladder) -> Ladder:
    """The rungs of ``ladder`` a Train run can use: compute rungs with a training shape.

    Raises:
        ValueError: the ladder has no rung with a training shape.

    Example:
        >>> train_ladder(ladder).names  # doctest: +SKIP
        ['h100x8', 'a100x8', 'a100x4']
    """
    rungs = [r for r in ladder.rungs if r.is_compute and r.train is not None]
    if not rungs:
        raise ValueError(f"ladder {ladder.name!r} has no rung with a training shape; give "
                         "its compute rungs 'train: {workers: N}'")
    return ladder.model_copy(update={"rungs": rungs})


def ladder_gangs(ladder: Ladder, names: Iterable[str], nodes: Iterable[NodeState], *,
                 held: Held | None = None, exclude: Collection[str] = (),
                 strategy: str = "PACK") -> dict[str, GangCapacity]:
    """:func:`gang_capacity` of each rung in ``names`` (one read of ``nodes``)."""
    node_list = list(nodes)
    return {name: gang_capacity(ladder.rung(name), node_list, held=held, exclude=exclude,
                                strategy=strategy) for name in names}
