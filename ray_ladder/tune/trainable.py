"""with_ladder: a Tune trainable placed on the best obtainable rung, and what it sees of it."""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray_ladder.cluster.fleet_teams import check_bound_team
from ray_ladder.core.constraints import Constraints
from ray_ladder.core.context import RungContext
from ray_ladder.core.exceptions import InvalidConstraintsError
from ray_ladder.core.ledger import part_entry
from ray_ladder.core.placement import demand, label_matches
from ray_ladder.core.spec import Ladder, Rung, as_ladder
from ray_ladder.core.teamwork import check_team, under_notice

logger = logging.getLogger(__name__)

ConstraintsLike = Constraints | Mapping[str, Any] | None
ConstraintsArg = ConstraintsLike | Callable[[dict], ConstraintsLike]

#: Key under which every result of a ladder trial carries its rung (nested dict).
RESULT_KEY = "ladder"

# What the trial actor found out about its own placement (one trial per actor process).
_current: RungContext | None = None
_current_lock = threading.Lock()


def _as_constraints(value: ConstraintsLike) -> Constraints | None:
    if value is None or isinstance(value, Constraints):
        return value
    if isinstance(value, Mapping):
        return Constraints(**dict(value))
    raise TypeError(f"constraints must be Constraints, a dict or None, got {type(value).__name__}")


def _bundle(rung: Rung) -> dict[str, float]:
    # The normal form ResourceRequest keeps: floats, no zero amounts.
    return {k: float(v) for k, v in demand(rung).items() if v}


