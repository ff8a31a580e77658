"""Replay a timeline through the live Selector, with a model of switching cost."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from ray_ladder.core.constraints import Constraints
from ray_ladder.core.spec import Ladder
from ray_ladder.simulate.align import Timeline
from ray_ladder.simulate.selector_table import (
    DOWN,
    NO_DIRECTION,
    UP,
    SelectorTable,
    alert_tick,
)


@dataclass
class Replay:
    """What one policy did over a timeline: change points and counters.

    Times are in ticks (floats: a switch can complete inside a tick). ``served`` lists
    ``(time, rung index)`` each time the serving rung changes (``-1``: nothing served);
    ``starting`` lists ``(time, rung index)`` each time the rung whose replicas are
    starting changes (``-1``: none); ``target`` lists ``(tick, rung index)`` each time
    the selector's decision changes. Indices point into ``names`` (the eligible rungs).

    The baseline policies (:mod:`ray_ladder.simulate.baselines`) fill the same record:
    ``policy`` names the one that ran (``"ladder"`` for the selector), ``params`` its
    parameters, and ``hysteresis`` is ``None`` for policies that have none.
    ``hysteresis_asked_s`` is the hysteresis asked in seconds when it came from the
    ladder (``promotion_hysteresis x probe_interval_s``, see :func:`hysteresis_ticks`),
    ``None`` when it was given in ticks. ``lost`` lists the times (ticks) the policy lost
    the rung it served, where flaps count a fall. ``requests``: figures of the requests
    themselves where a policy's model has them (LiteLLM's tries of dead deployments),
    else ``None``.
    """

    names: list[str]
    ticks: int
    tick_s: float
    hysteresis: int | None
    promotion_delay_s: float
    demotion_delay_s: float
    warm: list[str]
    served: list[tuple[float, int]] = field(default_factory=list)
    starting: list[tuple[float, int]] = field(default_factory=list)
    target: list[tuple[float, int]] = field(default_factory=list)
    falls: int = 0
    climbs: int = 0
    climbs_abandoned: int = 0
    alerts: int = 0
    policy: str = "ladder"
    params: dict[str, Any] = field(default_factory=dict)
    fall_delay_s: float = 0.0
    hysteresis_asked_s: float | None = None
    lost: list[float] = field(default_factory=list)
    requests: dict[str, Any] | None = None

    def served_per_tick(self) -> list[str | None]:
        """The rung serving at each tick once its observation is handled (``None``: none).

        Example:
            >>> replay.served_per_tick()[:3]  # doctest: +SKIP
            ['h100', 'h100', 'a100']
        """
        out: list[str | None] = []
        changes = self.served + [(float(self.ticks), -1)]
        for (t, idx), (t_next, _) in pairwise(changes):
            # A change at tick k (or inside tick k - 1) shows from tick ceil(t) on.
            first, stop = -int(-t // 1), -int(-t_next // 1)
            if stop > first:
                del out[first:]
                out.extend([self.names[idx] if idx >= 0 else None] * (stop - first))
        return out


def ladder_hysteresis_s(ladder: Ladder) -> float:
    """A ladder's promotion hysteresis in seconds: ``promotion_hysteresis`` probes of
    ``probe_interval_s`` each.

    Example:
        >>> ladder_hysteresis_s(Ladder.from_dict({"name": "t", "policy": {
        ...     "promotion_hysteresis": 3, "probe_interval_s": 0.5},
        ...     "rungs": [{"name": "cpu", "num_cpus": 1}]}))
        1.5
    """
    return ladder.policy.promotion_hysteresis * ladder.policy.probe_interval_s


def hysteresis_ticks(seconds: float, tick_s: float) -> int:
    """Ticks of ``tick_s`` that hold ``seconds`` of hysteresis: rounded up, at least 1.

    The selector counts observations; the simulator makes one per tick, so a hysteresis
    meant in seconds becomes the ticks of the trace's own sample interval.

    Example:
        >>> hysteresis_ticks(3.0, 1.0), hysteresis_ticks(3.0, 300.0), hysteresis_ticks(601, 300)
        (3, 1, 3)
    """
    if seconds < 0 or tick_s <= 0:
        raise ValueError(f"hysteresis seconds must be >= 0 and the tick > 0, got {seconds} "
                         f"and {tick_s}")
    # 1e-9: 0.3 / 0.1 is 2.9999999999999996 in floats, which is 3 ticks, not 4.
    return max(1, math.ceil(seconds / tick_s - 1e-9))


def resolve_hysteresis(ladder: Ladder, tick_s: float,
                       hysteresis: int | None) -> tuple[int, float | None]:
    """The ticks of hysteresis a replay uses, and the seconds asked when they came from
    the ladder (``None`` when ``hysteresis`` was given in ticks).

    Example:
        >>> lad = Ladder.from_dict({"name": "t", "policy": {"promotion_hysteresis": 3},
        ...                         "rungs": [{"name": "cpu", "num_cpus": 1}]})
        >>> resolve_hysteresis(lad, 300.0, None), resolve_hysteresis(lad, 300.0, 2)
        ((1, 3.0), (2, None))
    """
    if hysteresis is not None:
        return hysteresis, None
    asked_s = ladder_hysteresis_s(ladder)
    return hysteresis_ticks(asked_s, tick_s), asked_s


def replay(
    ladder: Ladder,
    timeline: Timeline,
    *,
    hysteresis: int | None = None,
    promotion_delay_s: float = 0.0,
    demotion_delay_s: float = 0.0,
    warm: Collection[str] = (),
    constraints: Constraints | None = None,
    fall_delay_s: float = 0.0,
) -> Replay:
    """Feed one observation per tick to a fresh :class:`~ray_ladder.Selector`.

    The selector decides (the live code, unchanged); this loop models what is *served*.
    Its decisions come through a :class:`~ray_ladder.simulate.selector_table.SelectorTable`
    (the selector asked once per distinct state and observation), and the ticks of a
    segment after the selector has settled (same state, no change, nothing starting)
    are not stepped one by one: they decide the same, and only the degraded-time alert
    can still come, at a tick computed once. The result is the same as observing every
    tick (``tests/simulate/test_simulate_properties.py`` checks it against the selector).


    * First observation: the ladder starts already running on the selected rung.
    * Climb (the new rung is better than the one serving): the old rung keeps serving
      while the new rung's replicas start, for ``promotion_delay_s``. If the selector
      moves elsewhere meanwhile, the climb is abandoned. If the old rung is lost
      meanwhile, nothing is served until the new one is up.
    * Fall: the new rung serves ``fall_delay_s`` later when it is warm (``warm``, or a
      cache/shed rung: the time to notice the loss and re-route, 0 by default);
      otherwise nothing is served for ``demotion_delay_s`` (a cold start).
    * A rung whose replicas are starting is billed (see the report), not served.

    Args:
        ladder: The ladder.
        timeline: Aligned observations (:func:`~ray_ladder.simulate.align.align`).
        hysteresis: Promotion hysteresis in ticks (default: the ladder's, in seconds,
            ``promotion_hysteresis x probe_interval_s``, over the timeline's tick,
            rounded up: :func:`hysteresis_ticks`).
        promotion_delay_s: Seconds from a climb decision to the new rung serving.
        demotion_delay_s: Seconds a cold rung needs to serve after a fall.
        warm: Compute rungs kept warm (standby replicas): falls onto them take only
            ``fall_delay_s``.
        constraints: Restrict the eligible rungs, as for a live request.
        fall_delay_s: Seconds a fall onto a warm rung serves nothing (detection and
            re-routing); 0: instant.
    """
    hysteresis, asked_s = resolve_hysteresis(ladder, timeline.tick_s, hysteresis)
    table = SelectorTable(ladder, constraints, hysteresis)
    names = table.names
    tick = timeline.tick_s
    kinds = [ladder.rung(name).kind for name in names]
    warm_set = set(warm)
    warm_fall = fall_delay_s / tick
    cold = [warm_fall if kind != "compute" or name in warm_set else demotion_delay_s / tick
            for name, kind in zip(names, kinds, strict=True)]
    promote = promotion_delay_s / tick
    max_degraded = ladder.policy.max_degraded_seconds
    # One observation (a table row id, and "obtainable by rung index") per distinct row:
    # segments with the same row share them, so the loop allocates nothing per tick.
    cache: dict[int, tuple[int, list[bool]]] = {}  # id(row): the timeline holds the rows
    untraced = {name: True for name, kind in zip(names, kinds, strict=True)
                if kind == "compute" and name not in timeline.names}
    result = Replay(names, timeline.ticks, tick, table.hysteresis, promotion_delay_s,
                    demotion_delay_s, [n for n in names if n in warm_set],
                    fall_delay_s=fall_delay_s, hysteresis_asked_s=asked_s)
    served_log, starting_log, target_log = result.served, result.starting, result.target
    lost_log = result.lost
    served_log.append((0.0, -1))
    step, known = table.step, table.known  # a step is a dict hit: no call unless new
    state = 0  # the selector's state in the table: 0 before the first observation
    episode: float | None = None  # when the selector's degraded episode started
    alerted = False
    served = pending = -1
    pending_climb = False
    ready = 0.0
    falls = climbs = abandoned = alerts = 0
    ends = timeline.starts[1:] + [timeline.ticks]
    for k0, k1, row in zip(timeline.starts, ends, timeline.rows, strict=True):
        entry = cache.get(id(row))  # the timeline shares one tuple per distinct row
        if entry is None:
            obs = dict(zip(timeline.names, row, strict=True))
            obs.update(untraced)
            entry = cache[id(row)] = (table.row(obs), [kind != "compute" or obs.get(name, False)
                                                   for name, kind in zip(names, kinds,
                                                                         strict=True)])
        rid, ok = entry
        k = k0
        while k < k1:
            nxt, changed, target, direction = known.get(state << 32 | rid) or step(state, rid)
            if nxt == state and not changed and pending < 0:
                # A fixed point: every tick left in this segment decides the same and
                # nothing is starting, so only the degraded-time alert can still come.
                if target == 0:
                    episode, alerted = None, False
                else:
                    if episode is None:
                        episode = k * tick
                    if not alerted and max_degraded is not None and alert_tick(
                            episode, max_degraded, tick, k) < k1:
                        alerts += 1
                        alerted = True
                break
            state = nxt
            # The selector's degraded-episode bookkeeping (it reads the clock: not in the
            # table), then what serves.
            if target == 0:
                episode, alerted = None, False
            else:
                if episode is None:
                    episode = k * tick
                if not alerted and max_degraded is not None and \
                        k * tick - episode > max_degraded:
                    alerts += 1
                    alerted = True
            if changed:
                move = (k, target)  # one tuple for every log that records it
                target_log.append(move)
                if direction == DOWN:
                    falls += 1
                    lost_log.append(k)  # the selector falls the tick its rung is lost
                elif direction == UP:
                    climbs += 1
                if pending >= 0:  # the selector moved on before the switch completed
                    abandoned += pending_climb
                    pending = -1
                    starting_log.append((k, -1))
                if target == served:
                    pass
                elif target < 0 or direction == NO_DIRECTION:
                    served = target  # exhausted, or the first observation
                    served_log.append(move)
                else:
                    climb = target < served if served >= 0 else direction == UP
                    delay = promote if climb else cold[target]
                    if delay <= 0:
                        served = target
                        served_log.append(move)
                    else:
                        pending, pending_climb, ready = target, climb, k + delay
                        starting_log.append(move)
                        if not climb and served >= 0:
                            served = -1
                            served_log.append((k, -1))
            if pending >= 0:
                if served >= 0 and not ok[served]:
                    served = -1  # the old rung vanished while the new one starts
                    served_log.append((k, -1))  # not a fall: the climb goes on
                if ready < k + 1:
                    served, pending = pending, -1
                    served_log.append((ready, served))
                    starting_log.append((ready, -1))
            k += 1
    if len(served_log) > 1 and served_log[1][0] == 0:
        del served_log[0]  # the first observation replaced the "nothing yet" placeholder
    result.falls, result.climbs = falls, climbs
    result.climbs_abandoned, result.alerts = abandoned, alerts
    return result
