"""Why a team's JobSet waits behind another team's: the cohort's borrowers, by chips. Pure.

Kueue says only "insufficient unused quota for google.com/tpu in flavor F, N more needed"
(kueue v0.17.1 pkg/scheduler/flavorassigner/flavorassigner.go fitsResourceQuota) in the
Workload's QuotaReserved=False condition, reason Pending (pkg/scheduler/scheduler.go). The
quota it lacks is held by another ClusterQueue of the cohort above its own nominal quota,
which each ClusterQueue reports in ``status.flavorsUsage[].resources[].borrowed`` ("the used
quota that is over the nominalQuota", apis/kueue/v1beta2/clusterqueue_types.go
ResourceUsage.Borrowed). So the watch can say who, and how much: "waiting: team-b borrows
16 of 32 chips", 32 being the cohort's chips of that flavor (the sum of its ClusterQueues'
nominalQuota, ResourceQuota.NominalQuota: "the sum ... defines the maximum quantity that
can be allocated by a ClusterQueue in the cohort").
"""

from __future__ import annotations

import re

from flows.common.api_objects import Obj
from flows.config.gke_jobs import parse_quantity

TPU = "google.com/tpu"
_SHORT = re.compile(r"insufficient unused quota for google\.com/tpu in flavor (?P<flavor>\S+?),")


def _pending_message(workload: Obj | None) -> str:
    conditions = ((workload or {}).get("status") or {}).get("conditions") or []
    reserved = next((c for c in conditions if c.get("type") == "QuotaReserved"), None)
    if not reserved or reserved.get("status") != "False":
        return ""
    return str(reserved.get("message") or "")


def _tpu(entries: list[Obj], flavor: str, key: str) -> int:
    for entry in entries:
        if entry.get("name") != flavor:
            continue
        for resource in entry.get("resources") or []:
            if resource.get("name") == TPU:
                return int(parse_quantity(resource.get(key) or 0))
    return 0


def _nominal(cq: Obj, flavor: str) -> int:
    groups = (cq.get("spec") or {}).get("resourceGroups") or []
    return sum(_tpu(g.get("flavors") or [], flavor, "nominalQuota") for g in groups)


def cohort_wait(workload: Obj | None, own_queue: str, cluster_queues: list[Obj]) -> str | None:
    """"waiting: team-b borrows 16 of 32 chips" when ``workload`` (of ClusterQueue
    ``own_queue``) lacks TPU quota that other ClusterQueues of its cohort borrow; else None."""
    found = _SHORT.search(_pending_message(workload))
    by_name = {str((cq.get("metadata") or {}).get("name")): cq for cq in cluster_queues}
    own = by_name.get(own_queue)
    cohort = ((own or {}).get("spec") or {}).get("cohortName")
    if not found or not cohort:
        return None
    flavor = found["flavor"]
    members = [cq for cq in cluster_queues if (cq.get("spec") or {}).get("cohortName") == cohort]
    total = sum(_nominal(cq, flavor) for cq in members)
    borrowers = [(name, borrowed) for cq in members
                 if (name := str(cq["metadata"]["name"])) != own_queue
                 and (borrowed := _tpu(((cq.get("status") or {}).get("flavorsUsage") or []),
                                       flavor, "borrowed")) > 0]
    if not borrowers:
        return None
    return "waiting: " + "; ".join(f"{name} borrows {chips} of {total} chips"
                                   for name, chips in sorted(borrowers, key=lambda b: -b[1]))