@dataclass(frozen=True)
class LadderTrialSpec:
    """How the trials of one ladder trainable are placed (picklable; lives on the class).

    Attributes:
        ladder: The user's ladder.
        trial_ladder: Its compute rungs, each with ``num_cpus`` defaulted to the trial's
            (this is the exact bundle a trial asks Ray for; capacity is computed on it).
        constraints: Constraints for every trial, or a callable of the trial config.
        num_cpus: CPUs a trial takes on rungs that do not name ``num_cpus``.
        bound: Constraints of the whole run: a trial's own (``constraints``) only narrow.
        team: The fleet team the run belongs to (the operator's binding; no trial config
            changes it): its shared rungs follow the team's grants (docs/teams.md).
        uid: Identifies the spec across pickling (Tune unpickles the trainable per use).
    """

    ladder: Ladder
    trial_ladder: Ladder
    constraints: ConstraintsArg
    num_cpus: float
    bound: Constraints | None = None
    team: str | None = None
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def part(self) -> str:
        """The run's name in its team's ledger and demand entries (one per trainable)."""
        return f"tune:{self.ladder.name}:{self.uid[:8]}"

    @classmethod
    def build(cls, ladder: Ladder, constraints: ConstraintsArg, num_cpus: float,
              bound: ConstraintsLike = None, team: str | None = None) -> LadderTrialSpec:
        """Check the ladder, static constraints and team once, at decoration.

        Raises:
            ValueError: ``team`` is not a fleet team's name.
        """
        rungs = [r.model_copy(update={"num_cpus": num_cpus if r.num_cpus is None
                                      else r.num_cpus})
                 for r in ladder.rungs if r.is_compute]
        trial_ladder = ladder.model_copy(update={"rungs": rungs})
        spec = cls(ladder, trial_ladder, constraints, num_cpus, _as_constraints(bound),
                   check_team(team))
        if spec.bound is not None:
            ladder.check_constraints(spec.bound)
        if not callable(constraints):
            spec.constraints_for({})
        return spec

    def constraints_for(self, config: Mapping[str, Any]) -> Constraints | None:
        """The constraints of the trial with ``config``, validated against the ladder.

        Raises:
            InvalidConstraintsError: unknown jurisdiction/site, or no compute rung allowed.
        """
        raw = self.constraints(dict(config)) if callable(self.constraints) else self.constraints
        constraints = _as_constraints(raw)
        if self.bound is not None:  # ConstraintNotAllowedError when a trial asks for more
            constraints = self.bound.narrow(constraints)
        if constraints is not None:
            self.ladder.check_constraints(constraints)
            if not self.trial_ladder.eligible(constraints):
                raise InvalidConstraintsError(
                    f"no compute rung of ladder {self.ladder.name!r} satisfies {constraints!r}"
                )
        return constraints

    def bundle(self, rung: str) -> dict[str, float]:
        """The resource bundle a trial on ``rung`` asks Ray for."""
        return _bundle(self.trial_ladder.rung(rung))

    def resources(self, rung: str) -> Any:
        """The ``PlacementGroupFactory`` of a trial on ``rung`` (label selector included)."""
        from ray.tune import PlacementGroupFactory

        r = self.trial_ladder.rung(rung)
        kwargs: dict[str, Any] = {}
        if r.label_selector:
            kwargs["bundle_label_selector"] = [dict(r.label_selector)]
        return PlacementGroupFactory([self.bundle(rung)], **kwargs)

    def rung_of(self, bundles: list[dict[str, float]] | None,
                labels: Mapping[str, str] | None = None,
                constraints: Constraints | None = None) -> str | None:
        """The rung whose bundle is ``bundles[0]`` (and whose selector ``labels`` match).

        Example:
            >>> spec.rung_of([{"CPU": 1.0, "ladder/a100": 1.0}])  # doctest: +SKIP
            'a100'
        """
        if not bundles:
            return None
        head = {k: float(v) for k, v in bundles[0].items() if v}
        for rung in self.trial_ladder.eligible(constraints):
            if _bundle(rung) != head:
                continue
            if labels is not None and not label_matches(rung.label_selector, labels):
                continue
            return rung.name
        return None

    def first_choice(self, config: Mapping[str, Any]) -> Any:
        """Resources of a new trial: the best eligible rung obtainable now.

        Used by ``tune.with_resources``; a :class:`LadderScheduler` refines it with
        reservations and re-places the trial on every later move.
        """
        from ray_ladder.cluster.capacity import CapacityView
        from ray_ladder.core.selector import Selector
        from ray_ladder.tune.active import active

        constraints = self.constraints_for(config)
        selector = Selector(self.trial_ladder, constraints)
        if active():  # it places the trial before Tune requests resources
            return self.resources(selector.eligible[0])
        _warn_no_scheduler()
        try:
            snap = CapacityView(self.trial_ladder, require_available=True).refresh()
            rung = selector.best_obtainable(snap.obtainable)
        except Exception as err:  # no Ray state: take the top and let Tune wait
            logger.warning("ladder %s: capacity unreadable (%s); placing on the top rung",
                           self.ladder.name, err)
            rung = None
        return self.resources(rung or selector.eligible[0])


@functools.lru_cache(maxsize=1)
def _warn_no_scheduler() -> None:
    logger.warning(
        "a with_ladder trainable runs without a LadderScheduler: each trial starts on the "
        "best obtainable rung but will not fall on preemption nor climb back. Use "
        "ray_ladder.tune.Tuner, or TuneConfig(scheduler=LadderScheduler()) and "
        "RunConfig(callbacks=[scheduler.callback])."
    )


