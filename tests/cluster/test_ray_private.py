"""Every Ray internal the ladder uses exists in the installed Ray, of the pinned series."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import ray
import tomllib

from ray_ladder.cluster import ray_private
from ray_ladder.cluster.errors import RUNG_GONE, gone_class, is_rung_gone

ROOT = Path(__file__).resolve().parents[2]


def _ray_requirement() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [req] = [d for d in deps if re.match(r"ray\[", d)]
    return req


def test_the_installed_ray_is_the_series_the_door_was_read_from() -> None:
    req = _ray_requirement()
    low = re.search(r">=([\d.]+)", req).group(1)
    high = re.search(r"<([\d.]+)", req).group(1)
    assert low == ray_private.RAY_SERIES, (req, ray_private.RAY_SERIES)
    version = tuple(int(x) for x in ray.__version__.split(".")[:2])
    assert tuple(int(x) for x in low.split(".")) <= version < tuple(
        int(x) for x in high.split(".")), (ray.__version__, req)


@pytest.mark.parametrize(("module", "attribute"), ray_private.PRIVATE_USES)
def test_every_private_use_resolves(module: str, attribute: str) -> None:
    value = importlib.import_module(module)
    for part in attribute.split("."):
        value = getattr(value, part)  # AttributeError: Ray moved it; change the door
    assert value is not None


def test_the_door_lists_what_its_functions_reach() -> None:
    source = Path(ray_private.__file__).read_text()
    body = source[source.index("# --- GCS"):]
    for module, attribute in ray_private.PRIVATE_USES:
        assert attribute.split(".")[-1] in body, f"{module}.{attribute} is listed but unused"


@pytest.mark.parametrize(("module", "name"),
                         [(m, n) for m, names in RUNG_GONE.items() for n in names])
def test_every_rung_gone_error_exists_where_the_list_says(module: str, name: str) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert cls.__module__ == module  # the check compares __module__: it must be the home


def test_rung_gone_errors_and_their_subclasses_count_user_errors_do_not() -> None:
    from ray.exceptions import ActorDiedError, NodeDiedError, RayTaskError
    from ray.serve.exceptions import BackPressureError

    assert gone_class(ActorDiedError()).__name__ == "RayActorError"
    assert is_rung_gone(NodeDiedError("n"))
    assert is_rung_gone(BackPressureError(num_queued_requests=1, max_queued_requests=1))
    assert not is_rung_gone(ValueError("bad input"))
    # A user's exception inside a task is a RayTaskError that is also the user's class.
    wrapped = RayTaskError("f", "tb", ValueError("bad")).as_instanceof_cause()
    assert not is_rung_gone(wrapped)


def test_the_serve_controller_copy_of_the_kv_names_matches_the_hook() -> None:
    # serve/scaling.py is pickled by value into the controller and reads the KV itself.
    from ray_ladder.cluster import roles
    from ray_ladder.serve import scaling

    assert (scaling.HOOK_KV_NAMESPACE, scaling.HOOK_ROLES_PREFIX) == \
        (roles.KV_NAMESPACE, roles.ROLES_PREFIX)
