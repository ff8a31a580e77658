"""`ray-ladder render`: rung hardware inference, per-provider output, guards and CLI errors."""

from __future__ import annotations

import sys

import pytest
import yaml
from click.testing import CliRunner

from ray_ladder import Ladder, Rung
from ray_ladder.autoscale.render import RenderOptions, render, render_yaml
from ray_ladder.autoscale.render.catalog import rung_hardware
from ray_ladder.autoscale.render.ray_up import join_command
from ray_ladder.cli import main

LADDER = Ladder.from_yaml("""
name: t
rungs:
  - {name: big, resources: {ladder/h100: 2}, tags: {spot: "true"}}
  - {name: mig, resources: {ladder/a100-mig-1g.10gb: 1}, quality: 0.9}
  - {name: t4, num_gpus: 1, accelerator_type: T4, quality: 0.8}
  - {name: cpu, num_cpus: 2, quality: 0.5}
  - {name: shed, kind: shed, quality: 0}
""")


@pytest.mark.parametrize(("rung", "expect"), [
    (Rung(name="a", resources={"ladder/h100": 1}), ("h100", None)),
    (Rung(name="a", resources={"ladder/eu-h100": 1}, tags={"site": "eu"}), ("h100", None)),
    (Rung(name="a", resources={"ladder/h100-spot": 1}), ("h100", None)),
    (Rung(name="a", resources={"ladder/a100-mig-3g.20gb": 1}), ("a100", "3g.20gb")),
    (Rung(name="a", resources={"ladder/a100-mig-3g.40gb": 1}), ("a100-80gb", "3g.40gb")),
    (Rung(name="a", accelerator_type="L4", num_gpus=1), ("l4", None)),
    (Rung(name="a", label_selector={"ladder.accelerator": "v100"}), ("v100", None)),
    (Rung(name="a", num_cpus=4), ("cpu", None)),
])
def test_rung_hardware_is_inferred_from_the_rung(rung, expect):
    hw = rung_hardware(rung)
    assert (hw.accelerator, hw.mig) == expect


def test_unknown_gpu_model_names_the_fix():
    with pytest.raises(ValueError, match="--accelerator a=KEY"):
        rung_hardware(Rung(name="a", resources={"ladder/mi300x": 1}))
    assert rung_hardware(Rung(name="a", resources={"ladder/mi300x": 1}), "h100").accelerator \
        == "h100"


def test_ray_up_node_types_carry_the_rungs_resources_and_labels():
    cfg = render(LADDER, "gcp")
    types = cfg["available_node_types"]
    assert list(types) == ["ray.head.default", "big", "mig", "t4", "cpu"]
    big = types["big"]
    assert big["resources"] == {"CPU": 208, "GPU": 8, "ladder/h100": 8}
    assert big["labels"] == {"ladder.rung": "big"} and big["priority"] == 4
    assert big["node_config"]["scheduling"] == [{"onHostMaintenance": "TERMINATE",
                                                 "preemptible": True}]
    assert types["mig"]["resources"]["ladder/a100-mig-1g.10gb"] == 7
    t4 = types["t4"]
    assert t4["node_config"]["guestAccelerators"] == [
        {"acceleratorType": "nvidia-tesla-t4", "acceleratorCount": 1}]
    assert t4["resources"]["accelerator_type:T4"] == 1
    assert "GPU" not in types["cpu"]["resources"]
    assert cfg["max_workers"] == 8


def test_instance_type_override_and_missing_machine():
    cfg = render(LADDER, "aws", RenderOptions(instance_types={"big": "p5e.48xlarge"}))
    assert cfg["available_node_types"]["big"]["node_config"]["InstanceType"] == "p5e.48xlarge"
    l4 = Ladder.from_yaml("name: x\nrungs: [{name: l4, resources: {ladder/l4: 1}}]")
    with pytest.raises(ValueError, match="azure offers no l4"):
        render(l4, "azure")
    cfg = render(l4, "azure", RenderOptions(accelerators={"l4": "a10"}))
    assert cfg["available_node_types"]["l4"]["resources"]["ladder/l4"] == 1


