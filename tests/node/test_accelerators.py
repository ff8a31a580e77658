"""Accelerator detection through the fake NVML seam, and the resources/labels it yields."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ray_ladder.core.spec import Rung
from ray_ladder.node import accelerators as acc
from ray_ladder.node.accelerators import (
    Detection,
    FakeGpu,
    FakeMig,
    FakeNvml,
    canonical_name,
    detect,
    mig_profile,
    missing_for,
    node_resources,
)
from ray_ladder.node.nvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_UNKNOWN,
    NvmlImportError,
)

A100_80 = ("NVIDIA A100-SXM4-80GB", 81920)
LABEL_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")


# --- names -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("nvml_name", "model"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100-40GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10G", "A10G"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("Tesla V100-PCIE-32GB", "V100"),
        ("Tesla K80", "K80"),
        # Unknown models keep a slug of their name, without the vendor word.
        ("NVIDIA GeForce RTX 4090", "geforce-rtx-4090"),
        ("NVIDIA L40", "l40"),
        ("NVIDIA GH200 480GB", "gh200-480gb"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition",
         "rtx-pro-6000-blackwell-server-edition"),
    ],
)
def test_canonical_names(nvml_name: str, model: str) -> None:
    assert canonical_name(nvml_name) == model
    assert canonical_name(nvml_name.encode()) == model  # pynvml < 11.5 answers bytes


def test_a100_without_size_in_name_is_told_apart_by_memory() -> None:
    assert canonical_name("NVIDIA A100-SXM4", memory_mb=81920) == "A100-80GB"
    assert canonical_name("NVIDIA A100-SXM4", memory_mb=40960) == "A100-40GB"


def test_unknown_names_become_valid_resource_and_label_slugs() -> None:
    name = "NVIDIA Some Very Long Experimental Accelerator Name (Rev. 2) / Engineering Sample"
    slug = canonical_name(name)
    assert len(slug) <= 63 and LABEL_RE.fullmatch(slug)
    assert slug == slug.lower()
    assert canonical_name("") == "unknown-gpu"


@pytest.mark.parametrize(
    ("gi", "ci", "memory_mb", "parent_mb", "profile"),
    [
        # A100 40GB: NVML reports slightly less memory than the profile name says.
        (1, 1, 4864, 40960, "1g.5gb"),
        (2, 2, 9856, 40960, "2g.10gb"),
        (3, 3, 19968, 40960, "3g.20gb"),
        (7, 7, 40192, 40960, "7g.40gb"),
        # A100 80GB
        (1, 1, 9728, 81920, "1g.10gb"),
        (1, 1, 19968, 81920, "1g.20gb"),
        (3, 3, 40192, 81920, "3g.40gb"),
        (7, 7, 80896, 81920, "7g.80gb"),
        # H100 80GB HBM3 (81559 MiB in all) and H200 (143771 MiB)
        (1, 1, 9984, 81559, "1g.10gb"),
        (1, 1, 16896, 143771, "1g.18gb"),
        # A compute instance smaller than its GPU instance.
        (3, 1, 40192, 81920, "1c.3g.40gb"),
    ],
)
def test_mig_profile_names(gi: int, ci: int, memory_mb: int, parent_mb: int,
                           profile: str) -> None:
    assert mig_profile(gi, ci, memory_mb, parent_mb * 2**20) == profile


# --- detection through the fake seam -------------------------------------------------------

def test_h100x8() -> None:
    nvml = FakeNvml.preset("h100x8")
    found = detect(nvml)
    assert found.status == "ok" and found.message is None and found.warnings == ()
    assert [g.model for g in found.gpus] == ["H100"] * 8
    assert [g.index for g in found.gpus] == list(range(8))
    assert found.gpus[0].memory_gb == 80 and found.driver_version == "550.54.15"
    assert nvml.initialized == 0, "nvmlShutdown must balance nvmlInit"
    node = node_resources(found)
    assert node.resources == {"ladder/h100": 8}
    assert node.labels == {"ladder.accelerator": "h100", "ladder.gpu-count": "8",
                           "ladder.gpu-memory-gb": "80"}
    assert "GPU" not in node.resources, "Ray detects its own GPU resource"
    assert node.gpus == 8 and node.accelerator_type == "H100"


def test_names_as_bytes_give_the_same_answer() -> None:
    as_str = detect(FakeNvml([FakeGpu("NVIDIA L4", 23034, mig=None)]))
    as_bytes = detect(FakeNvml([FakeGpu("NVIDIA L4", 23034, mig=None)], names_as_bytes=True))
    assert as_bytes.gpus == as_str.gpus
    assert as_bytes.gpus[0].nvml_name == "NVIDIA L4"


def test_a100_with_mig_advertises_slices_instead_of_the_gpu() -> None:
    found = detect(FakeNvml.preset("a100-mig"))
    assert [g.mig_enabled for g in found.gpus] == [True, True, False]
    assert [s.profile for s in found.gpus[0].mig] == ["1g.10gb"] * 7
    assert [s.profile for s in found.gpus[1].mig] == ["3g.40gb"] * 2
    node = node_resources(found)
    assert node.resources == {
        "ladder/a100": 1,  # only GPU 2 is whole
        "ladder/a100-80gb": 1,
        "ladder/a100-mig-1g.10gb": 7,
        "ladder/a100-mig-3g.40gb": 2,
    }
    assert node.labels["ladder.mig"] == "true"
    assert node.labels["ladder.accelerator"] == "a100-80gb"
    assert node.labels["ladder.gpu-count"] == "3"


def test_mig_mode_without_devices_offers_nothing_and_says_so() -> None:
    found = detect(FakeNvml([FakeGpu(*A100_80, mig=(), mig_enabled=True)]))
    assert found.gpus[0].mig_enabled and found.gpus[0].mig == ()
    assert node_resources(found).resources == {}
    assert any("MIG mode with no MIG devices" in w for w in found.warnings)


def test_mig_profile_falls_back_to_the_device_name() -> None:
    gpu = FakeGpu(*A100_80, mig=(FakeMig(2, 19968, name="NVIDIA A100-SXM4-80GB MIG 2g.20gb"),),
                  mig_enabled=True, errors={"nvmlDeviceGetAttributes": NVML_ERROR_NO_PERMISSION})
    found = detect(FakeNvml([gpu]))
    assert [s.profile for s in found.gpus[0].mig] == ["2g.20gb"]
    assert found.warnings == ()


def test_mig_slice_without_any_profile_is_skipped_with_a_warning() -> None:
    gpu = FakeGpu(*A100_80, mig=(FakeMig(1, 9728, name="MIG device"),), mig_enabled=True,
                  errors={"nvmlDeviceGetAttributes": NVML_ERROR_NO_PERMISSION})
    found = detect(FakeNvml([gpu]))
    assert found.gpus[0].mig == ()
    assert any("MIG slot 0 skipped" in w for w in found.warnings)


def test_mig_slot_errors_other_than_not_found_are_reported() -> None:
    gpu = FakeGpu(*A100_80, mig=(FakeMig(1, 9728),), mig_enabled=True,
                  errors={"nvmlDeviceGetMigDeviceHandleByIndex": NVML_ERROR_UNKNOWN})
    found = detect(FakeNvml([gpu]))
    assert found.gpus[0].mig == ()
    assert len([w for w in found.warnings if "MIG slot" in w]) == 7  # every slot tried


def test_mixed_cards_one_resource_per_model_label_names_the_majority() -> None:
    found = detect(FakeNvml.preset("mixed"))
    assert [g.model for g in found.gpus] == ["A100-40GB", "T4", "T4", "geforce-rtx-4090"]
    node = node_resources(found)
    assert node.resources == {"ladder/a100": 1, "ladder/a100-40gb": 1, "ladder/t4": 2,
                              "ladder/geforce-rtx-4090": 1}
    assert node.labels["ladder.accelerator"] == "t4"  # 2 of 4 GPUs
    assert node.labels["ladder.gpu-memory-gb"] == "15"
    assert node.accelerator_type == "A100", "Ray names the node after GPU 0"


def test_mixed_cards_tie_goes_to_the_lowest_index() -> None:
    gpus = [FakeGpu("NVIDIA L4", 23034, mig=None), FakeGpu("NVIDIA H100 PCIe", 81559)]
    assert node_resources(detect(FakeNvml(gpus))).labels["ladder.accelerator"] == "l4"
    assert node_resources(detect(FakeNvml(gpus[::-1]))).labels["ladder.accelerator"] == "h100"


def test_cards_without_mig_support_are_whole() -> None:
    found = detect(FakeNvml([FakeGpu("Tesla T4", 15360, mig=None)]))
    assert not found.gpus[0].mig_enabled
    assert node_resources(found).resources == {"ladder/t4": 1}


@pytest.mark.parametrize("code", [NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_DRIVER_NOT_LOADED])
def test_no_driver_is_a_cpu_node(code: int) -> None:
    found = detect(FakeNvml(init_error=code))
    assert found.status == "no-driver" and found.gpus == ()
    assert "no NVIDIA driver" in (found.message or "")
    node = node_resources(found)
    assert node.resources == {}
    assert node.labels == {"ladder.accelerator": "cpu", "ladder.gpu-count": "0"}


def test_pynvml_not_installed_is_a_cpu_node(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise NvmlImportError("pynvml is not installed (No module named 'pynvml')")

    monkeypatch.setattr(acc, "load_pynvml", missing)
    found = detect()
    assert found.status == "no-driver" and "pynvml is not installed" in (found.message or "")


def test_driver_error_is_named_and_cpu_only() -> None:
    found = detect(FakeNvml(init_error=NVML_ERROR_UNKNOWN))
    assert found.status == "error"
    assert "Unknown Error" in (found.message or "")
    assert node_resources(found).labels["ladder.accelerator"] == "cpu"


def test_error_after_init_still_shuts_nvml_down() -> None:
    nvml = FakeNvml([FakeGpu(*A100_80)], count_error=NVML_ERROR_UNKNOWN)
    found = detect(nvml)
    assert found.status == "error" and found.gpus == ()
    assert nvml.initialized == 0


def test_a_failing_gpu_is_skipped_not_guessed() -> None:
    lost = FakeGpu("NVIDIA H100 80GB HBM3", 81559,
                   errors={"nvmlDeviceGetName": NVML_ERROR_GPU_IS_LOST})
    ok = FakeGpu("NVIDIA H100 80GB HBM3", 81559)
    found = detect(FakeNvml([ok, lost, ok]))
    assert found.status == "ok"
    assert [g.index for g in found.gpus] == [0, 2]
    assert found.warnings == ("GPU 1 skipped: NVMLError(15): GPU is lost",)
    assert node_resources(found).resources == {"ladder/h100": 2}


def test_unknown_mig_mode_skips_the_gpu_rather_than_advertise_it_whole() -> None:
    gpu = FakeGpu(*A100_80, errors={"nvmlDeviceGetMigMode": NVML_ERROR_NO_PERMISSION})
    found = detect(FakeNvml([gpu]))
    assert found.gpus == () and "GPU 0 skipped" in found.warnings[0]


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="this machine has an NVIDIA driver")
def test_real_pynvml_without_a_driver() -> None:
    found = detect()
    assert found.status == "no-driver" and found.gpus == ()


def test_detection_to_dict_is_json_ready() -> None:
    data = detect(FakeNvml.preset("a100-mig")).to_dict()
    assert data["gpus"][0]["mig"][0] == {"index": 0, "profile": "1g.10gb", "memory_mb": 9728}
    assert isinstance(data["warnings"], list)


# --- what the node advertises ----------------------------------------------------------

def test_site_adds_label_and_site_scoped_copies() -> None:
    node = node_resources(detect(FakeNvml.preset("a100x8")), site="eu-cloud")
    assert node.resources["ladder/eu-cloud-a100"] == 8
    assert node.resources["ladder/eu-cloud-a100-80gb"] == 8
    assert node.resources["ladder/a100"] == 8
    assert node.labels["ladder.site"] == "eu-cloud"


def test_operator_resources_and_labels_win() -> None:
    node = node_resources(detect(FakeNvml.preset("h100x8")),
                          extra_resources={"ladder/h100": 4, "ladder/onprem-cpu": 16},
                          labels={"ladder.accelerator": "h100-reserved", "team": "search"})
    assert node.resources == {"ladder/h100": 4, "ladder/onprem-cpu": 16}
    assert node.labels["ladder.accelerator"] == "h100-reserved"
    assert node.labels["team"] == "search"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"site": "On Prem"}, "site 'On Prem'"),
        ({"extra_resources": {"CPU": 4}}, "--num-cpus"),
        ({"extra_resources": {"ladder/x": 0}}, "must be a number > 0"),
        ({"extra_resources": {"ladder/x": "1"}}, "must be a number > 0"),
        ({"labels": {"ray.io/node-id": "x"}}, "reserved for Ray"),
        ({"labels": {"ladder.site": "on prem"}}, "value must be"),
        ({"labels": {"-bad": "x"}}, "not a valid Ray label key"),
    ],
)
def test_bad_operator_input_is_refused_naming_it(kwargs: dict, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        node_resources(Detection("no-driver"), **kwargs)


# --- what a rung needs of a node ---------------------------------------------------------

@pytest.fixture(scope="module")
def h100_node() -> acc.NodeResources:
    return node_resources(detect(FakeNvml.preset("h100x8")), site="onprem")


@pytest.mark.parametrize(
    ("rung", "missing"),
    [
        (Rung(name="a", resources={"ladder/h100": 8}), []),
        (Rung(name="a", resources={"ladder/h100": 9}),
         ["resource ladder/h100: rung needs 9, node advertises 8"]),
        (Rung(name="a", num_gpus=8, accelerator_type="H100"), []),
        (Rung(name="a", num_gpus=9), ["GPU: rung needs 9, Ray detects 8"]),
        (Rung(name="a", accelerator_type="A100"),
         ["accelerator_type: rung needs A100, Ray detects H100"]),
        (Rung(name="a", label_selector={"ladder.site": "onprem"}), []),
        (Rung(name="a", label_selector={"ladder.site": "!onprem"}),
         ["label ladder.site: rung selects '!onprem', node has 'onprem'"]),
        (Rung(name="a", label_selector={"ladder.accelerator": "in(a100, h100)"}), []),
        (Rung(name="a", label_selector={"ladder.accelerator": "!in(a100,h100)"}),
         ["label ladder.accelerator: rung selects '!in(a100,h100)', node has 'h100'"]),
        (Rung(name="a", label_selector={"zone": "!eu-1"}), []),  # absent label: not eu-1
        (Rung(name="a", label_selector={"zone": "in(eu-1)"}),
         ["label zone: rung selects 'in(eu-1)', node has None"]),
        (Rung(name="c", kind="cache"), []),
    ],
)
def test_missing_for(h100_node: acc.NodeResources, rung: Rung, missing: list[str]) -> None:
    assert missing_for(rung, h100_node) == missing


def test_missing_for_checks_cpus_only_when_given(h100_node: acc.NodeResources) -> None:
    rung = Rung(name="cpu", num_cpus=4)
    assert missing_for(rung, h100_node) == []
    assert missing_for(rung, h100_node, cpus=2) == ["CPU: rung needs 4, node has 2"]


def test_ray_start_args() -> None:
    node = node_resources(detect(FakeNvml.preset("l4x1")))
    assert node.ray_start_args() == [
        '--resources={"ladder/l4":1}',
        "--labels=ladder.accelerator=l4,ladder.gpu-count=1,ladder.gpu-memory-gb=22",
    ]
    assert node.ray_start_flags().startswith("'--resources={\"ladder/l4\":1}' --labels=")
    cpu = node_resources(Detection("no-driver"))
    assert cpu.ray_start_args() == ["--labels=ladder.accelerator=cpu,ladder.gpu-count=0"]


# --- the fake itself ---------------------------------------------------------------------

def test_fake_from_spec_forms(tmp_path: Path) -> None:
    spec = '{"gpus": [{"name": "NVIDIA L4", "memory_mb": 23034, "count": 3}]}'
    assert len(FakeNvml.from_spec(spec).gpus) == 3
    path = tmp_path / "fake.json"
    path.write_text(spec)
    assert len(FakeNvml.from_spec(str(path)).gpus) == 3
    assert len(FakeNvml.from_spec("h100x8").gpus) == 8
    with pytest.raises(ValueError, match="not a preset"):
        FakeNvml.from_spec("h100x9")


def test_detection_module_does_not_import_ray() -> None:
    code = ("import sys, ray_ladder.node.accelerators, ray_ladder.cli.node_cmd; "
            "ray_ladder.node.accelerators.detect(); "
            "sys.exit('ray' in sys.modules or 'ray_ladder.node.accelerators' not in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
