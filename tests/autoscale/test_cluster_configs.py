"""The templates in cluster-configs/: valid for Ray and KubeRay, and what the renderer writes."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from ray_ladder import load_ladder
from ray_ladder.autoscale.render.capacity import left_out
from ray_ladder.autoscale.render.ray_up import is_eu_region
from ray_ladder.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "cluster-configs"
CAPACITY = ["capacity-aws.yaml", "capacity-gcp.yaml", "capacity-azure.yaml"]
RAY_UP = ["aws.yaml", "gcp.yaml", "azure.yaml", "hybrid-onprem-eu.yaml", "local-fake.yaml",
          *CAPACITY]
CLOUD = ["aws.yaml", "gcp.yaml", "azure.yaml", "hybrid-onprem-eu.yaml", *CAPACITY]
KUBERAY = ["kuberay.yaml", "capacity-kuberay-eks.yaml", "capacity-kuberay-gke.yaml",
           "capacity-kuberay-aks.yaml", "kuberay-rayservice.yaml", "kuberay-rayjob.yaml"]
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def load(name: str) -> dict:
    """The template; a KubeRay file's RayCluster/RayService/RayJob (after its ConfigMap)."""
    docs = list(yaml.safe_load_all((CONFIGS / name).read_text()))
    if name in KUBERAY:
        assert [d["kind"] for d in docs[:-1]] == ["ConfigMap"], name
    return docs[-1]


def render_commands() -> list[list[str]]:
    lines = (CONFIGS / "regenerate.sh").read_text().splitlines()
    return [shlex.split(line.replace("$L", "cluster-configs/ladders"))[1:]
            for line in lines if line.startswith("ray-ladder render")]


def source_ladder(name: str):
    args = next(a for a in render_commands() if a[a.index("-o") + 1].endswith(name))
    return load_ladder(ROOT / args[1])


@pytest.mark.parametrize("name", RAY_UP)
def test_ray_up_templates_pass_rays_validate_config(name):
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = load(name)
    validate_config(config)
    validate_config(prepare_config(config))  # what `ray up` checks after filling defaults


def test_templates_are_what_the_renderer_writes(tmp_path, monkeypatch):
    """Rungs and node types come from one source: re-rendering changes nothing."""
    shutil.copytree(CONFIGS / "ladders", tmp_path / "cluster-configs" / "ladders")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")  # the RayService's inputs
    commands = render_commands()
    assert {Path(a[a.index("-o") + 1]).name for a in commands} == {
        p.name for p in CONFIGS.glob("*.yaml")}
    monkeypatch.chdir(tmp_path)  # the commands use paths relative to the repository root
    for args in commands:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        out = args[args.index("-o") + 1]
        assert (tmp_path / out).read_text() == (ROOT / out).read_text(), f"re-render {out}"


@pytest.mark.parametrize("name", CLOUD)
def test_one_worker_node_type_per_rung_in_rung_order(name):
    config, ladder = load(name), source_ladder(name)
    provider = config["provider"]["type"]
    # Fixed machines, and rungs bought in a way this cloud does not sell, get no node type.
    static = [r.name for r in ladder.rungs if r.tags.get("site") == "onprem"
              or r.is_compute and left_out(provider, r)]
    workers = {k: v for k, v in config["available_node_types"].items()
               if k != config["head_node_type"]}
    assert list(workers) == [r.name for r in ladder.rungs if r.is_compute and
                             r.name not in static]
    assert [t["priority"] for t in workers.values()] == sorted(
        (t["priority"] for t in workers.values()), reverse=True)
    for rung_name, t in workers.items():
        rung = ladder.rung(rung_name)
        assert t["labels"]["ladder.rung"] == rung_name
        for key, amount in rung.resources.items():
            assert t["resources"][key] >= amount  # the autoscaler knows what it launches
        assert 0 == t["min_workers"] < t["max_workers"]
    assert 0 < config["idle_timeout_minutes"] <= 10
    start = " ".join(config["worker_start_ray_commands"])
    assert "$(ray-ladder node-resources --format=ray-start)" in start
    head = " ".join(config["head_start_ray_commands"])
    assert "ray-ladder autoscale start ~/ladder.yaml" in head
    for rung in static:
        assert f"--node-type {rung}=" in head  # the hook never asks the cloud for them


