"""`ray-ladder render --provider kuberay`: RayCluster, RayService and RayJob against KubeRay's
CRD schemas (tests/data/kuberay), the ladder ConfigMap, the image, the hook, the drain."""

from __future__ import annotations

import json
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from ray_ladder import Ladder, load_ladder
from ray_ladder.autoscale.render import RenderOptions, render, render_yaml
from ray_ladder.autoscale.render import kuberay as kr
from ray_ladder.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "tests" / "data" / "kuberay" / "kuberay-crd-schemas.json"
SERVE_CONFIG = yaml.safe_load((ROOT / "examples" / "serve_config.yaml").read_text())
GPU = load_ladder(ROOT / "examples" / "ladders" / "gpu-serving.yaml")
CAPACITY = load_ladder(ROOT / "examples" / "ladders" / "capacity.yaml")
KIND = {"raycluster": "RayCluster", "rayservice": "RayService", "rayjob": "RayJob"}


def _strict(node: Any) -> Any:
    """Refuse unknown fields, as `kubectl apply` (strict field validation) does."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@cache
def validator(kind: str) -> jsonschema.Draft202012Validator:
    doc = json.loads(SCHEMAS.read_text())
    return jsonschema.Draft202012Validator(
        _strict({**doc["kinds"][kind], "$defs": doc["$defs"]}))


def crd_errors(obj: dict) -> list[str]:
    """What the CRD schema of ``obj``'s kind rejects in it (path: message)."""
    errors = validator(obj["kind"]).iter_errors(obj)
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)


def cluster_spec(obj: dict) -> dict:
    spec = obj["spec"]
    return spec.get("rayClusterConfig") or spec.get("rayClusterSpec") or spec


def go_rules(obj: dict) -> list[str]:
    """KubeRay's Go-side checks (validation.go) the CRD schema does not carry."""
    problems = []
    name = obj["metadata"]["name"]
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) or len(name) > kr.MAX_NAME[
            obj["kind"]]:
        problems.append(f"metadata.name {name!r}")
    spec = cluster_spec(obj)
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        if "labels" in group["rayStartParams"]:
            problems.append("rayStartParams.labels (KubeRay >= 1.5: use the labels field)")
        if group.get("resources") and {"num-cpus", "num-gpus", "memory", "resources"} & set(
                group["rayStartParams"]):
            problems.append("resources in both rayStartParams and resources")
    return problems


def _render(ladder: Ladder, kind: str, **kw) -> dict:
    extra = {"rayservice": {"serve_config": SERVE_CONFIG},
             "rayjob": {"entrypoint": "python /home/ray/app/job.py"}}.get(kind, {})
    return render(ladder, "kuberay", RenderOptions(kind=kind, **extra, **kw))


@pytest.mark.parametrize("kind", list(KIND))
@pytest.mark.parametrize("kube", ["karpenter", "gke", "aks"])
def test_every_kind_passes_kuberays_crd_schema(kind, kube):
    doc = _render(CAPACITY if kube != "karpenter" else GPU, kind, kube=kube)
    configmap, obj = doc["items"]
    assert (doc["kind"], configmap["kind"], obj["kind"]) == ("List", "ConfigMap", KIND[kind])
    assert crd_errors(obj) == []
    assert go_rules(obj) == []


