"""`ray-ladder render`: node resources come from the machine chosen, unknown names are errors."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from ray_ladder import Ladder
from ray_ladder.autoscale.render import RenderOptions, render
from ray_ladder.autoscale.render.catalog import CATALOG
from ray_ladder.autoscale.render.machines import MACHINES
from ray_ladder.cli import main

LADDER = Ladder.from_yaml("""
name: t
rungs:
  - {name: h100, resources: {ladder/h100: 1}}
  - {name: t4, num_gpus: 1, accelerator_type: T4, quality: 0.8}
  - {name: cpu, num_cpus: 2, quality: 0.5}
""")


def _types(provider: str, **kw) -> dict:
    return render(LADDER, provider, RenderOptions(**kw))["available_node_types"]


def test_a_smaller_machine_advertises_its_own_gpus_and_cpus():
    """A p5.4xlarge has 1 H100 and 16 vCPUs: its node must not advertise a p5.48xlarge's 8."""
    h100 = _types("aws", instance_types={"h100": "p5.4xlarge"})["h100"]
    assert h100["resources"] == {"CPU": 16, "GPU": 1, "ladder/h100": 1}
    assert h100["node_config"]["InstanceType"] == "p5.4xlarge"
    a3 = _types("gcp", instance_types={"h100": "a3-highgpu-2g"})["h100"]
    assert a3["resources"] == {"CPU": 52, "GPU": 2, "ladder/h100": 2}
    # A bigger N1 for a T4 rung keeps its attached T4.
    n1 = _types("gcp", instance_types={"t4": "n1-standard-16"})["t4"]
    assert n1["resources"]["CPU"] == 16 and n1["resources"]["GPU"] == 1
    assert n1["node_config"]["guestAccelerators"][0]["acceleratorType"] == "nvidia-tesla-t4"
    assert _types("azure", instance_types={"cpu": "Standard_D16s_v5"})["cpu"]["resources"] == {
        "CPU": 16}


def test_an_unknown_machine_type_is_an_error_with_close_matches():
    with pytest.raises(ValueError, match="unknown aws machine type 'p5.banana'") as err:
        render(LADDER, "aws", RenderOptions(instance_types={"h100": "p5.banana"}))
    assert "p5.4xlarge (1 h100, 16 vCPU, 256 GiB)" in str(err.value)
    assert "--node-resources h100=" in str(err.value)


def test_node_resources_describe_a_machine_the_catalog_does_not_know():
    opts = RenderOptions(instance_types={"h100": "p6.new"},
                         node_resources={"h100": {"CPU": 24, "GPU": 2}})
    h100 = render(LADDER, "aws", opts)["available_node_types"]["h100"]
    assert h100["resources"] == {"CPU": 24, "GPU": 2, "ladder/h100": 2}
    assert h100["node_config"]["InstanceType"] == "p6.new"
    # Without --instance-type they correct the catalog machine's counts.
    h100 = _types("aws", node_resources={"h100": {"CPU": 96, "GPU": 4}})["h100"]
    assert h100["resources"]["GPU"] == 4 and h100["node_config"]["InstanceType"] == "p5.48xlarge"
    for bad, needle in (({"CPU": 8, "gpus": 1}, "unknown key"), ({"CPU": 8}, "needs a h100"),
                        ({"CPU": -1, "GPU": 1}, "whole number"), ({"GPU": 1}, "how many CPUs")):
        with pytest.raises(ValueError, match=needle):
            _types("aws", node_resources={"h100": bad})


def test_a_machine_of_another_gpu_is_refused():
    with pytest.raises(ValueError, match="carries l4 GPUs, the rung needs h100"):
        _types("aws", instance_types={"h100": "g6.xlarge"})
    with pytest.raises(ValueError, match="no GPU"):
        _types("aws", instance_types={"h100": "m6i.2xlarge"})
    # The same chip with more memory serves: an H200 machine for an h100 rung.
    assert _types("aws", instance_types={"h100": "p5e.48xlarge"})["h100"]["resources"]["GPU"] == 8


@pytest.mark.parametrize("flag", ["instance_types", "accelerators", "node_resources"])
def test_an_unknown_rung_name_is_an_error_naming_the_valid_rungs(flag):
    value = {"CPU": 1} if flag == "node_resources" else "p5.4xlarge"
    with pytest.raises(ValueError, match=r"no compute rung 'h10'.*\['h100', 't4', 'cpu'\]"):
        render(LADDER, "aws", RenderOptions(**{flag: {"h10": value}}))


def test_cli_exits_2_on_unknown_machine_rung_and_bad_node_resources(tmp_path):
    path = tmp_path / "l.yaml"
    path.write_text(LADDER.to_yaml())
    run = CliRunner().invoke
    out = run(main, ["render", str(path), "--provider", "aws", "--instance-type",
                     "h100=p5.4xlarge"])
    assert out.exit_code == 0, out.output
    node = yaml.safe_load(out.output)["available_node_types"]["h100"]
    assert node["resources"] == {"CPU": 16, "GPU": 1, "ladder/h100": 1}
    for args, needle in ((["--instance-type", "h100=p5.banana"], "close matches"),
                         (["--accelerator", "nope=h100"], "valid rungs"),
                         (["--node-resources", "h100=CPU:1"], "not JSON"),
                         (["--node-resources", "h100=[1]"], "JSON object")):
        out = run(main, ["render", str(path), "--provider", "aws", *args])
        assert out.exit_code == 2 and needle in out.output, (args, out.output)
    out = run(main, ["render", str(path), "--provider", "aws", "--instance-type", "h100=p6.x",
                     "--node-resources", 'h100={"CPU": 24, "GPU": 1}'])
    assert out.exit_code == 0, out.output
    assert yaml.safe_load(out.output)["available_node_types"]["h100"]["resources"]["CPU"] == 24


def test_every_catalog_machine_is_in_the_machine_table():
    for acc in CATALOG.values():
        for cloud, machine in acc.machines.items():
            known = MACHINES[cloud][machine.name]
            assert machine.cpus == known.cpus and machine.memory_gib == known.memory_gib