class LadderTrainableMixin:
    """Mixed into the function trainable: finds the trial's rung when its actor starts.

    The rung is read from where the trial really is: the placement group bundle Tune
    gave it (``trial_resources``) and the labels of the node it runs on.
    """

    _ladder_spec: LadderTrialSpec

    def setup(self, config: dict) -> None:
        """Detect the rung before the training thread starts."""
        global _current
        import ray

        ctx = ray.get_runtime_context()
        labels = _flat_labels(ctx.get_node_labels())
        resources = getattr(self, "trial_resources", None)
        bundles = resources.bundles if resources is not None else None
        spec = self._ladder_spec
        try:
            constraints = spec.constraints_for(config)
        except Exception:  # the driver validated them already; never fail the trial here
            constraints = None
        name = spec.rung_of(bundles, labels, constraints)
        self._ladder_info = {"rung": name, "node_id": ctx.get_node_id(),
                             "actor_id": ctx.get_actor_id(), "started_at": time.time()}
        with _current_lock:
            _current = RungContext.of(spec.ladder, name) if name else None
            _notice["team_rung"] = (spec.team, name, spec.part) if spec.team and name \
                else None
        if name is None:
            logger.warning("ladder %s: trial resources %s match no eligible rung",
                           spec.ladder.name, bundles)
        super().setup(config)  # type: ignore[misc]

    def get_auto_filled_metrics(self, *args: Any, **kwargs: Any) -> dict:
        """Every result says which rung produced it (``result["ladder"]``)."""
        out = super().get_auto_filled_metrics(*args, **kwargs)  # type: ignore[misc]
        info = getattr(self, "_ladder_info", None)
        if info is not None and not kwargs.get("debug_metrics_only"):
            out[RESULT_KEY] = dict(info)
        return out


def _flat_labels(labels: Mapping[str, Any]) -> dict[str, str]:
    # Ray documents list values here but returns plain strings; accept both.
    return {k: (v[0] if isinstance(v, (list, tuple)) and v else v) for k, v in labels.items()}


def current_rung() -> RungContext:
    """The rung this trial runs on now (name, params, quality, cost, tags).

    Call it inside a training function wrapped by :func:`with_ladder`. It changes only
    between actor starts: after a fall or a climb the function starts again (from its
    checkpoint) and sees the new rung.

    Raises:
        RuntimeError: outside a ladder trial, or when the placement matches no rung.

    Example:
        >>> def train_fn(config):  # doctest: +SKIP
        ...     rung = ray_ladder.tune.current_rung()
        ...     batch = rung.params.get("batch_size", 32)
    """
    if _current is None:
        raise RuntimeError(
            "current_rung() is only available inside a trial of a with_ladder trainable "
            "(the trial's placement matched no rung, or this is not a trial)"
        )
    return _current


#: How often :func:`should_checkpoint` asks the GCS (a training step may poll it freely).
NOTICE_POLL_S = 0.5
_notice: dict[str, Any] = {"read_at": float("-inf"), "draining": 0.0, "team_rung": None}


def should_checkpoint() -> bool:
    """Whether this trial should checkpoint now: its node got a preemption notice, or
    its team's units of its rung a reclaim notice.

    True once Ray drains the node the trial runs on (``ray drain-node``, a SIGTERMed
    ``ray start --block`` such as a deleted KubeRay pod: the GCS's draining table), and,
    for a run bound to a fleet team (``with_ladder(team=)``), while the fleet arbiter has
    a reclaim notice in force on the team's units of the trial's rung (its grants entry
    in Ray's KV); both read at most every ``NOTICE_POLL_S``. A training function that
    polls it each step and, when it is True, reports a checkpoint
    (``tune.report(metrics, checkpoint=...)``) loses no step: the
    :class:`~ray_ladder.tune.LadderScheduler` moves the trial to the next rung at that
    checkpoint, before the node is killed or the units go. False outside a Ray worker.

    Example:
        >>> def train_fn(config):  # doctest: +SKIP
        ...     for step in range(start, 100):
        ...         loss = train_one_step()
        ...         if step % 10 == 0 or ray_ladder.tune.should_checkpoint():
        ...             tune.report({"loss": loss}, checkpoint=save(step))
        ...         else:
        ...             tune.report({"loss": loss})
    """
    now = time.monotonic()
    if now - _notice["read_at"] < NOTICE_POLL_S:
        return bool(_notice["draining"])
    _notice["read_at"] = now
    try:
        import ray

        from ray_ladder.cluster import ray_private

        if not ray.is_initialized():
            return False
        node = ray.get_runtime_context().get_node_id()
        _notice["draining"] = float(node in ray_private.draining_nodes()
                                    or _team_noticed(_notice["team_rung"]))
    except Exception:  # a GCS hiccup is no notice; ask again at the next poll
        logger.debug("should_checkpoint: could not read Ray's draining nodes", exc_info=True)
    return bool(_notice["draining"])