def test_the_schema_check_is_real():
    obj = _render(GPU, "rayservice")["items"][1]
    worker = obj["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    worker["replica"] = 1  # a typo
    worker["template"]["spec"]["containers"][0]["env"] = [{"name": "X", "value": 1}]
    worker["maxReplicas"] = "2"
    obj["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["labels"] = "a=b"
    errors = "\n".join(crd_errors(obj))
    assert "'replica' was unexpected" in errors
    assert "env.0.value: 1 is not of type 'string'" in errors
    assert "maxReplicas: '2' is not of type 'integer'" in errors
    assert go_rules(obj) == ["rayStartParams.labels (KubeRay >= 1.5: use the labels field)"]


def test_the_ladder_is_a_configmap_every_pod_mounts():
    configmap, obj = _render(GPU, "raycluster")["items"]
    assert Ladder.from_yaml(configmap["data"]["ladder.yaml"]) == GPU
    spec = obj["spec"]
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        pod = group["template"]["spec"]
        assert pod["volumes"] == [{"name": "ladder",
                                   "configMap": {"name": configmap["metadata"]["name"]}}]
        assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == kr.LADDER_DIR


def test_rayservice_serves_the_config_apps_with_the_mounted_ladder():
    obj = _render(GPU, "rayservice")["items"][1]
    serve = yaml.safe_load(obj["spec"]["serveConfigV2"])
    assert serve["http_options"] == {"host": "0.0.0.0", "port": 8000}
    app = serve["applications"][0]
    assert app["import_path"] == "ray_ladder.serve:app_builder"
    assert app["args"]["ladder"] == kr.LADDER_FILE
    assert app["args"]["rungs"] == SERVE_CONFIG["applications"][0]["args"]["rungs"]
    head = obj["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert {"containerPort": 8000, "name": "serve"} in head["ports"]


def test_rayjob_runs_the_entrypoint_and_cleans_up():
    spec = _render(GPU, "rayjob")["items"][1]["spec"]
    assert spec["entrypoint"] == "python /home/ray/app/job.py"
    assert spec["shutdownAfterJobFinishes"] is True and spec["submissionMode"] == "K8sJobMode"


def test_images_have_ray_ladder_in_them_and_match_the_dockerfile():
    spec = cluster_spec(_render(GPU, "raycluster")["items"][1])
    images = {g["groupName"]: g["template"]["spec"]["containers"][0]["image"]
              for g in spec["workerGroupSpecs"]}
    assert images["h100"] == "ray-ladder:2.60.0-py311-gpu" and images["cpu"] == \
        "ray-ladder:2.60.0-py311"
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    tag = re.search(r"^ARG RAY_TAG=(\S+)$", dockerfile, re.M)[1]
    assert tag == f"{RenderOptions().ray_version}-py311"
    assert "FROM rayproject/ray:${RAY_TAG}" in dockerfile and "pip install" in dockerfile
    other = _render(GPU, "raycluster", image="ghcr.io/acme/ray-ladder")["items"][1]
    assert other["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0][
        "image"] == "ghcr.io/acme/ray-ladder:2.60.0-py311"


def test_head_starts_the_hook_and_every_container_execs_ray_start():
    spec = cluster_spec(_render(CAPACITY, "raycluster", kube="aks")["items"][1])
    head = spec["headGroupSpec"]["template"]
    assert head["metadata"]["annotations"] == {kr.OVERWRITE_CMD: "true"}
    script = head["spec"]["containers"][0]["args"][0]
    assert f"ray-ladder autoscale start {kr.LADDER_FILE}" in script
    # Rungs AKS cannot buy (flex-start, capacity block) are never asked of the autoscaler.
    assert "--node-type h100-block= --node-type h100-flex=" in script
    assert script.endswith(kr.EXEC_RAY_START)
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        container = group["template"]["spec"]["containers"][0]
        assert container["command"] == ["/bin/bash", "-c", "--"]
        subprocess.run(["bash", "-n", "-c", container["args"][0]], check=True)  # parses


def test_a_deleted_worker_pod_drains_with_a_deadline_instead_of_ray_stop():
    """No preStop `ray stop` (it SIGTERMs the raylet: a plain loss); the drain timeout set,
    and a grace period longer than it."""
    spec = cluster_spec(_render(GPU, "raycluster", drain_timeout_s=45)["items"][1])
    for group in spec["workerGroupSpecs"]:
        pod = group["template"]["spec"]
        container = pod["containers"][0]
        assert "lifecycle" not in container
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] == "45"
        assert pod["terminationGracePeriodSeconds"] > 45
        assert container["args"] == [f"{kr.ULIMIT}; {kr.EXEC_RAY_START}"]


def test_kinds_need_their_inputs_and_the_cli_writes_both_documents(tmp_path):
    with pytest.raises(ValueError, match="--serve-config"):
        render(GPU, "kuberay", RenderOptions(kind="rayservice"))
    with pytest.raises(ValueError, match="--entrypoint"):
        render(GPU, "kuberay", RenderOptions(kind="rayjob"))
    ladder = ROOT / "examples" / "ladders" / "gpu-serving.yaml"
    run = CliRunner().invoke
    out = run(main, ["render", str(ladder), "--provider", "kuberay", "--kind", "rayservice",
                     "--serve-config", str(ROOT / "examples" / "serve_config.yaml")])
    assert out.exit_code == 0, out.output
    docs = list(yaml.safe_load_all(out.output))
    assert [d["kind"] for d in docs] == ["ConfigMap", "RayService"]
    for args in (["--provider", "aws", "--kind", "rayjob"],
                 ["--provider", "kuberay", "--kind", "rayjob"],
                 ["--provider", "kuberay", "--kind", "rayservice", "--serve-config",
                  str(ladder)]):
        out = run(main, ["render", str(ladder), *args])
        assert out.exit_code == 2 and "error:" in out.output, (args, out.output)
    text = render_yaml(GPU, "kuberay", RenderOptions(kind="rayjob", entrypoint="python x.py"))
    assert text.count("\n---\n") == 1 and "docker/Dockerfile" in text
