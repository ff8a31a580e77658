"""What a node advertises to Ray (resources, labels), and what a rung needs of a node."""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ray_ladder.core.placement import label_expr_matches
from ray_ladder.core.spec import SLUG_PATTERN

if TYPE_CHECKING:
    from ray_ladder.core.spec import Rung
    from ray_ladder.node.detection import Detection

RESOURCE_PREFIX = "ladder/"
LABEL_ACCELERATOR = "ladder.accelerator"
LABEL_GPU_COUNT = "ladder.gpu-count"
LABEL_GPU_MEMORY = "ladder.gpu-memory-gb"
LABEL_MIG = "ladder.mig"
LABEL_SITE = "ladder.site"
CPU_ACCELERATOR = "cpu"

@dataclass(frozen=True)
class NodeResources:
    """The Ray custom resources and node labels a node should start with.

    ``gpus`` and ``accelerator_type`` are what Ray detects by itself (its ``GPU`` count
    and ``accelerator_type:<X>`` come from GPU 0): they are not advertised again, only
    kept to check rungs that ask for ``num_gpus`` or ``accelerator_type``.

    Example:
        >>> from ray_ladder.node.accelerators import FakeNvml, detect
        >>> node = node_resources(detect(FakeNvml.preset("h100x8")))
        >>> node.resources, node.labels[LABEL_ACCELERATOR]
        ({'ladder/h100': 8}, 'h100')
    """

    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    gpus: int = 0
    accelerator_type: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"resources": ..., "labels": ...}``, ready for ``ray.init`` or JSON."""
        return {"resources": dict(self.resources), "labels": dict(self.labels)}

    def ray_start_args(self) -> list[str]:
        """``ray start`` arguments: ``--resources JSON`` (if any) and ``--labels k=v,...``.

        Example:
            >>> NodeResources({"ladder/l4": 1}, {"ladder.accelerator": "l4"}).ray_start_args()
            ['--resources={"ladder/l4":1}', '--labels=ladder.accelerator=l4']
        """
        args = []
        if self.resources:
            text = json.dumps(self.resources, sort_keys=True, separators=(",", ":"))
            args.append(f"--resources={text}")
        if self.labels:
            args.append("--labels=" + ",".join(f"{k}={v}" for k, v in sorted(self.labels.items())))
        return args

    def ray_start_flags(self) -> str:
        """:meth:`ray_start_args` quoted for a shell (copy-paste or ``eval``)."""
        return shlex.join(self.ray_start_args())


_LABEL_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
_RAY_DETECTED = {"CPU", "GPU", "memory", "object_store_memory"}


def _check_label(key: str, value: str) -> None:
    name = key.rsplit("/", 1)[-1]
    if key.startswith("ray.io/"):
        raise ValueError(f"label key {key!r}: the ray.io/ prefix is reserved for Ray")
    if not _LABEL_RE.fullmatch(name):
        raise ValueError(f"label key {key!r} is not a valid Ray label key "
                         "(letters, digits, '-', '_', '.'; at most 63; alphanumeric ends)")
    if value and not _LABEL_RE.fullmatch(value):
        raise ValueError(f"label {key}={value!r}: value must be at most 63 characters of "
                         "letters, digits, '-', '_', '.', with alphanumeric ends")


def node_resources(
    detection: Detection,
    *,
    site: str | None = None,
    extra_resources: Mapping[str, float] | None = None,
    labels: Mapping[str, str] | None = None,
) -> NodeResources:
    """Turn a :class:`Detection` into the resources and labels the node should advertise.

    Whole GPUs give ``ladder/<model>`` (plus ``ladder/<family>`` when the model has memory
    variants, e.g. ``ladder/a100``); a GPU in MIG mode gives its slices instead,
    ``ladder/<family>-mig-<profile>``. ``site`` adds the label ``ladder.site`` and a
    ``ladder/<site>-<name>`` copy of every accelerator resource. ``extra_resources`` and
    ``labels`` (the operator's own) are merged last and win over detected values.

    Raises:
        ValueError: for a bad site, label or resource (names the bad value).

    Example:
        >>> from ray_ladder.node.accelerators import FakeNvml, detect
        >>> node = node_resources(detect(FakeNvml.preset("a100-mig")), site="onprem")
        >>> node.resources["ladder/a100-mig-1g.10gb"], node.resources["ladder/onprem-a100"]
        (7, 1)
    """
    counts: Counter[str] = Counter()
    for gpu in detection.gpus:
        if gpu.mig_enabled:
            for piece in gpu.mig:
                counts[f"{gpu.family}-mig-{piece.profile}"] += 1
        else:
            counts[gpu.key] += 1
            if gpu.family != gpu.key:
                counts[gpu.family] += 1
    resources: dict[str, float] = {RESOURCE_PREFIX + k: n for k, n in sorted(counts.items())}
    out_labels: dict[str, str] = {}
    if detection.gpus:
        tally = Counter(g.key for g in detection.gpus)
        # Most GPUs wins; a tie goes to the model of the lowest index, as Ray's own
        # accelerator_type does.
        main = max(detection.gpus, key=lambda g: (tally[g.key], -g.index))
        out_labels[LABEL_ACCELERATOR] = main.key
        out_labels[LABEL_GPU_COUNT] = str(len(detection.gpus))
        out_labels[LABEL_GPU_MEMORY] = str(main.memory_gb)
        if any(g.mig_enabled for g in detection.gpus):
            out_labels[LABEL_MIG] = "true"
    else:
        out_labels[LABEL_ACCELERATOR] = CPU_ACCELERATOR
        out_labels[LABEL_GPU_COUNT] = "0"
    if site is not None:
        if not re.fullmatch(SLUG_PATTERN, site):
            raise ValueError(f"site {site!r} must be a lowercase slug such as 'onprem' "
                             "(letters, digits, '.', '_', '-')")
        for key, n in list(resources.items()):
            resources[f"{RESOURCE_PREFIX}{site}-{key[len(RESOURCE_PREFIX):]}"] = n
        out_labels[LABEL_SITE] = site
    for key, amount in (extra_resources or {}).items():
        if key in _RAY_DETECTED:
            raise ValueError(f"resource {key!r} is Ray's own: use ray start --num-cpus/--num-gpus")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount <= 0:
            raise ValueError(f"resource {key!r}: amount must be a number > 0, got {amount!r}")
        resources[key] = amount
    for key, value in (labels or {}).items():
        out_labels[key] = value
    for key, value in out_labels.items():
        _check_label(key, value)
    first = detection.gpus[0] if detection.gpus else None
    return NodeResources(resources, out_labels, len(detection.gpus),
                         first.family.upper() if first else None)


def missing_for(rung: Rung, node: NodeResources, *, cpus: float | None = None) -> list[str]:
    """What ``node`` lacks to host one placement of ``rung`` (empty: it can, when idle).

    Checks custom resources, label selectors (``v``, ``!v``, ``in(a,b)``, ``!in(a,b)``),
    ``num_gpus`` and ``accelerator_type`` against what Ray detects, and ``num_cpus`` when
    ``cpus`` is given. Non-compute rungs need nothing.

    Example:
        >>> from ray_ladder.node.accelerators import FakeNvml, detect
        >>> from ray_ladder.core.spec import Rung
        >>> node = node_resources(detect(FakeNvml.preset("l4x1")))
        >>> missing_for(Rung(name="h100", resources={"ladder/h100": 1}), node)
        ['resource ladder/h100: rung needs 1, node advertises 0']
    """
    if not rung.is_compute:
        return []
    missing = []
    for key, need in rung.resources.items():
        have = node.resources.get(key, 0)
        if have < need:
            missing.append(f"resource {key}: rung needs {need:g}, node advertises {have:g}")
    if rung.num_gpus and node.gpus < rung.num_gpus:
        missing.append(f"GPU: rung needs {rung.num_gpus:g}, Ray detects {node.gpus}")
    if rung.num_cpus is not None and cpus is not None and cpus < rung.num_cpus:
        missing.append(f"CPU: rung needs {rung.num_cpus:g}, node has {cpus:g}")
    wanted = rung.accelerator_type
    if wanted and (node.accelerator_type or "").lower() != wanted.lower():
        missing.append(f"accelerator_type: rung needs {wanted}, "
                       f"Ray detects {node.accelerator_type or 'none'}")
    for key, selector in rung.label_selector.items():
        value = node.labels.get(key)
        if not label_expr_matches(selector, value):
            missing.append(f"label {key}: rung selects {selector!r}, node has {value!r}")
    return missing
