"""`ray-ladder render` of a ladder with all four capacity mechanisms, field by field."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_ladder import Ladder, load_ladder
from ray_ladder.autoscale.render import RenderOptions, render, render_yaml
from ray_ladder.cli import main

EXAMPLE = Path(__file__).parents[2] / "examples" / "ladders" / "capacity.yaml"
LADDER = load_ladder(EXAMPLE)
H100 = ["h100-reserved", "h100-block", "h100-flex", "h100-spot"]


def node_configs(provider: str) -> dict[str, dict]:
    types = render(LADDER, provider)["available_node_types"]
    return {k: v["node_config"] for k, v in types.items() if k != "ray.head.default"}


@pytest.mark.parametrize("provider", ["aws", "gcp", "azure"])
def test_every_ray_up_output_passes_rays_validator(provider):
    from ray.autoscaler._private.util import prepare_config

    from ray_ladder.cluster.ray_private import validate_cluster_config

    config = render(LADDER, provider)
    validate_cluster_config(config)
    validate_cluster_config(prepare_config(config))


def test_aws_reservation_block_and_spot_market_options():
    nc = node_configs("aws")
    assert list(nc) == ["h100-reserved", "h100-block", "h100-spot", "a100", "cpu"]  # no flex
    assert nc["h100-reserved"]["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}}
    assert "InstanceMarketOptions" not in nc["h100-reserved"]
    assert nc["h100-block"]["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert nc["h100-block"]["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0fedcba9876543210"}}
    assert nc["h100-spot"]["InstanceMarketOptions"] == {"MarketType": "spot"}
    assert "CapacityReservationSpecification" not in nc["h100-spot"]
    assert all(nc[r]["InstanceType"] == "p5.48xlarge" for r in ("h100-reserved", "h100-block"))
    assert set(nc["a100"]) == {"InstanceType", "ImageId", "BlockDeviceMappings"}
    head = " ".join(render(LADDER, "aws")["head_start_ray_commands"])
    assert "--node-type h100-flex=" in head  # the hook never asks AWS for it


def test_aws_reservation_group_arn_and_bad_ids():
    def one(reservation: str) -> Ladder:
        return Ladder.from_dict({"name": "r", "rungs": [
            {"name": "h100", "resources": {"ladder/h100": 1},
             "capacity": {"type": "reservation", "reservation": reservation}}]})

    arn = "arn:aws:resource-groups:us-west-2:123456789012:group/h100"
    nc = render(one(arn), "aws")["available_node_types"]["h100"]["node_config"]
    assert nc["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationResourceGroupArn": arn}}
    with pytest.raises(ValueError, match="cr-... id or a Capacity Reservation group ARN"):
        render(one("h100-res"), "aws")
    with pytest.raises(ValueError, match="resource id"):
        render(one("h100-res"), "kuberay", RenderOptions(kube="aks"))


def test_gcp_reservation_affinity_calendar_block_flex_start_and_spot():
    nc = node_configs("gcp")
    assert list(nc) == ["h100-reserved", "h100-block", "h100-flex", "h100-spot", "a100", "cpu"]
    specific = {"consumeReservationType": "SPECIFIC_RESERVATION",
                "key": "compute.googleapis.com/reservation-name"}
    assert nc["h100-reserved"]["reservationAffinity"] == {**specific, "values": ["h100-reserved"]}
    assert nc["h100-reserved"]["scheduling"] == [{"onHostMaintenance": "TERMINATE"}]
    assert nc["h100-block"]["reservationAffinity"] == {**specific, "values": ["h100-calendar"]}
    assert nc["h100-block"]["scheduling"] == [{
        "onHostMaintenance": "TERMINATE", "provisioningModel": "RESERVATION_BOUND",
        "instanceTerminationAction": "DELETE"}]
    flex = nc["h100-flex"]
    assert flex["scheduling"] == [{
        "onHostMaintenance": "TERMINATE", "provisioningModel": "FLEX_START",
        "instanceTerminationAction": "DELETE", "maxRunDuration": {"seconds": 604800}}]
    assert flex["params"] == {"requestValidForDuration": {"seconds": 7200}}
    assert flex["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert nc["h100-spot"]["scheduling"] == [{"onHostMaintenance": "TERMINATE",
                                               "preemptible": True}]
    assert "reservationAffinity" not in nc["a100"] and "params" not in nc["a100"]


def test_gcp_flex_start_wait_must_fit_gce_and_shared_reservations_keep_their_project():
    long_wait = Ladder.from_dict({"name": "f", "rungs": [
        {"name": "h100-flex", "resources": {"ladder/h100-flex": 1},
         "capacity": {"type": "flex-start", "max_wait_s": 86400}}]})
    with pytest.raises(ValueError, match="90 s to 7200 s, capacity.max_wait_s is 86400"):
        render(long_wait, "gcp")
    shared = Ladder.from_dict({"name": "s", "rungs": [
        {"name": "h100", "resources": {"ladder/h100": 1},
         "capacity": {"type": "reservation", "reservation": "projects/p1/reservations/r1"}}]})
    cc = render(shared, "gke-computeclass")["spec"]["priorities"][0]
    assert cc["reservations"] == {"affinity": "Specific",
                                  "specific": [{"name": "r1", "project": "p1"}]}
    pod = render(shared, "kuberay", RenderOptions(kube="gke"))["items"][1]["spec"][
        "workerGroupSpecs"][0]
    assert pod["template"]["spec"]["nodeSelector"]["cloud.google.com/reservation-project"] == "p1"
    with pytest.raises(ValueError, match="names none for gcp"):
        render(Ladder.from_dict({"name": "a", "rungs": [
            {"name": "h100", "resources": {"ladder/h100": 1},
             "capacity": {"type": "reservation", "reservation": {"aws": "cr-1"}}}]}), "gcp")


def test_azure_spot_priority_and_no_reservation_through_ray_up():
    nc = node_configs("azure")
    assert list(nc) == ["h100-spot", "a100", "cpu"]
    params = nc["h100-spot"]["azure_arm_parameters"]
    assert (params["priority"], params["evictionPolicy"], params["billingProfile"]) == (
        "Spot", "Delete", {"maxPrice": -1})
    assert "priority" not in nc["a100"]["azure_arm_parameters"]
    text = render_yaml(LADDER, "azure")
    assert "h100-reserved (reservation): Ray's Azure node provider deploys its own ARM" in text
    assert "kuberay --kube aks" in text  # where Azure reservations can be had
    head = " ".join(render(LADDER, "azure")["head_start_ray_commands"])
    assert all(f"--node-type {r}=" in head for r in ("h100-reserved", "h100-block", "h100-flex"))


def test_gke_computeclass_priorities_with_reservations_and_flex_start():
    prios = render(LADDER, "gke-computeclass")["spec"]["priorities"]
    assert len(prios) == 6
    assert prios[0]["reservations"] == {"affinity": "Specific",
                                        "specific": [{"name": "h100-reserved"}]}
    assert prios[1]["reservations"] == {"affinity": "Specific",
                                        "specific": [{"name": "h100-calendar"}]}
    assert prios[2]["flexStart"] == {"enabled": True}
    assert prios[2]["maxRunDurationSeconds"] == 604800
    assert [p["spot"] for p in prios] == [False, False, False, True, False, False]
    assert all("reservations" not in p and "flexStart" not in p for p in prios[3:])
    assert all(p["machineType"] == "a3-highgpu-8g" for p in prios[:4])


def groups(kube: str) -> dict[str, dict]:
    doc = render(LADDER, "kuberay", RenderOptions(kube=kube))["items"][1]
    return {g["groupName"]: g["template"]["spec"] for g in doc["spec"]["workerGroupSpecs"]}


def test_kuberay_karpenter_selectors():
    g = groups("karpenter")
    assert list(g) == ["h100-reserved", "h100-block", "h100-spot", "a100", "cpu"]
    assert g["h100-reserved"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "karpenter.sh/capacity-type": "reserved",
        "karpenter.k8s.aws/capacity-reservation-id": "cr-0123456789abcdef0"}
    assert g["h100-block"]["nodeSelector"]["karpenter.k8s.aws/capacity-reservation-type"] == \
        "capacity-block"
    assert g["h100-spot"]["nodeSelector"]["karpenter.sh/capacity-type"] == "spot"
    assert "karpenter.sh/capacity-type" not in g["a100"]["nodeSelector"]


def test_kuberay_gke_selectors():
    g = groups("gke")
    assert list(g) == H100 + ["a100", "cpu"]
    assert g["h100-reserved"]["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
        "cloud.google.com/reservation-name": "h100-reserved",
        "cloud.google.com/reservation-affinity": "specific"}
    assert g["h100-block"]["nodeSelector"]["cloud.google.com/reservation-name"] == \
        "h100-calendar"
    assert g["h100-flex"]["nodeSelector"]["cloud.google.com/gke-flex-start"] == "true"
    assert g["h100-spot"]["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert g["a100"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-a100"}


def test_kuberay_aks_selectors_and_the_node_pool_to_create():
    g = groups("aks")
    assert list(g) == ["h100-reserved", "h100-spot", "a100", "cpu"]
    assert g["h100-reserved"]["nodeSelector"]["kubernetes.azure.com/agentpool"] == "h100reserved"
    spot = g["h100-spot"]
    assert spot["nodeSelector"]["kubernetes.azure.com/scalesetpriority"] == "spot"
    assert {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal",
            "value": "spot", "effect": "NoSchedule"} in spot["tolerations"]
    text = render_yaml(LADDER, "kuberay", RenderOptions(kube="aks"))
    assert "az aks nodepool add --cluster-name CLUSTER --resource-group RG --name h100reserved " \
           "--node-vm-size Standard_ND96isr_H100_v5" in text
    assert "--crg-id /subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/gpu/" \
           in text


def test_cli_render_kube_flag_and_unknown_flavor():
    out = CliRunner().invoke(main, ["render", str(EXAMPLE), "--provider", "kuberay",
                                    "--kube", "gke"])
    assert out.exit_code == 0, out.output
    assert "cloud.google.com/gke-flex-start" in out.stdout
    bad = CliRunner().invoke(main, ["render", str(EXAMPLE), "--provider", "kuberay",
                                    "--kube", "openshift"])
    assert bad.exit_code == 2
    with pytest.raises(ValueError, match="unknown --kube"):
        render(LADDER, "kuberay", RenderOptions(kube="openshift"))


def test_a_spot_capacity_type_renders_like_the_spot_tag():
    tagged = Ladder.from_dict({"name": "t", "rungs": [
        {"name": "h100-spot", "resources": {"ladder/h100-spot": 1}, "tags": {"spot": "true"}}]})
    typed = Ladder.from_dict({"name": "t", "rungs": [
        {"name": "h100-spot", "resources": {"ladder/h100-spot": 1},
         "capacity": {"type": "spot"}}]})
    for provider in ("aws", "gcp", "azure", "gke-computeclass"):
        assert render(tagged, provider) == render(typed, provider)
