"""Each provider's fields for a rung's capacity type (spot, reservation, flex-start, block).

Every field name here is cited in ``docs/cluster-configs.md`` to the provider's reference.
A mechanism a provider does not have is not approximated: the rung gets no node type
(:func:`left_out` says why) and the hook never asks for it there.
"""

from __future__ import annotations

import re
from typing import Any

from ray_ladder.core.capacity_type import MAX_RUN_S, CapacitySpec
from ray_ladder.core.spec import Rung

#: Render targets: the ray up clouds, the GKE ComputeClass, and KubeRay's node-label flavors.
KUBE_FLAVORS = ("karpenter", "gke", "aks")
_CLOUD = {"aws": "aws", "gcp": "gcp", "azure": "azure", "gke-computeclass": "gcp",
          "karpenter": "aws", "gke": "gcp", "aks": "azure"}
_NO_QUEUE = "{cloud} sells no queued (flex-start) capacity; flex-start is GCP's"
_NO_BLOCK = "Azure sells no capacity blocks (bought windows)"
LEFT_OUT: dict[str, dict[str, str]] = {
    "aws": {"flex-start": _NO_QUEUE.format(cloud="AWS")},
    "karpenter": {"flex-start": _NO_QUEUE.format(cloud="AWS")},
    "azure": {"flex-start": _NO_QUEUE.format(cloud="Azure"), "capacity-block": _NO_BLOCK,
              "reservation": "Ray's Azure node provider deploys its own ARM template "
              "(azure-vm-template.json), which has no capacityReservation property; use "
              "`--provider kuberay --kube aks` (AKS node pools take a capacity reservation "
              "group)"},
    "aks": {"flex-start": _NO_QUEUE.format(cloud="Azure"), "capacity-block": _NO_BLOCK},
}
#: GCE keeps a flex-start request for 90 s to 2 h (instances.insert requestValidForDuration).
GCE_WAIT_S = (90.0, 7200.0)
_GCP_SHARED = re.compile(r"^projects/(?P<project>[^/]+)/reservations/(?P<name>[^/]+)$")
_GCP_AFFINITY_KEY = "compute.googleapis.com/reservation-name"


def capacity_of(rung: Rung) -> CapacitySpec:
    """The rung's capacity (on-demand when it says none)."""
    return rung.capacity or CapacitySpec()


def left_out(target: str, rung: Rung) -> str | None:
    """Why ``target`` gets no node type for ``rung`` (``None``: it gets one).

    Example:
        >>> left_out("aws", Rung(name="f", num_gpus=1, capacity={"type": "flex-start"}))
        "AWS sells no queued (flex-start) capacity; flex-start is GCP's"
    """
    return LEFT_OUT.get(target, {}).get(capacity_of(rung).type)


def reservation_id(target: str, rung: Rung) -> str:
    """The reservation ``rung`` launches into on ``target``'s cloud, checked for its form.

    Raises:
        ValueError: the ladder names none for that cloud, or one of the wrong form.
    """
    cloud = _CLOUD[target]
    cap = capacity_of(rung)
    rid = cap.reservation_for(cloud)
    if not rid:
        raise ValueError(f"rung {rung.name!r} launches into a reservation but names none for "
                         f"{cloud}; add capacity.reservation.{cloud}")
    if cloud == "aws" and not rid.startswith(("cr-", "arn:")):
        raise ValueError(f"rung {rung.name!r}: an AWS reservation is a cr-... id or a "
                         f"Capacity Reservation group ARN, got {rid!r}; set "
                         "capacity.reservation.aws")
    if cloud == "azure" and not rid.startswith("/subscriptions/"):
        raise ValueError(f"rung {rung.name!r}: an Azure capacity reservation group is a "
                         f"resource id (/subscriptions/...), got {rid!r}; set "
                         "capacity.reservation.azure")
    return rid


def aws_fields(rung: Rung) -> dict[str, Any]:
    """EC2 RunInstances fields: ``CapacityReservationSpecification`` and the market type."""
    cap = capacity_of(rung)
    if cap.type not in ("reservation", "capacity-block"):
        return {}
    rid = reservation_id("aws", rung)
    target = ({"CapacityReservationResourceGroupArn": rid} if rid.startswith("arn:")
              else {"CapacityReservationId": rid})
    out: dict[str, Any] = {"CapacityReservationSpecification": {
        "CapacityReservationTarget": target}}
    if cap.type == "capacity-block":
        out["InstanceMarketOptions"] = {"MarketType": "capacity-block"}
    return out