def test_market_and_accelerator_per_cloud():
    aws, gcp, azure = load("aws.yaml"), load("gcp.yaml"), load("azure.yaml")
    t = aws["available_node_types"]
    assert t["h100"]["node_config"]["InstanceType"] == "p5.48xlarge"
    assert "InstanceMarketOptions" not in t["h100"]["node_config"]
    assert t["h100-spot"]["node_config"]["InstanceMarketOptions"] == {"MarketType": "spot"}
    assert t["h100"]["resources"]["ladder/h100-ondemand"] == 8
    g = gcp["available_node_types"]
    assert g["h100-spot"]["node_config"]["scheduling"][0]["preemptible"] is True
    assert g["l4"]["node_config"]["machineType"] == "g2-standard-8"
    a = azure["available_node_types"]
    assert a["h100-spot"]["node_config"]["azure_arm_parameters"]["priority"] == "Spot"
    assert a["l4"]["node_config"]["azure_arm_parameters"]["vmSize"] == "Standard_NV36ads_A10_v5"
    # MIG: the node is partitioned before Ray starts, and advertises its slices.
    mig = t["a100-mig-3g"]
    assert mig["resources"]["ladder/a100-mig-3g.40gb"] == 16  # 8 GPUs x 2 slices
    assert any("mig -cgi 3g.40gb,3g.40gb" in c for c in mig["worker_setup_commands"])


def test_hybrid_stays_in_the_eu_and_says_how_fixed_machines_join():
    config = load("hybrid-onprem-eu.yaml")
    text = (CONFIGS / "hybrid-onprem-eu.yaml").read_text()
    assert is_eu_region("gcp", config["provider"]["region"])
    assert "Data residency" in text
    joins = re.findall(r"#   (\S+): eval \"ray start --address=HEAD_IP:6379 "
                       r"\$\(ray-ladder node-resources (.*)\)\"", text)
    assert [j[0] for j in joins] == ["onprem-h100", "onprem-cpu"]
    ladder = source_ladder("hybrid-onprem-eu.yaml")
    # The join commands are real node-resources invocations: run them on fake GPUs.
    for rung_name, args in joins:
        preset = "h100x8" if "h100" in rung_name else "no-driver"
        out = CliRunner().invoke(main, ["node-resources", *shlex.split(args), "--format=json",
                                        "--fake-nvml", preset])
        assert out.exit_code == 0, out.output
        node = json.loads(out.output[out.output.index("{"):])
        rung = ladder.rung(rung_name)
        assert all(node["resources"].get(k, 0) >= v for k, v in rung.resources.items())
        assert all(node["labels"].get(k) == v for k, v in rung.label_selector.items())


def kuberay_problems(doc: dict) -> list[str]:
    """Check a RayCluster (or a RayService's / RayJob's cluster) against KubeRay's ray.io/v1
    rules that its Go code checks (tests/autoscale/test_render_kuberay.py: the CRD schema)."""
    problems = []

    def need(cond: bool, msg: str) -> None:
        if not cond:
            problems.append(msg)

    need(doc.get("apiVersion") == "ray.io/v1", "apiVersion must be ray.io/v1")
    kind = doc.get("kind")
    need(kind in ("RayCluster", "RayService", "RayJob"), "kind must be a KubeRay kind")
    name = doc.get("metadata", {}).get("name", "")
    limit = 53 if kind == "RayCluster" else 47
    need(bool(DNS1035.match(name)) and len(name) <= limit,
         f"metadata.name {name!r}: DNS-1035, <={limit}")
    spec = doc.get("spec", {})
    spec = spec.get("rayClusterConfig") or spec.get("rayClusterSpec") or spec
    need(set(spec) <= {"headGroupSpec", "workerGroupSpecs", "rayVersion",
                       "enableInTreeAutoscaling", "autoscalerOptions", "headServiceAnnotations",
                       "suspend", "gcsFaultToleranceOptions", "managedBy"},
         f"unknown spec keys {sorted(spec)}")
    opts = spec.get("autoscalerOptions", {})
    need(opts.get("upscalingMode") in (None, "Default", "Aggressive", "Conservative"),
         "autoscalerOptions.upscalingMode")
    need(isinstance(opts.get("idleTimeoutSeconds", 0), int), "idleTimeoutSeconds int32")
    need(isinstance(spec.get("enableInTreeAutoscaling", False), bool), "enableInTreeAutoscaling")

    def check_pod(path: str, tmpl: dict) -> None:
        containers = tmpl.get("spec", {}).get("containers", [])
        need(len(containers) >= 1, f"{path}.template.spec.containers: at least one")
        for c in containers:
            need(bool(c.get("name")) and bool(c.get("image")), f"{path}: container name/image")
            for kind in ("limits", "requests"):
                for k, v in c.get("resources", {}).get(kind, {}).items():
                    need(isinstance(v, str), f"{path}: resource quantity {k} must be a string")

    def check_params(path: str, params: dict) -> None:
        need(isinstance(params, dict), f"{path}.rayStartParams: map")
        need("labels" not in params, f"{path}: rayStartParams.labels (KubeRay >= 1.5 refuses "
             "it: use the group's labels field)")
        for k, v in params.items():
            need(isinstance(v, str), f"{path}.rayStartParams.{k}: values are strings")
        if "resources" in params:
            raw = params["resources"]
            need(raw.startswith('"') and raw.endswith('"'), f"{path}: resources quoted")
            json.loads(raw[1:-1].replace('\\"', '"'))  # shell-unescaped, it is JSON

    head = spec.get("headGroupSpec", {})
    need(set(head) <= {"serviceType", "headService", "enableIngress", "rayStartParams",
                       "template", "labels", "resources"},
         f"unknown headGroupSpec keys {sorted(head)}")
    check_params("headGroupSpec", head.get("rayStartParams", {}))
    check_pod("headGroupSpec", head.get("template", {}))
    names = []
    for i, group in enumerate(spec.get("workerGroupSpecs", [])):
        path = f"workerGroupSpecs[{i}]"
        need(set(group) <= {"groupName", "replicas", "minReplicas", "maxReplicas",
                            "numOfHosts", "rayStartParams", "template", "scaleStrategy",
                            "suspend", "idleTimeoutSeconds", "labels", "resources",
                            "priority"}, f"{path}: unknown keys")
        for key in ("groupName", "minReplicas", "maxReplicas", "rayStartParams", "template"):
            need(key in group, f"{path}.{key} is required")
        names.append(group.get("groupName", ""))
        need(bool(DNS1123.match(group.get("groupName", ""))), f"{path}.groupName DNS-1123")
        lo, hi = group.get("minReplicas", 0), group.get("maxReplicas", 0)
        need(all(isinstance(x, int) for x in (lo, hi, group.get("replicas", 0))), "int32s")
        need(0 <= lo <= group.get("replicas", lo) <= hi, f"{path}: min <= replicas <= max")
        check_params(path, group.get("rayStartParams", {}))
        check_pod(path, group.get("template", {}))
    need(len(names) == len(set(names)), "groupName must be unique")
    return problems


