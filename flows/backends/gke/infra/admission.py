"""Will Kueue admit, and can a node hold, every pod the pipeline submits? Pure functions.

Why before the first JobSet: a Workload whose pods request a resource the ClusterQueue does
not cover is never admitted (Kueue waits, it does not fail), and a pod larger than any node
of its pool is never scheduled (the cluster autoscaler does not scale up for it). Either way
the stage would wait out its queue budget. ``tpurl plan --check`` evaluates the very JobSets
the backend would submit against the live LocalQueue → ClusterQueue → ResourceFlavors and
node pools, and says which pod set fails, in Kueue's words, with the fix.

Derived from upstream:
- kubernetes-sigs/kueue pkg/scheduler/flavorassigner/flavorassigner.go: a requested resource
  no resource group covers → "resource X unavailable in ClusterQueue"; a flavor whose
  nodeLabels the pod's nodeSelector contradicts → "flavor F doesn't match node affinity";
  a pod set above the flavor's quota → "insufficient quota for X in flavor F, ..."; all
  prefixed "couldn't assign flavors to pod set P: " (Assignment.Message).
- kueue pkg/workload/resources.go UseLimitsAsMissingRequestsInPod (a missing request takes
  the limit) and pkg/workload/workload.go totalRequestsFromPodSets, which counts a pod set
  with Kubernetes' resourcehelpers.PodRequests (staging/src/k8s.io/component-helpers/
  resource/helpers.go): the containers' sum plus the sidecar init containers
  (restartPolicy Always), at least the largest init-time need.
- kueue JobSet integration: one pod set per replicatedJob, count = replicas × parallelism.
- kueue v0.17.1 flavorassigner.go findFlavorForPodSets/flavorSelector: a flavor matches when
  the pod's nodeSelector and required node affinity, cut to the label keys of the resource
  group's flavors (``LabelKeys``), select its nodeLabels; flavors are tried in order, one
  per resource group. pkg/podset/podset.go FromAssignment then copies the nodeLabels of
  every flavor assigned to the pod set into its pods' nodeSelector: a TPU pod given cpu or
  memory requests (a namespace LimitRange defaults them) whose cpu comes from a CPU-pool
  flavor is admitted and then pinned to the CPU pool as well as the TPU pool, so never
  scheduled (``placement_problems``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flows.config.gke_jobs import parse_quantity

NODEPOOL = "cloud.google.com/gke-nodepool"
quantity = parse_quantity


def show(resource: str, amount: float) -> str:
    if resource in ("memory", "ephemeral-storage"):
        return f"{amount / 2**30:g}Gi"
    return f"{amount:g}"


@dataclass(frozen=True)
class PodSet:
    stage: str
    name: str
    count: int
    requests: dict[str, float]  # one pod's
    node_selector: dict[str, str] = field(default_factory=dict)
    # required node affinity: ORed terms of ANDed (key, operator, values)
    affinity: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] = ()


def _container_requests(container: dict[str, Any]) -> dict[str, float]:
    res = container.get("resources") or {}
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return {name: quantity(value) for name, value in merged.items()}


def _add(into: dict[str, float], more: dict[str, float]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, 0.0) + value


def pod_requests(spec: dict[str, Any]) -> dict[str, float]:
    """Kubernetes' PodRequests (component-helpers resource/helpers.go): the containers' sum
    plus every sidecar (an init container with restartPolicy Always, which keeps running);
    at least what any init container needs while it runs, which for a regular one is its own
    request plus the sidecars started before it."""
    total: dict[str, float] = {}
    for container in spec.get("containers") or []:
        _add(total, _container_requests(container))
    sidecars: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for container in spec.get("initContainers") or []:
        own = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            need = dict(sidecars)
        else:
            need = dict(own)
            _add(need, sidecars)
        for name, value in need.items():
            init_peak[name] = max(init_peak.get(name, 0.0), value)
    for name, value in init_peak.items():
        total[name] = max(total.get(name, 0.0), value)
    return {k: v for k, v in total.items() if v > 0}


def pod_sets(stage: str, jobset: dict[str, Any]) -> list[PodSet]:
    out = []
    for job in jobset["spec"]["replicatedJobs"]:
        spec = job["template"]["spec"]
        pod = spec["template"]["spec"]
        count = int(job.get("replicas", 1)) * int(spec.get("parallelism", 1))
        out.append(PodSet(stage, job["name"], count, pod_requests(pod),
                          dict(pod.get("nodeSelector") or {}), _affinity(pod)))
    return out


def _affinity(pod: dict[str, Any]) -> tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...]:
    required = (((pod.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    return tuple(tuple((e["key"], e["operator"], tuple(e.get("values") or ()))
                       for e in term.get("matchExpressions") or [])
                 for term in required.get("nodeSelectorTerms") or [])


def _label_keys(group: dict[str, Any], flavors: dict[str, Any]) -> set[str]:
    """The resource group's LabelKeys: every nodeLabels key of its flavors."""
    return {k for entry in group.get("flavors") or [] for k in _node_labels(flavors, entry["name"])}