def gcp_fields(rung: Rung) -> tuple[dict[str, Any], dict[str, Any]]:
    """GCE instance fields: ``(top-level fields, scheduling fields)``.

    Raises:
        ValueError: a flex-start wait outside what GCE accepts (90 s to 2 h).
    """
    cap = capacity_of(rung)
    top: dict[str, Any] = {}
    scheduling: dict[str, Any] = {}
    if cap.type in ("reservation", "capacity-block"):
        top["reservationAffinity"] = {"consumeReservationType": "SPECIFIC_RESERVATION",
                                      "key": _GCP_AFFINITY_KEY,
                                      "values": [reservation_id("gcp", rung)]}
    if cap.type == "capacity-block":  # a calendar-mode reservation: VMs end with it
        scheduling.update(provisioningModel="RESERVATION_BOUND",
                          instanceTerminationAction="DELETE")
    if cap.type == "flex-start":
        low, high = GCE_WAIT_S
        if not low <= cap.wait_s <= high:
            raise ValueError(f"rung {rung.name!r}: GCE keeps a flex-start request "
                             f"{low:g} s to {high:g} s, capacity.max_wait_s is {cap.wait_s:g}; "
                             "set it in that range")
        scheduling.update(provisioningModel="FLEX_START", instanceTerminationAction="DELETE",
                          maxRunDuration={"seconds": int(cap.max_run_s or MAX_RUN_S)})
        top["params"] = {"requestValidForDuration": {"seconds": int(cap.wait_s)}}
        top["reservationAffinity"] = {"consumeReservationType": "NO_RESERVATION"}
    return top, scheduling


def azure_params(rung: Rung, spot: bool) -> dict[str, Any]:
    """Ray's Azure ARM template parameters: ``priority``, ``evictionPolicy``, ``billingProfile``."""
    if not spot:
        return {}
    # maxPrice -1: pay up to the on-demand price, evicted for capacity only.
    return {"priority": "Spot", "evictionPolicy": "Delete", "billingProfile": {"maxPrice": -1}}


def _gcp_reservation(rung: Rung) -> dict[str, str]:
    rid = reservation_id("gcp", rung)
    m = _GCP_SHARED.match(rid)
    return {"name": m["name"], "project": m["project"]} if m else {"name": rid}


def computeclass_fields(rung: Rung) -> dict[str, Any]:
    """A GKE ComputeClass priority rule's ``reservations`` / ``flexStart`` fields."""
    cap = capacity_of(rung)
    if cap.type in ("reservation", "capacity-block"):
        return {"reservations": {"affinity": "Specific", "specific": [_gcp_reservation(rung)]}}
    if cap.type == "flex-start":
        out: dict[str, Any] = {"flexStart": {"enabled": True}}
        if cap.max_run_s:
            out["maxRunDurationSeconds"] = int(cap.max_run_s)
        return out
    return {}


def aks_pool(rung: Rung) -> str:
    """The AKS node pool name of a reserved rung (lowercase letters and digits, at most 12).

    Example:
        >>> aks_pool(Rung(name="h100-reserved", num_gpus=1))
        'h100reserved'
    """
    return (re.sub(r"[^a-z0-9]", "", rung.name) or "ladder")[:12]


def kube_selector(flavor: str, rung: Rung, spot: bool
                  ) -> tuple[dict[str, str], list[dict[str, str]]]:
    """KubeRay worker group ``nodeSelector`` entries and tolerations for ``rung``'s capacity."""
    cap = capacity_of(rung)
    sel: dict[str, str] = {}
    tol: list[dict[str, str]] = []
    reserved = cap.type in ("reservation", "capacity-block")
    if flavor == "karpenter":
        if spot:
            sel["karpenter.sh/capacity-type"] = "spot"
        elif reserved:
            sel["karpenter.sh/capacity-type"] = "reserved"
            rid = reservation_id("karpenter", rung)
            if rid.startswith("cr-"):
                sel["karpenter.k8s.aws/capacity-reservation-id"] = rid
            if cap.type == "capacity-block":
                sel["karpenter.k8s.aws/capacity-reservation-type"] = "capacity-block"
        elif rung.capacity is not None:
            sel["karpenter.sh/capacity-type"] = "on-demand"
    elif flavor == "gke":
        if spot:
            sel["cloud.google.com/gke-spot"] = "true"
        elif reserved:
            res = _gcp_reservation(rung)
            sel["cloud.google.com/reservation-name"] = res["name"]
            sel["cloud.google.com/reservation-affinity"] = "specific"
            if "project" in res:
                sel["cloud.google.com/reservation-project"] = res["project"]
        elif cap.type == "flex-start":
            sel["cloud.google.com/gke-flex-start"] = "true"
    elif flavor == "aks":
        if spot:
            sel["kubernetes.azure.com/scalesetpriority"] = "spot"
            tol.append({"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal",
                        "value": "spot", "effect": "NoSchedule"})
        elif reserved:
            reservation_id("aks", rung)  # checked: the pool is created with it
            sel["kubernetes.azure.com/agentpool"] = aks_pool(rung)
    else:
        raise ValueError(f"unknown Kubernetes flavor {flavor!r}; valid: {list(KUBE_FLAVORS)}")
    return sel, tol
