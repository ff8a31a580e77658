"""LocalCluster construction rules (no Ray started) and node types from a ladder."""

from __future__ import annotations

import pytest

from ray_ladder import load_ladder
from ray_ladder.testing import LocalCluster, NodeType, node_type_for_rung, wait_until
from tests.conftest import EXAMPLES


def test_unknown_node_type_keys_name_the_valid_ones():
    with pytest.raises(ValueError, match="valid: .*resources"):
        LocalCluster({"h100": {"resorces": {"ladder/h100": 1}}})


def test_head_name_is_reserved_and_initial_must_name_known_types():
    with pytest.raises(ValueError, match="reserved"):
        LocalCluster({"head": {}})
    with pytest.raises(ValueError, match="unknown node types"):
        LocalCluster({"h100": {}}, initial={"a100": 1})


def test_from_ladder_one_type_per_non_cpu_compute_rung():
    ladder = load_ladder(EXAMPLES / "gpu-serving.yaml")
    cluster = LocalCluster.from_ladder(ladder)
    assert sorted(cluster.node_types) == ["a100", "h100", "l4"]  # cpu runs on the head
    h100 = cluster.node_types["h100"]
    assert h100.resources == {"ladder/h100": 1.0}
    assert h100.labels == {"ladder.accelerator": "h100", "ladder.rung": "h100"}
    assert cluster.initial == {"a100": 1, "h100": 1, "l4": 1}


def test_node_type_for_rung_handles_selector_forms_and_accelerator_type():
    ladder = load_ladder(EXAMPLES / "mig.yaml")
    assert node_type_for_rung(ladder.rung("cpu")) is None
    from ray_ladder import Rung

    rung = Rung(name="x", accelerator_type="H100", num_gpus=2,
                label_selector={"zone": "in(a,b)", "spot": "!true"})
    t = node_type_for_rung(rung)
    assert isinstance(t, NodeType)
    assert t.resources == {"accelerator_type:H100": 1.0}
    assert t.num_gpus == 2
    assert t.labels == {"zone": "a", "ladder.rung": "x"}


def test_wait_until_returns_value_and_times_out():
    assert wait_until(lambda: 42) == 42
    with pytest.raises(TimeoutError, match="never"):
        wait_until(lambda: False, timeout_s=0.05, interval_s=0.01, message="never")