def _node_labels(flavors: dict[str, Any], name: str) -> dict[str, str]:
    return ((flavors.get(name) or {}).get("spec") or {}).get("nodeLabels") or {}


def _expression_holds(labels: dict[str, str], key: str, op: str, values: tuple[str, ...]) -> bool:
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False  # Gt/Lt on node labels: not used by the pipeline's pods


def selects(ps: PodSet, labels: dict[str, str], keys: set[str]) -> bool:
    """flavorSelector: the pod's node selection, cut to ``keys``, matches a node labelled
    ``labels``. An affinity term left empty by the cut matches any flavor (terms are ORed)."""
    if any(labels.get(k) != v for k, v in ps.node_selector.items() if k in keys):
        return False
    terms = [[e for e in term if e[0] in keys] for term in ps.affinity]
    if not terms or any(not term for term in terms):
        return True
    return any(all(_expression_holds(labels, *e) for e in term) for term in terms)


def reach(resource: dict[str, Any], in_cohort: bool) -> float:
    """The most of a resource one workload of the ClusterQueue can ever hold: kueue v0.17.1
    pkg/cache/scheduler/resource_node.go potentialAvailable, min(nominalQuota +
    borrowingLimit, the cohort's quota). Out of a cohort: the nominal quota. In a cohort
    without a borrowing limit the cohort's quota bounds it, which one ClusterQueue does not
    show: no bound here (infinite)."""
    nominal = quantity(resource.get("nominalQuota", 0))
    if not in_cohort:
        return nominal
    limit = resource.get("borrowingLimit")
    return float("inf") if limit is None else nominal + quantity(limit)


def _covering_group(cq: dict[str, Any], resource: str) -> dict[str, Any] | None:
    groups = (cq.get("spec") or {}).get("resourceGroups") or []
    return next((g for g in groups if resource in (g.get("coveredResources") or [])), None)


def _in_cohort(cq: dict[str, Any]) -> bool:
    return bool((cq.get("spec") or {}).get("cohortName"))


def _flavor_problem(ps: PodSet, group: dict[str, Any], flavors: dict[str, Any],
                    only: str | None = None, cohort: bool = False) -> str | None:
    """None if one flavor of the group (or the flavor ``only``) fits the pod set; else
    Kueue's reasons. The label keys are always the whole group's."""
    reasons = []
    keys = _label_keys(group, flavors)
    for entry in group.get("flavors") or []:
        name = entry["name"]
        if only is not None and name != only:
            continue
        if not selects(ps, _node_labels(flavors, name), keys):
            reasons.append(f"flavor {name} doesn't match node affinity")
            continue
        quota = {r["name"]: reach(r, cohort) for r in entry.get("resources") or []}
        short = [r for r in group.get("coveredResources") or []
                 if ps.requests.get(r, 0) * ps.count > quota.get(r, 0)]
        if not short:
            return None
        r = short[0]
        reasons.append(f"insufficient quota for {r} in flavor {name}, request "
                       f"({show(r, ps.requests[r] * ps.count)}) > maximum capacity "
                       f"({show(r, quota.get(r, 0))})")
    return ", ".join(reasons) or "no flavor in the resource group"


def assigned_flavor(ps: PodSet, group: dict[str, Any], flavors: dict[str, Any],
                    cohort: bool = False) -> str | None:
    """The first flavor of the group that matches the pod set and has its quota."""
    for entry in group.get("flavors") or []:
        if _flavor_problem(ps, group, flavors, only=entry["name"], cohort=cohort) is None:
            return str(entry["name"])
    return None


def placement_problems(sets: list[PodSet], cluster_queue: dict[str, Any],
                       flavors: dict[str, Any]) -> list[str]:
    """Pod sets Kueue admits but whose pods no node can take: the nodeLabels of every
    assigned flavor are copied into the pods' nodeSelector (podset.go FromAssignment), so
    flavors of different node pools pin one pod to both."""
    out = []
    for ps in sets:
        assigned: dict[str, str] = {}  # flavor → the resources it was assigned for
        for resource in sorted(ps.requests):
            group = _covering_group(cluster_queue, resource)
            if group is None or (name := assigned_flavor(
                    ps, group, flavors, _in_cohort(cluster_queue))) is None:
                break  # not admitted: admission_problems says why
            assigned[name] = ", ".join(filter(None, (assigned.get(name), resource)))
        selector = dict(ps.node_selector)
        clash = []
        for name in assigned:
            for key, value in _node_labels(flavors, name).items():
                if selector.get(key, value) != value:
                    clash.append(f"{key}={value} of {name}")
                selector.setdefault(key, value)
        accelerator = "cloud.google.com/gke-tpu-accelerator"
        cpu_pools = [n for n in assigned if NODEPOOL in (labels := _node_labels(flavors, n))
                     and accelerator not in labels]  # a flavor of a pool without TPUs
        if clash or (accelerator in ps.node_selector and cpu_pools):
            pinned = ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))
            out.append(f"{ps.stage}: pod set {ps.name} is admitted with flavors "
                       + ", ".join(f"{n} ({r})" for n, r in assigned.items())
                       + f", and Kueue puts every assigned flavor's node labels on its pods: "
                       f"{pinned}; no node carries them all, so it is never scheduled")
    return out


