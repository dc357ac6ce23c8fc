"""What GKE puts on a TPU node, and whether kube-scheduler lets a pod onto it, for the fake
TPU pools (nodepools.py, node_groups.py).

Labels, decided by the pool's machine type and slice topology, never by what a pod asks for:
- ``cloud.google.com/gke-tpu-accelerator``: by the machine family, as Cluster Toolkit's
  modules/internal/tpu-definition/main.tf (GoogleCloudPlatform/cluster-toolkit 1047080)
  ``tpu_accelerator_map`` maps it: ct4p tpu-v4-podslice, ct5lp tpu-v5-lite-podslice, ct5p
  tpu-v5p-slice, ct6e tpu-v6e-slice, tpu7x tpu7x ("The label value for the TPU accelerator
  type", its output ``tpu_accelerator_type``); a machine type of no family there is no TPU.
- ``cloud.google.com/gke-tpu-topology``: the pool's TPU topology (node_pool placement_policy
  tpu_topology, or a tpu7x workload policy's accelerator_topology). GKE's TPU docs select
  TPU nodes by these two labels, as XPK does (AI-Hypercomputer/xpk 367c838
  src/xpk/core/workload.py, src/xpk/core/ray.py).
- ``cloud.google.com/gke-nodepool`` and ``topology.kubernetes.io/zone`` on every node.
- by capacity mode (``MODE_LABELS``): ``cloud.google.com/gke-spot: "true"`` on Spot VM nodes
  and ``cloud.google.com/gke-flex-start: "true"`` on flex-start nodes, which GKE sets (its
  Spot VMs and flex-start pages select them by these); ``cloud.google.com/gke-queued: "true"``
  on queued-provisioning nodes, which Cluster Toolkit's gke-node-pool adds to
  kubernetes_labels (main.tf locals, "the label is required for workloads using
  nodeSelectors").
Taint: ``google.com/tpu=present:NoSchedule`` on every TPU node (tpu-definition main.tf
``tpu_taint``).

Fit: kube-scheduler's NodeAffinity filter (every nodeSelector key equal on the node) and
TaintToleration filter (every NoSchedule/NoExecute taint tolerated), kubernetes
pkg/scheduler/framework/plugins/nodeaffinity and tainttoleration; the cluster autoscaler runs
the same predicates on a node group's template node before it scales the group up.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
TPU_SELECTOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
ZONE_LABEL = "topology.kubernetes.io/zone"
TPU_TAINT = {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}
MODE_LABELS = {"spot": {"cloud.google.com/gke-spot": "true"},
               "flex-start": {"cloud.google.com/gke-flex-start": "true"},
               "queued": {"cloud.google.com/gke-queued": "true"}}
ACCELERATOR_BY_FAMILY = {"ct4p": "tpu-v4-podslice", "ct5lp": "tpu-v5-lite-podslice",
                         "ct5p": "tpu-v5p-slice", "ct6e": "tpu-v6e-slice", "tpu7x": "tpu7x"}


def accelerator_of(machine_type: str) -> str:
    """tpu-definition's ``tpu_accelerator_type``: the label of the machine's family (the part
    before the first "-")."""
    family = machine_type.split("-", 1)[0]
    if family not in ACCELERATOR_BY_FAMILY:
        raise ValueError(f"{machine_type!r} is no TPU machine type Cluster Toolkit knows")
    return ACCELERATOR_BY_FAMILY[family]


def gke_tpu_labels(machine_type: str, topology: str, pool: str, zone: str) -> dict[str, str]:
    """The labels GKE sets on a node of a TPU pool of ``machine_type`` and ``topology``."""
    return {TPU_SELECTOR: accelerator_of(machine_type), TOPOLOGY_LABEL: topology,
            NODEPOOL_LABEL: pool, ZONE_LABEL: zone}


def fits(pod: Obj, labels: dict[str, str], taints: list[Obj]) -> bool:
    """NodeAffinity on the pod's nodeSelector and TaintToleration, on a node with ``labels``
    and ``taints``."""
    spec = pod.get("spec") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    tolerations = spec.get("tolerations") or []
    return all(tolerated(taint, tolerations) for taint in taints
               if taint.get("effect") in ("NoSchedule", "NoExecute"))


def tolerated(taint: Obj, tolerations: list[Obj]) -> bool:
    """k8s.io/api core/v1 toleration.go ToleratesTaint: same key (or empty key with Exists),
    same effect (or empty), Exists or an equal value."""
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("key") and tol["key"] != taint.get("key"):
            continue
        if not tol.get("key") and tol.get("operator") != "Exists":
            continue
        if tol.get("operator") == "Exists" or tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def mismatch_message(pod: Obj, labels: dict[str, str]) -> str:
    """Which of the pod's nodeSelector entries the node lacks, for a test's failure text."""
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return ", ".join(f"{k}={v} (node: {labels.get(k)})" for k, v in selector.items()
                     if labels.get(k) != v)
