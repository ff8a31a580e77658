"""`ray-ladder node-resources`: output formats, driver failures, and the docs' worked examples."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from ray_ladder.cli import main
from ray_ladder.core.spec import load_ladder
from ray_ladder.node.accelerators import NodeResources, missing_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "ladders"
DOC = ROOT / "docs" / "accelerators.md"


def run(*args: str, fake: str | None = None) -> Result:
    env = {"RAY_LADDER_FAKE_NVML": fake} if fake else {}
    return CliRunner(env=env).invoke(main, ["node-resources", *args], catch_exceptions=False)


def test_json_is_resources_and_labels() -> None:
    result = run(fake="h100x8")
    assert result.exit_code == 0 and result.stderr == ""
    assert json.loads(result.stdout) == {
        "resources": {"ladder/h100": 8},
        "labels": {"ladder.accelerator": "h100", "ladder.gpu-count": "8",
                   "ladder.gpu-memory-gb": "80"},
    }


def test_mig_slices_become_resources() -> None:
    out = json.loads(run(fake="a100-mig").stdout)
    assert out["resources"]["ladder/a100-mig-1g.10gb"] == 7
    assert out["resources"]["ladder/a100-mig-3g.40gb"] == 2
    assert out["labels"]["ladder.mig"] == "true"


def test_no_driver_prints_cpu_only_and_exits_0() -> None:
    result = run(fake="no-driver")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {
        "resources": {}, "labels": {"ladder.accelerator": "cpu", "ladder.gpu-count": "0"}}
    assert len(result.stderr.splitlines()) == 1 and "no NVIDIA driver" in result.stderr


def test_broken_driver_is_named_on_stderr_and_answer_is_cpu_only() -> None:
    result = run("--format=ray-start", fake="driver-error")
    assert result.exit_code == 0
    assert result.stdout.strip() == "--labels=ladder.accelerator=cpu,ladder.gpu-count=0"
    assert "NVIDIA driver error" in result.stderr and "Unknown Error" in result.stderr


def test_skipped_devices_are_warned_about() -> None:
    fake = json.dumps({"gpus": [
        {"name": "NVIDIA L4", "memory_mb": 23034, "mig": None},
        {"name": "NVIDIA L4", "memory_mb": 23034, "mig": None,
         "errors": {"nvmlDeviceGetMemoryInfo": 15}},
    ]})
    result = run(fake=fake)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["resources"] == {"ladder/l4": 1}
    assert "warning: GPU 1 skipped" in result.stderr


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="this machine has an NVIDIA driver")
def test_installed_command_on_this_cpu_machine() -> None:
    exe = Path(sys.executable).with_name("ray-ladder")
    proc = subprocess.run([str(exe), "node-resources"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["labels"]["ladder.accelerator"] == "cpu"
    assert "no NVIDIA driver" in proc.stderr


def test_operator_resources_and_labels_are_merged() -> None:
    result = run("--site", "onprem", "--extra-resources", '{"ladder/onprem-cpu": 8}',
                 "--label", "ladder.jurisdiction=eu,team=search", "--label", "rack=r7",
                 fake="no-driver")
    out = json.loads(result.stdout)
    assert out["resources"] == {"ladder/onprem-cpu": 8}
    assert out["labels"] == {"ladder.accelerator": "cpu", "ladder.gpu-count": "0",
                             "ladder.site": "onprem", "ladder.jurisdiction": "eu",
                             "team": "search", "rack": "r7"}


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--extra-resources", "{nope"], "not JSON"),
        (["--extra-resources", "[1]"], "must be a JSON object"),
        (["--extra-resources", '{"GPU": 1}'], "--num-cpus/--num-gpus"),
        (["--label", "noequals"], "is not key=value"),
        (["--site", "On Prem"], "must be a lowercase slug"),
        (["--format=ray-start", "--ladder", str(EXAMPLES / "mig.yaml")], "--ladder works with"),
        (["--fake-nvml", "h100x9"], "not a preset"),
    ],
)
def test_bad_options_exit_2_naming_the_problem(args: list[str], words: str) -> None:
    result = run(*args, fake=None if "--fake-nvml" in args else "no-driver")
    assert result.exit_code == 2
    assert words in result.stderr


def test_table_lists_gpus_and_what_is_advertised() -> None:
    result = run("--format=table", "--ladder", str(EXAMPLES / "mig.yaml"), fake="a100-mig")
    assert result.exit_code == 0
    for text in ("NVIDIA A100-SXM4-80GB", "7 x 1g.10gb", "2 x 3g.40gb",
                 "ladder/a100-mig-1g.10gb", "ladder.mig", "ray start flags:", "a100-mig-3g"):
        assert text in result.stdout


def test_ladder_check_says_what_is_missing() -> None:
    out = json.loads(run("--ladder", str(EXAMPLES / "gpu-serving.yaml"), fake="l4x1").stdout)
    assert out["rungs"]["l4"] == {"hostable": True, "missing": []}
    assert out["rungs"]["h100"]["missing"] == [
        "resource ladder/h100: rung needs 1, node advertises 0",
        "label ladder.accelerator: rung selects 'h100', node has 'l4'",
    ]


def test_ray_start_flags_parse_back_with_rays_own_parsers() -> None:
    from ray._private.label_utils import parse_node_labels_string, validate_node_label_syntax

    for preset in ("h100x8", "a100-mig", "mixed", "no-driver"):
        flags = run("--format=ray-start", "--site", "eu-cloud", fake=preset).stdout
        expected = json.loads(run("--site", "eu-cloud", fake=preset).stdout)
        words = dict(w.split("=", 1) for w in shlex.split(flags))
        assert json.loads(words.get("--resources", "{}")) == expected["resources"]
        labels = parse_node_labels_string(words["--labels"])
        validate_node_label_syntax(labels)
        assert labels == expected["labels"]


# --- the worked examples of docs/accelerators.md ------------------------------------------

# (ladder file, rungs, fake machine, extra CLI args) as the doc's tables show them.
WORKED = [
    ("gpu-serving.yaml", ["h100"], "h100x8", []),
    ("gpu-serving.yaml", ["a100"], "a100x8", []),
    ("gpu-serving.yaml", ["l4"], "l4x1", []),
    ("gpu-serving.yaml", ["cpu", "cache", "shed"], "no-driver", []),
    ("hybrid-sovereign.yaml", ["onprem-h100"], "h100x8", ["--site", "onprem"]),
    ("hybrid-sovereign.yaml", ["eu-cloud-h100"], "h100x8", ["--site", "eu-cloud"]),
    ("hybrid-sovereign.yaml", ["eu-cloud-a100"], "a100x8", ["--site", "eu-cloud"]),
    ("hybrid-sovereign.yaml", ["onprem-cpu"], "no-driver",
     ["--site", "onprem", "--extra-resources", '{"ladder/onprem-cpu": 8}']),
    ("mig.yaml", ["a100-full", "a100-mig-3g", "a100-mig-1g", "cpu"], "a100-mig", []),
]


@pytest.mark.parametrize(("ladder", "rungs", "fake", "args"), WORKED,
                         ids=[f"{w[0]}:{w[1][0]}" for w in WORKED])
def test_docs_worked_example(ladder: str, rungs: list[str], fake: str, args: list[str]) -> None:
    doc = DOC.read_text(encoding="utf-8")
    flags = run(*args, "--format=ray-start", fake=fake).stdout.strip()
    assert flags in doc, f"docs/accelerators.md lacks the output {flags}"
    checked = json.loads(run(*args, "--ladder", str(EXAMPLES / ladder), fake=fake).stdout)
    for rung in rungs:
        assert checked["rungs"][rung] == {"hostable": True, "missing": []}, rung


def test_worked_examples_cover_every_rung() -> None:
    for name in ("gpu-serving.yaml", "hybrid-sovereign.yaml", "mig.yaml"):
        covered = {r for w in WORKED if w[0] == name for r in w[1]}
        assert covered == set(load_ladder(EXAMPLES / name).names), name


# --- the same nodes in a real Ray cluster ------------------------------------------------

def _node(fake: str, *args: str) -> NodeResources:
    out = json.loads(run(*args, fake=fake).stdout)
    return NodeResources(out["resources"], out["labels"])


@pytest.fixture(scope="module")
def advertised_cluster(local_cluster: Any) -> tuple[Any, dict[str, NodeResources]]:
    """Head: on-prem CPU node; workers: on-prem 8 x H100 and an EU-cloud MIG A100 node."""
    from ray_ladder.testing import NodeType

    head = _node("no-driver", "--site", "onprem", "--extra-resources", '{"ladder/onprem-cpu": 1}')
    nodes = {"onprem-h100": _node("h100x8", "--site", "onprem"),
             "eu-a100-mig": _node("a100-mig", "--site", "eu-cloud")}
    cluster = local_cluster(
        {name: NodeType(num_cpus=1, resources=n.resources, labels=n.labels)
         for name, n in nodes.items()},
        head=NodeType(num_cpus=2, resources=head.resources, labels=head.labels,
                      object_store_memory=100 * 2**20),
    )
    return cluster, {"head": head, **nodes}


@pytest.mark.ray
def test_every_hostable_rung_runs_where_the_mapping_says(advertised_cluster: Any) -> None:
    import ray

    cluster, nodes = advertised_cluster
    node_ids = {"head": cluster.head.node_id,
                **{h.type: h.node_id for h in cluster.nodes()}}
    cpus = {"head": 2.0, "onprem-h100": 1.0, "eu-a100-mig": 1.0}

    @ray.remote
    def where() -> str:
        return ray.get_runtime_context().get_node_id()

    expected, refs, unhostable = {}, {}, []
    for file in ("gpu-serving.yaml", "hybrid-sovereign.yaml", "mig.yaml"):
        for rung in load_ladder(EXAMPLES / file).rungs:
            if not rung.is_compute:
                continue
            hosts = {node_ids[n] for n, adv in nodes.items()
                     if not missing_for(rung, adv, cpus=cpus[n])}
            if not hosts:
                unhostable.append(rung.name)
                continue
            expected[rung.name] = hosts
            refs[rung.name] = where.options(**rung.placement()).remote()
    # Only these rungs lack a node here (no L4, no EU-cloud H100 in this cluster).
    assert sorted(unhostable) == ["eu-cloud-h100", "l4"]
    ran_on = dict(zip(refs, ray.get(list(refs.values()), timeout=120), strict=True))
    for name, node_id in ran_on.items():
        assert node_id in expected[name], f"rung {name} ran on an unexpected node"
    assert ran_on["a100-mig-1g"] == node_ids["eu-a100-mig"]
    assert ran_on["onprem-h100"] == node_ids["onprem-h100"]
    assert ran_on["onprem-cpu"] == node_ids["head"]