def admission_problems(sets: list[PodSet], cluster_queue: dict[str, Any],
                       flavors: dict[str, Any]) -> list[str]:
    """Why Kueue would not admit each pod set, in Kueue's message format ([] = admitted)."""
    out = []
    for ps in sets:
        for resource in sorted(ps.requests):
            group = _covering_group(cluster_queue, resource)
            reason: str | None
            if group is None:
                reason = f"resource {resource} unavailable in ClusterQueue"
            elif (reason := _flavor_problem(ps, group, flavors,
                                            cohort=_in_cohort(cluster_queue))) is None:
                continue
            out.append(f"{ps.stage}: couldn't assign flavors to pod set {ps.name}: {reason}")
            break  # Kueue reports the first resource that fails per pod set
    return out


# --- node capacity -------------------------------------------------------------------------

# GCE machine shapes the pipeline's CPU pods may land on: (vCPU, memory GiB).
MACHINES = {"n4-standard-64": (64, 256), "n4-highmem-64": (64, 512),
            "n4-standard-32": (32, 128), "n4-highmem-32": (32, 256),
            "n2-standard-8": (8, 32), "n2-standard-64": (64, 256)}
GKE_DEFAULT_DISK_GB = 100  # GKE's boot disk when a node pool sets none (cpu-np sets none)


def reserved_memory_gib(memory_gib: float) -> float:
    """GKE's memory reservation (kube-reserved): 25% of the first 4 GiB, 20% of the next 4,
    10% of the next 8, 6% of the next 112, 2% above 128 GiB; plus the 100 MiB eviction
    threshold (cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes)."""
    tiers = [(4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (float("inf"), 0.02)]
    left, reserved = memory_gib, 0.0
    for size, share in tiers:
        part = min(left, size)
        reserved += part * share
        left -= part
    return reserved + 100 / 1024


def reserved_cpu(cores: int) -> float:
    """GKE's CPU reservation: 6% of the first core, 1% of the next, 0.5% of the next 2,
    0.25% above 4 (same page)."""
    tiers = [(1, 0.06), (1, 0.01), (2, 0.005), (float("inf"), 0.0025)]
    left, reserved = float(cores), 0.0
    for size, share in tiers:
        part = min(left, size)
        reserved += part * share
        left -= part
    return reserved


def allocatable_ephemeral_gib(disk_gb: float) -> float:
    """GKE's ephemeral storage on the boot disk: the disk less min(50%, 6 GiB + 35%, 100 GiB)
    for the system and 10% eviction threshold (same page, "Ephemeral storage reservation")."""
    disk = disk_gb * 1e9 / 2**30
    system = min(0.5 * disk, 6 + 0.35 * disk, 100)
    return disk - system - 0.1 * disk


def pool_allocatable(pool: dict[str, Any]) -> dict[str, float] | None:
    """What one node of a GKE API node pool can give pods (None: machine type unknown)."""
    config = pool.get("config") or {}
    shape = MACHINES.get(config.get("machineType", ""))
    if shape is None:
        return None
    cores, memory_gib = shape
    disk = float(config.get("diskSizeGb") or GKE_DEFAULT_DISK_GB)
    return {"cpu": cores - reserved_cpu(cores),
            "memory": (memory_gib - reserved_memory_gib(memory_gib)) * 2**30,
            "ephemeral-storage": allocatable_ephemeral_gib(disk) * 2**30}


def capacity_problems(sets: list[PodSet], pools: list[dict[str, Any]]) -> list[str]:
    """Pod sets pinned to a node pool (nodeSelector gke-nodepool) that no node of it holds."""
    by_name = {p.get("name"): p for p in pools}
    out = []
    for ps in sets:
        pool_name = ps.node_selector.get(NODEPOOL)
        if pool_name is None:
            continue
        pool = by_name.get(pool_name)
        if pool is None:
            out.append(f"{ps.stage}/{ps.name}: node pool {pool_name} does not exist")
            continue
        node = pool_allocatable(pool)
        if node is None:
            continue  # reported by the caller as unknown
        machine = pool["config"]["machineType"]
        disk = (pool.get("config") or {}).get("diskSizeGb") or GKE_DEFAULT_DISK_GB
        for resource, amount in sorted(ps.requests.items()):
            if resource in node and amount > node[resource]:
                out.append(f"{ps.stage}/{ps.name} requests {resource} {show(resource, amount)}; "
                           f"a {pool_name} node ({machine}, {disk} GB boot disk) has "
                           f"{show(resource, node[resource])} allocatable")
    return out