def test_eu_only_ladders_render_in_the_eu_and_refuse_other_regions():
    eu = Ladder.from_yaml("""
name: eu
rungs:
  - {name: onprem, resources: {ladder/onprem-h100: 1}, tags: {site: onprem, jurisdiction: eu}}
  - {name: cloud, resources: {ladder/h100: 1}, tags: {jurisdiction: eu}}
""")
    for provider, region in (("aws", "eu-central-1"), ("gcp", "europe-west4"),
                             ("azure", "westeurope")):
        cfg = render(eu, provider)
        assert region in (cfg["provider"].get("region"), cfg["provider"].get("location"))
        assert list(cfg["available_node_types"]) == ["ray.head.default", "cloud"]
    with pytest.raises(ValueError, match="outside the EU"):
        render(eu, "gcp", RenderOptions(region="us-central1"))
    text = render_yaml(eu, "gcp")
    assert "Data residency" in text and "onprem: eval" in text


def test_join_command_adds_what_detection_cannot_know():
    rung = Rung(name="oc", num_cpus=2, resources={"ladder/onprem-cpu": 1},
                tags={"site": "onprem"}, label_selector={"zone": "a"})
    cmd = join_command(rung)
    assert "--site onprem" in cmd and '\'{"ladder/onprem-cpu": 1}\'' in cmd
    assert "--label zone=a" in cmd


def test_kuberay_and_computeclass_and_local_fake():
    rc = render(LADDER, "kuberay")["items"][1]
    groups = {g["groupName"]: g for g in rc["spec"]["workerGroupSpecs"]}
    assert groups["big"]["rayStartParams"]["num-gpus"] == "2"
    assert groups["big"]["rayStartParams"]["resources"] == '"{\\"ladder/h100\\": 2}"'
    cc = render(LADDER, "gke-computeclass")["spec"]
    assert [p.get("machineType") for p in cc["priorities"]][:2] == ["a3-highgpu-8g",
                                                                    "a2-ultragpu-1g"]
    fake = render(LADDER, "local-fake")
    assert fake["provider"]["module"] == "ray_ladder.autoscale.fake.provider.StockoutProvider"
    assert fake["available_node_types"]["big"]["resources"]["ladder/h100"] == 2
    assert fake["available_node_types"]["t4"]["resources"]["GPU"] == 1
    assert fake["idle_timeout_minutes"] == 0.1
    with pytest.raises(ValueError, match="unknown provider"):
        render(LADDER, "openstack")


def test_render_does_not_import_ray(tmp_path):
    path = tmp_path / "l.yaml"
    path.write_text(LADDER.to_yaml())
    import subprocess

    # Ray may be loaded by other tests: check in a fresh interpreter.
    code = ("import sys; from ray_ladder import load_ladder; "
            "from ray_ladder.autoscale.render import render; "
            f"render(load_ladder({str(path)!r}), 'kuberay'); print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_cli_render_stdout_file_and_errors(tmp_path):
    path = tmp_path / "l.yaml"
    path.write_text(LADDER.to_yaml())
    runner = CliRunner()
    out = runner.invoke(main, ["render", str(path), "--provider", "aws"])
    assert out.exit_code == 0, out.output
    assert yaml.safe_load(out.output)["provider"]["type"] == "aws"
    target = tmp_path / "c.yaml"
    out = runner.invoke(main, ["render", str(path), "--provider", "kuberay", "-o", str(target)])
    assert out.exit_code == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(target.read_text())]
    assert kinds == ["ConfigMap", "RayCluster"]
    out = runner.invoke(main, ["render", str(path), "--provider", "gcp", "--region", "x",
                               "--accelerator", "oops"])
    assert out.exit_code == 2 and "RUNG=VALUE" in out.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nrungs: []\n")
    out = runner.invoke(main, ["render", str(bad), "--provider", "aws"])
    assert out.exit_code == 2 and "rungs" in out.output
