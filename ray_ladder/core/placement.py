"""Pure placement arithmetic: how many placements of a rung fit on a set of nodes."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypedDict, cast, get_args

from ray_ladder.core.spec import Ladder, Rung

#: The state of a rung whose remaining capacity is all on draining nodes.
GOING_AWAY = "going away"

# Ray adds this much of `accelerator_type:<T>` to a task that asks for accelerator_type=T.
ACCELERATOR_TYPE_DEMAND = 0.001


@dataclass(frozen=True)
class NodeState:
    """What the capacity view knows of one node (filled from Ray's GCS view).

    Attributes:
        node_id: Ray node id (hex).
        alive: Whether the GCS considers the node alive.
        total: Resources the node advertises.
        available: Resources free right now.
        labels: Node labels.
        draining: Whether Ray is draining the node (a preemption notice: it goes away,
            takes no new work, and what runs there may finish before the deadline).
        drain_deadline: Wall-clock seconds when the draining node goes (``None``: no
            deadline was given, or the node is not draining).
    """

    node_id: str
    alive: bool
    total: Mapping[str, float]
    available: Mapping[str, float]
    labels: Mapping[str, str] = field(default_factory=dict)
    draining: bool = False
    drain_deadline: float | None = None


def demand(rung: Rung) -> dict[str, float]:
    """The Ray resource demand of one placement of ``rung``.

    A rung that names no CPU still needs no CPU: Ray tasks default to 1 CPU, but the
    ladder's placement is what the rung says (callers add their own ``num_cpus``).

    Example:
        >>> demand(Rung(name="h100", resources={"ladder/h100": 1}, num_cpus=1))
        {'ladder/h100': 1.0, 'CPU': 1.0}
    """
    need = dict(rung.resources)
    if rung.num_cpus:
        need["CPU"] = need.get("CPU", 0.0) + rung.num_cpus
    if rung.num_gpus:
        need["GPU"] = need.get("GPU", 0.0) + rung.num_gpus
    if rung.accelerator_type:
        key = f"accelerator_type:{rung.accelerator_type}"
        need[key] = need.get(key, 0.0) + ACCELERATOR_TYPE_DEMAND
    return need


def label_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Ray 2.60 label-selector semantics: ``v``, ``!v``, ``in(a,b)``, ``!in(a,b)``.

    Example:
        >>> label_matches({"zone": "in(a,b)"}, {"zone": "b"})
        True
    """
    return all(label_expr_matches(expr, labels.get(key)) for key, expr in selector.items())


def label_expr_matches(expr: str, value: str | None) -> bool:
    """Whether one node label ``value`` (``None``: the node lacks the key) satisfies one
    selector expression (``v``, ``!v``, ``in(a,b)``, ``!in(a,b)``; spaces ignored).

    Example:
        >>> label_expr_matches("!in(a, b)", "c"), label_expr_matches("a", None)
        (True, False)
    """
    expr = expr.strip()
    negate = expr.startswith("!")
    if negate:
        expr = expr[1:].strip()
    if expr.startswith("in(") and expr.endswith(")"):
        hit = value in {v.strip() for v in expr[3:-1].split(",")}
    else:
        hit = value == expr
    return hit != negate


def labels_satisfying(selector: Mapping[str, str]) -> dict[str, str]:
    """Node labels that satisfy the positive terms of a label selector.

    ``v`` gives ``v``; ``in(a,b)`` gives ``a``; negations (``!v``, ``!in(...)``) need no
    label and are left out. Used to build nodes (LocalCluster, templates) for a rung.

    Example:
        >>> labels_satisfying({"zone": "in(a,b)", "spot": "!true", "site": "onprem"})
        {'zone': 'a', 'site': 'onprem'}
    """
    labels: dict[str, str] = {}
    for key, expr in selector.items():
        expr = expr.strip()
        if expr.startswith("!"):
            continue
        if expr.startswith("in(") and expr.endswith(")"):
            expr = expr[3:-1].split(",")[0].strip()
        labels[key] = expr
    return labels


def fits(need: Mapping[str, float], resources: Mapping[str, float]) -> int:
    """How many copies of ``need`` fit in ``resources`` (0 when any key is short)."""
    if not need:
        return 0
    count = math.inf
    for key, amount in need.items():
        have = resources.get(key, 0.0)
        if amount <= 0:
            continue
        count = min(count, math.floor(have / amount + 1e-9))
        if count == 0:
            return 0
    return 0 if count == math.inf else int(count)


@dataclass(frozen=True)
class RungCapacity:
    """Capacity of one rung.

    Attributes:
        total: Placements that fit on alive nodes when they are empty (0: absent).
        available: Placements that fit right now (0 with total > 0: busy).
        obtainable: Whether the rung can be had now (see :func:`rung_capacity`).
        going_away: Every node that can host it is draining (a preemption notice): the
            rung is not obtainable for new work, though what runs there may finish.
        deadline: With ``going_away``, the earliest drain deadline of those nodes
            (wall-clock seconds; ``None``: no deadline given).
    """

    total: int
    available: int
    obtainable: bool
    going_away: bool = False
    deadline: float | None = None

    @property
    def state(self) -> str:
        """``"absent"``, ``"going away"``, ``"busy"`` or ``"free"``."""
        if self.total == 0:
            return "absent"
        if self.going_away:
            return GOING_AWAY
        return "busy" if self.available == 0 else "free"


def rung_capacity(rung: Rung, nodes: Iterable[NodeState], *,
                  require_available: bool = False) -> RungCapacity:
    """Capacity of ``rung`` on ``nodes``.

    ``cache`` and ``shed`` rungs are always obtainable. A compute rung is obtainable when
    an alive node that is not draining can host it (``total > 0``: the task queues
    briefly if the node is busy), or, with ``require_available``, only when one is free
    right now. A rung whose hosts are all draining is *going away*: ``total`` counts them,
    ``available`` does not (a draining node takes no new work), and it is not obtainable.

    Example:
        >>> rung = Rung(name="h100", resources={"ladder/h100": 1})
        >>> node = NodeState("n1", True, {"ladder/h100": 1}, {"ladder/h100": 1},
        ...                  draining=True, drain_deadline=100.0)
        >>> rung_capacity(rung, [node])
        RungCapacity(total=1, available=0, obtainable=False, going_away=True, deadline=100.0)
    """
    if not rung.is_compute:
        return RungCapacity(0, 0, True)
    need = demand(rung)
    total = available = staying = 0
    deadlines: list[float | None] = []
    for node in nodes:
        if not node.alive or not label_matches(rung.label_selector, node.labels):
            continue
        hosts = fits(need, node.total)
        total += hosts
        if node.draining:
            if hosts:
                deadlines.append(node.drain_deadline)
            continue
        staying += hosts
        available += fits(need, node.available)
    going = staying == 0 and total > 0
    ok = available > 0 if require_available else staying > 0
    deadline = None
    if going and None not in deadlines:
        deadline = min(d for d in deadlines if d is not None)
    return RungCapacity(total, available, ok, going, deadline)


def ladder_capacity(ladder: Ladder, nodes: Iterable[NodeState], *,
                    require_available: bool = False) -> dict[str, RungCapacity]:
    """Capacity of every rung of ``ladder`` (pure; the capacity view feeds it Ray state)."""
    node_list = list(nodes)
    return {r.name: rung_capacity(r, node_list, require_available=require_available)
            for r in ladder.rungs}


def held_back(
    order: Sequence[str],
    released: Collection[str],
    obtainable: Mapping[str, bool],
    ready: Callable[[str], bool] | None = None,
) -> list[str]:
    """Released rungs to hold back: the one rule for a rung the autoscaler hook gave up.

    A rung in ``released`` (its node is being handed back) is held back, that is counted
    unobtainable, while a better rung of ``order`` is obtainable (and ``ready``, when
    given: a consumer whose rungs need a warm replica asks that). Top-down, so a held rung
    no longer counts as "better" for the rungs below it: a released rung is kept when
    nothing above it can take the work (better a node being given back than no answer).

    Args:
        order: The consumer's eligible rungs, best first.
        released: Rungs the hook released.
        obtainable: Rung name -> obtainable (before any hold).
        ready: Whether a better rung can take work now (default: obtainable is enough).

    Example:
        >>> held_back(["h100", "a100", "cpu"], {"a100"}, {"h100": True, "a100": True})
        ['a100']
        >>> held_back(["h100", "a100"], {"a100"}, {"h100": False, "a100": True})
        []
    """
    held: list[str] = []
    if not released:
        return held
    usable: list[str] = []
    for name in order:
        ok = obtainable.get(name, False)
        if ok and name in released and usable:
            held.append(name)
            continue
        if ok and (ready is None or ready(name)):
            usable.append(name)
    return held


#: The words every event and metric label of a fall on a drain notice carries (a fall on a
#: dead node says "unobtainable" alone).
PREEMPTION_NOTICE = "fell on preemption notice"


def going_away_reason(deadline: float | None, now: float) -> str:
    """Why a going-away rung is unobtainable, for events and held reasons.

    Example:
        >>> going_away_reason(110.0, 100.0)
        'fell on preemption notice: its nodes are draining, deadline in 10.0 s'
    """
    due = "no deadline" if deadline is None else f"deadline in {max(0.0, deadline - now):.1f} s"
    return f"{PREEMPTION_NOTICE}: its nodes are draining, {due}"


#: Why a rung is unobtainable, as data (a status entry's ``why.cause``; never read out of
#: its sentence): ``no_node`` no alive node can host it, ``busy`` none is free (or an
#: attempt waited past its pending timeout), ``going_away`` a preemption or reclaim
#: notice, ``released`` the autoscaler hook released it, ``window`` outside its capacity
#: block window, ``grant`` no unit of it granted to the team, ``budget`` the team's spent
#: budget demotes it, ``down`` / ``slow`` the router marked it down for failing / being
#: slow, ``starting`` its standby replica is not running yet, ``probation`` it failed
#: and must answer a ping, ``other`` a hold nobody classified.
RungCause = Literal["no_node", "busy", "going_away", "released", "window", "grant", "budget",
                    "down", "slow", "starting", "probation", "other"]
RUNG_CAUSES: tuple[str, ...] = get_args(RungCause)
#: The reason of a compute rung no alive node can host (cause ``no_node``).
NO_NODE_REASON = "no alive node can host it"


class RungWhy(TypedDict):
    """Why a rung is unobtainable: a low-cardinality ``cause`` and a ``reason`` for people."""

    cause: RungCause
    reason: str


def rung_why(cause: str, reason: str) -> RungWhy:
    """A :class:`RungWhy`; a ``cause`` outside :data:`RungCause` becomes ``other``.

    Example:
        >>> rung_why("no_node", NO_NODE_REASON)
        {'cause': 'no_node', 'reason': 'no alive node can host it'}
        >>> rung_why("unheard-of", "held")["cause"]
        'other'
    """
    return {"cause": cast(RungCause, cause) if cause in RUNG_CAUSES else "other",
            "reason": reason}


def standby_replicas(ladder: Ladder, rung: Rung) -> int:
    """Replicas kept warm for ``rung``: its ``standby_replicas``, else 1 on top, 0 below.

    Example:
        >>> ladder = load_ladder("examples/ladders/gpu-serving.yaml")
        >>> standby_replicas(ladder, ladder.rungs[0])  # h100 sets standby_replicas: 1
        1
    """
    if not rung.is_compute:
        return 0
    if rung.standby_replicas is not None:
        return rung.standby_replicas
    return 1 if ladder.index(rung.name) == 0 else 0
