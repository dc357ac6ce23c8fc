"""The Kueue objects of fair queues: per team a ClusterQueue in the cluster's cohort and a
LocalQueue in the namespace, plus the two WorkloadPriorityClasses. Pure: dicts in, dicts out.

Each team's ClusterQueue is the profile's ClusterQueue (same flavors, in the capacity chain's
order, same admission checks) with the team's numbers (infra/team_quota.py), using the
fields of kueue v0.17.1 apis/kueue/v1beta2 (the version the blueprint's objects use):

- ``spec.cohortName`` (clusterqueue_types.go ClusterQueueSpec.CohortName): the cluster's
  name; ClusterQueues of one cohort "can borrow unused resources from each other".
- per TPU flavor ``nominalQuota`` (the team's chips) and ``borrowingLimit``
  (ResourceQuota.BorrowingLimit: "at a given time, Workloads in a ClusterQueue can consume
  a quantity of quota equal to nominalQuota+borrowingLimit"). No ``lendingLimit``: every
  idle chip may be lent.
- the other resources (cpu, memory, ephemeral-storage, the CPU pool's flavor) split evenly,
  so the cohort's sum is the single ClusterQueue's: they are not what teams compete for.
- ``spec.fairSharing.weight`` (fairsharing_types.go FairSharing.Weight). It takes effect
  when Kueue's Configuration has a ``fairSharing`` section (apis/config/v1beta2
  configuration_types.go Configuration.FairSharing); then the scheduler picks, among the
  cohort's heads, the ClusterQueue whose dominant resource share with the workload is the
  lowest (pkg/scheduler/fair_sharing_iterator.go runTournament; pkg/cache/scheduler/
  fair_sharing.go dominantResourceShare: borrowed above nominal, per 1000 of what the
  cohort can lend, divided by the weight).
- ``spec.preemption``: ``reclaimWithinCohort: Any`` (a team gets its guaranteed chips
  back from a borrower: a guarantee a borrower could hold for a day-long run would be none)
  and ``withinClusterQueue: LowerPriority`` (an interactive run preempts its own team's
  scheduled retrain). No ``borrowWithinCohort``: the types file allows it only with classic
  preemption, "__not__ with Fair Sharing" (BorrowWithinCohort).

The profile's own ``cluster-queue``/``user-queue`` stay, outside the cohort, for profiles in
no team: their runs keep today's queue.
"""

from __future__ import annotations

import copy
from typing import Any

from flows.backends.gke.infra.team_quota import TeamQuota
from flows.backends.gke.team_queues import PRIORITY_VALUES, team_queue_name

TPU = "google.com/tpu"
API = "kueue.x-k8s.io/v1beta2"


def _split(value: Any, parts: int) -> Any:
    """A template quantity (an integer, or ``NGi``) divided evenly, rounded down."""
    text = str(value)
    if text.endswith("Gi") and text[:-2].isdigit():
        return f"{int(text[:-2]) // parts}Gi"
    if text.isdigit():
        return int(text) // parts
    raise ValueError(f"cannot split the Kueue quantity {text!r} between {parts} teams")


def _weight(weight: float) -> str:
    return f"{weight:g}"


def team_cluster_queue(base: dict[str, Any], quota: TeamQuota, cohort: str,
                       teams: int) -> dict[str, Any]:
    """The team's ClusterQueue, made from the profile's ClusterQueue ``base``."""
    spec = copy.deepcopy(base["spec"])
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            tpu_flavor = any(r["name"] == TPU and str(r.get("nominalQuota")) != "0"
                             for r in flavor.get("resources") or [])
            for resource in flavor.get("resources") or []:
                if resource["name"] == TPU and tpu_flavor:
                    resource["nominalQuota"] = quota.nominal
                    resource["borrowingLimit"] = quota.borrowing_limit
                elif resource["name"] != TPU:
                    resource["nominalQuota"] = _split(resource["nominalQuota"], teams)
    spec["cohortName"] = cohort
    spec["fairSharing"] = {"weight": _weight(quota.weight)}
    spec["preemption"] = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    return {"apiVersion": base.get("apiVersion", API), "kind": "ClusterQueue",
            "metadata": {"name": team_queue_name(quota.team)}, "spec": spec}


def team_local_queue(team: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "LocalQueue",
            "metadata": {"namespace": namespace, "name": team_queue_name(team)},
            "spec": {"clusterQueue": team_queue_name(team)}}


def priority_classes() -> list[dict[str, Any]]:
    """The two WorkloadPriorityClasses (workloadpriorityclass_types.go: value, description)."""
    return [{"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": name},
             "value": value, "description": "tpurl: a run started " + (
                 "at a terminal (tpurl run)" if value == max(PRIORITY_VALUES.values())
                 else "by a deployment (schedule, automation, dispatcher)")}
            for name, value in PRIORITY_VALUES.items()]


def team_objects(base_cluster_queue: dict[str, Any], quotas: dict[str, TeamQuota],
                 cohort: str, namespace: str) -> list[dict[str, Any]]:
    """Every team's ClusterQueue and LocalQueue, then the priority classes ([] without
    teams)."""
    if not quotas:
        return []
    out = [team_cluster_queue(base_cluster_queue, q, cohort, len(quotas))
           for q in quotas.values()]
    out += [team_local_queue(name, namespace) for name in quotas]
    return out + priority_classes()