@pytest.mark.parametrize("name", KUBERAY)
def test_every_kuberay_template_passes_the_crd_rules(name):
    from tests.autoscale.test_render_kuberay import crd_errors

    assert kuberay_problems(load(name)) == []
    assert crd_errors(load(name)) == []  # KubeRay 1.7.0's CRD schema (tests/data/kuberay)


def test_kuberay_raycluster_field_by_field():
    doc = load("kuberay.yaml")
    assert kuberay_problems(doc) == []
    ladder = source_ladder("kuberay.yaml")
    groups = {g["groupName"]: g for g in doc["spec"]["workerGroupSpecs"]}
    assert list(groups) == [r.name for r in ladder.rungs if r.is_compute]
    h100 = groups["h100"]["template"]["spec"]
    assert h100["nodeSelector"]["nvidia.com/gpu.product"].startswith("NVIDIA-H100")
    assert h100["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert groups["h100-spot"]["template"]["spec"]["nodeSelector"][
        "karpenter.sh/capacity-type"] == "spot"
    mig = groups["a100-mig-3g"]
    limits = mig["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/mig-3g.40gb"] == "1" and "nvidia.com/gpu" not in limits
    assert "ladder/a100-mig-3g.40gb" in mig["rayStartParams"]["resources"]
    cpu = groups["cpu"]["template"]["spec"]
    assert "nodeSelector" not in cpu and "tolerations" not in cpu


def test_kuberay_checker_catches_what_kuberay_rejects():
    doc = load("kuberay.yaml")
    doc["spec"]["workerGroupSpecs"][0]["minReplicas"] = 5
    doc["spec"]["workerGroupSpecs"][1]["groupName"] = "h100"
    doc["spec"]["workerGroupSpecs"][2]["rayStartParams"]["num-gpus"] = 1
    doc["metadata"]["name"] = "Bad_Name"
    problems = "\n".join(kuberay_problems(doc))
    for needle in ("min <= replicas <= max", "unique", "values are strings", "DNS-1035"):
        assert needle in problems


def test_gke_computeclass_mirrors_the_ladder():
    doc = load("gke-computeclass.yaml")
    assert doc["apiVersion"] == "cloud.google.com/v1" and doc["kind"] == "ComputeClass"
    spec = doc["spec"]
    assert spec["whenUnsatisfiable"] == "ScaleUpAnyway"
    assert spec["activeMigration"] == {"optimizeRulePriority": True}
    prios = spec["priorities"]
    assert [p.get("gpu", {}).get("type") for p in prios] == [
        "nvidia-h100-80gb", "nvidia-h100-80gb", "nvidia-tesla-a100", "nvidia-a100-80gb",
        "nvidia-l4", None]
    assert [p["spot"] for p in prios] == [False, True, False, False, False, False]
    assert prios[-1]["machineFamily"] == "n2"
