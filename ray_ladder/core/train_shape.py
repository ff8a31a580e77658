"""TrainShape: how a Ray Train run uses one rung (a gang of workers that must fit at once)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat


class TrainShape(BaseModel):
    """How a Ray Train run uses a rung: ``workers`` workers of ``resources_per_worker`` each.

    Ray Train places one placement-group bundle per worker, so the whole gang must fit at
    once. The rung's ``params`` (e.g. ``grad_accum_steps``) tell the training function how
    to keep the global batch the same on every shape.

    Example:
        >>> TrainShape(workers=4, resources_per_worker={"ladder/h100": 2})
        TrainShape(workers=4, resources_per_worker={'ladder/h100': 2.0})
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    workers: int = Field(ge=1, description="Workers in the gang (Ray Train num_workers).")
    resources_per_worker: dict[str, PositiveFloat] | None = Field(
        None,
        min_length=1,
        description="Ray resources of one worker (Ray Train resources_per_worker); default: "
        "the rung's own placement (resources, num_cpus as CPU, num_gpus as GPU).",
    )


class TrainRungFacts(Protocol):
    """What :func:`train_issue` reads of a rung (``ray_ladder.Rung`` has it; the spec imports
    this module, so this one names the shape instead of importing the class)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def resources(self) -> Mapping[str, float]: ...
    @property
    def num_cpus(self) -> float | None: ...
    @property
    def num_gpus(self) -> float | None: ...
    @property
    def accelerator_type(self) -> str | None: ...
    @property
    def train(self) -> TrainShape | None: ...


def train_issue(rung: TrainRungFacts) -> tuple[str, str, object, str] | None:
    """The cross-field problem of a rung's training shape, as (path, message, value, fix).

    A training shape belongs on a compute rung, and each worker must ask for something:
    its own ``resources_per_worker`` or the rung's resources, CPUs, GPUs or accelerator.

    Example:
        >>> from types import SimpleNamespace as R
        >>> train_issue(R(name="x", kind="shed", resources={}, num_cpus=None, num_gpus=None,
        ...               accelerator_type=None, train=TrainShape(workers=2)))[0]
        'train'
    """
    shape = rung.train
    if shape is None:
        return None
    if rung.kind != "compute":
        return ("train", "only a compute rung takes a training shape, not a {value} rung",
                rung.kind, "remove 'train' or make it a compute rung")
    asks = bool(rung.resources or rung.num_cpus or rung.num_gpus or rung.accelerator_type)
    if shape.resources_per_worker is None and not asks:
        return ("train.resources_per_worker",
                "the training shape of {value} asks for no resources per worker", rung.name,
                "set train.resources_per_worker, or the rung's resources, num_cpus or num_gpus")
    return None