def _team_noticed(team_rung: tuple[str, str, str] | None) -> bool:
    """Whether the fleet arbiter has a reclaim notice on the run's share of its team's
    units of the rung (``(team, rung, part)``; the team ledger, ``core/ledger.py``)."""
    if team_rung is None:
        return False
    from ray_ladder.cluster.grants import GrantReader

    team, rung, part = team_rung
    return under_notice(part_entry(GrantReader().get(team), part), rung)


def with_ladder(
    train_fn: Callable[[dict], Any],
    ladder: Ladder | str | Path,
    constraints: ConstraintsArg = None,
    *,
    num_cpus: float = 1,
    bound: ConstraintsLike = None,
    team: str | None = None,
) -> Callable[[dict], Any]:
    """Make a Tune function trainable run on a ladder.

    Each trial asks Ray for the resources of the best eligible rung obtainable when it is
    placed (custom resources, GPUs, ``accelerator_type``, label selector; ``num_cpus``
    CPUs where the rung names none). With a :class:`LadderScheduler` (wired by
    :class:`ray_ladder.tune.Tuner`) a trial whose node dies resumes from its last
    checkpoint on the best rung obtainable then, and moves back up at a checkpoint.

    Args:
        train_fn: ``train_fn(config)``, using ``tune.report`` / ``tune.get_checkpoint``.
        ladder: The ladder (or the path of its YAML/JSON file). Only compute rungs are used.
        constraints: Constraints for every trial (``Constraints`` or a dict), or a callable
            ``config -> constraints`` for per-trial residency, cost or quality limits.
        num_cpus: CPUs of a trial on rungs that do not set ``num_cpus``.
        bound: Constraints bound to the whole run (``Constraints`` or a dict): every
            trial runs under them and its own ``constraints`` may only narrow them
            (``ConstraintNotAllowedError`` otherwise).
        team: The fleet team the run belongs to (the operator's binding, like ``bound``:
            no trial config changes it). Its trials' shared rungs follow the team's grants
            from the fleet arbiter: a rung with no unit granted is not obtainable, a
            reclaim notice moves a trial at its next checkpoint (:func:`should_checkpoint`
            asks for one), and the scheduler reports the run's demand (docs/teams.md).

    Returns:
        The trainable to hand to ``tune.Tuner``.

    Raises:
        InvalidConstraintsError: static constraints no rung can satisfy.
        ValueError: ``team`` is not a fleet team's name, or not one of the running
            fleet's teams (checked when this process is connected to Ray).

    Example:
        >>> trainable = with_ladder(train_fn, "ladder.yaml", {"jurisdiction": "eu"})
        ... # doctest: +SKIP
        >>> Tuner(trainable, param_space={"lr": 0.1}).fit()  # doctest: +SKIP
    """
    from ray import tune

    if not callable(train_fn):
        raise TypeError(f"train_fn must be a function of config, got {type(train_fn).__name__}")
    spec = LadderTrialSpec.build(as_ladder(ladder), constraints, num_cpus, bound, team)
    check_bound_team(team)  # one of the running fleet's teams (cluster/fleet_teams.py)

    @functools.wraps(train_fn)
    def ladder_trainable(config: dict) -> Any:
        return train_fn(config)

    # Tune's function wrapper mixes `__mixins__` into the trainable class it builds.
    mixin = type("LadderMixin", (LadderTrainableMixin,), {"_ladder_spec": spec})
    inherited = tuple(getattr(train_fn, "__mixins__", ()))
    ladder_trainable.__mixins__ = (mixin, *inherited)  # type: ignore[attr-defined]
    ladder_trainable._ladder_spec = spec  # type: ignore[attr-defined]
    return tune.with_resources(ladder_trainable, spec.first_choice)


def spec_of(trainable_cls: Any) -> LadderTrialSpec | None:
    """The ladder spec of a trainable class (``None`` for trainables not on a ladder)."""
    return getattr(trainable_cls, "_ladder_spec", None)
