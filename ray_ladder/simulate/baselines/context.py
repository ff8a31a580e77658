"""What a baseline sees of one replay: the eligible rungs and, per segment, which are up."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice
from typing import overload

from ray_ladder import Constraints, Ladder
from ray_ladder.simulate.align import Timeline


@dataclass(frozen=True)
class PolicyContext:
    """What a policy sees of one replay: the eligible rungs and, per segment, which are up.

    Rungs are indexed in ladder order (best first), as in :class:`Replay`. Times are in
    ticks; ``segments`` are the timeline's runs of identical availability.

    Attributes:
        ladder: The ladder.
        timeline: The aligned traces.
        names: Eligible rungs, best first.
        compute: Per rung: a compute rung (cache and shed rungs are not).
        traced: Per rung: it has a trace (a compute rung without one is always up).
        warm: Compute rungs with standby replicas (the ladder's ``standby_replicas``).
        segments: ``(first tick, end tick, obtainable per rung)``.
        constraints: The constraints the eligible rungs came from.
        zones: The zone traces of the rungs given several zones, aligned on the same
            ticks (columns ``rung/zone``), or ``None``. A zoned rung's row in
            ``segments`` is obtainable while any of its zones is; only Karpenter looks
            at the zones (:class:`~ray_ladder.simulate.baselines.offerings.Offerings`).

    Example:
        >>> ctx = PolicyContext.build(ladder, timeline, warm=["l4"])  # doctest: +SKIP
        >>> ctx.segments[0]  # doctest: +SKIP
        (0, 12, (True, False, True, True, True, True))
    """

    ladder: Ladder
    timeline: Timeline
    names: tuple[str, ...]
    compute: tuple[bool, ...]
    traced: tuple[bool, ...]
    warm: tuple[str, ...]
    segments: Segments
    constraints: Constraints | None = None
    zones: Timeline | None = None

    @classmethod
    def build(cls, ladder: Ladder, timeline: Timeline, *, warm: Collection[str] = (),
              constraints: Constraints | None = None,
              zones: Timeline | None = None) -> PolicyContext:
        """Lay the timeline's rows out per eligible rung (untraced rungs always up)."""
        names = tuple(r.name for r in ladder.eligible(constraints))
        compute = tuple(ladder.rung(n).is_compute for n in names)
        traced = tuple(n in timeline.names for n in names)
        cols = [timeline.names.index(n) if t else -1 for n, t in zip(names, traced, strict=True)]
        rows: dict[tuple[bool, ...], tuple[bool, ...]] = {}
        oks = []
        for row in timeline.rows:
            ok = rows.get(row)
            if ok is None:
                ok = rows[row] = tuple(c < 0 or row[c] for c in cols)
            oks.append(ok)
        warm_t = tuple(n for n in names if n in set(warm))
        return cls(ladder, timeline, names, compute, traced, warm_t,
                   Segments(timeline.starts, timeline.ticks, oks), constraints, zones)

    @property
    def tick_s(self) -> float:
        """Seconds per tick."""
        return self.timeline.tick_s

    @property
    def ticks(self) -> int:
        """Ticks replayed."""
        return self.timeline.ticks

    @property
    def resident(self) -> tuple[bool, ...]:
        """Compute rungs with nodes up all the time: those without a trace (pools you own).

        Kubernetes' and Ray's schedulers place a pending replica on such a node at once,
        before any autoscaler launches one. (Standby replicas are the ladder's own
        feature: the baselines keep none.)
        """
        return tuple(c and not t for c, t in zip(self.compute, self.traced, strict=True))

    def accelerated(self, i: int) -> bool:
        """Whether rung ``i`` asks for an accelerator: custom resources, GPUs or an
        accelerator type (a CPU rung asks for none of them).

        A replica's resource request is fixed: one that asks for an accelerator cannot
        run on a node without one, and the reverse is a different request too.
        """
        rung = self.ladder.rung(self.names[i])
        return bool(rung.resources or rung.num_gpus or rung.accelerator_type)

    def placeable(self) -> tuple[int, ...]:
        """Compute rungs one pod (or Ray replica) of this workload can be placed on: the
        rule every placing peer (Ray native, GKE, Karpenter) follows.

        A pod or replica has *one* resource request, the top compute rung's, and keeps it
        across every fallback: Ray's ``fallback_strategy`` swaps the label selector, not
        the request; a pod asking ``nvidia.com/gpu: 1`` cannot schedule on a node without
        GPUs, and GKE ComputeClass priorities and Karpenter NodePools only choose among
        nodes that satisfy the pod's requests. So the rungs that can host it are the
        compute rungs whose request is of the top one's kind (:meth:`accelerated`:
        accelerator or none), the top one first. A GPU workload never lands on a CPU
        rung, and the reverse.

        Not for the ladder or LiteLLM: both run a different deployment per rung (the
        user's explicit list of rungs, or one model group per rung), so falling from a
        GPU deployment to a CPU one is theirs to make.

        Example:
            >>> PolicyContext.build(gpu_ladder, timeline).placeable()  # doctest: +SKIP
            (0, 1, 2)
        """
        compute = [i for i, c in enumerate(self.compute) if c]
        if not compute:
            return ()
        kind = self.accelerated(compute[0])
        return tuple(i for i in compute if self.accelerated(i) == kind)

    def training_rungs(self) -> list[str]:
        """Eligible compute rungs with a Ray Train shape (``train:``): a training gang.

        A rung that needs ``k > 1`` instances without one may be ``k`` serving replicas,
        so it is not counted here.
        """
        return [n for n, c in zip(self.names, self.compute, strict=True)
                if c and self.ladder.rung(n).train is not None]


Segment = tuple[int, int, tuple[bool, ...]]
"""``(first tick, end tick, obtainable per rung)``."""


class Segments(Sequence[Segment]):
    """A timeline's segments, ``(first tick, end tick, obtainable per rung)``, made as
    they are read: a year of churn has ~3e5 of them, which as stored tuples would weigh
    more than the timeline itself.

    Example:
        >>> seg = Segments([0, 4], 10, [(True,), (False,)])
        >>> list(seg), seg[-1], len(seg)
        ([(0, 4, (True,)), (4, 10, (False,))], (4, 10, (False,)), 2)
    """

    def __init__(self, starts: list[int], ticks: int, oks: list[tuple[bool, ...]]) -> None:
        self._starts, self._ticks, self._oks = starts, ticks, oks

    def __len__(self) -> int:
        return len(self._oks)

    @overload
    def __getitem__(self, i: int) -> Segment: ...

    @overload
    def __getitem__(self, i: slice) -> list[Segment]: ...

    def __getitem__(self, i: int | slice) -> Segment | list[Segment]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self._oks)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(i)
        end = self._starts[j + 1] if j + 1 < n else self._ticks
        return self._starts[j], end, self._oks[j]

    def __iter__(self) -> Iterator[Segment]:
        starts = self._starts
        ends = chain(islice(starts, 1, None), (self._ticks,))
        return zip(starts, ends, self._oks, strict=True)
