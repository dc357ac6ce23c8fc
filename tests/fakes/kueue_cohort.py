"""Kueue's admission in one cohort of ClusterQueues, for one resource (TPU chips) of one
flavor: the part of Kueue's decision fair queues rely on, copied from kueue v0.17.1.

- How much a ClusterQueue can take now: pkg/cache/scheduler/resource_node.go ``available``
  (no lendingLimit, so a ClusterQueue's whole usage is stored in the cohort:
  min(nominal - usage + borrowingLimit, cohort quota - cohort usage)); the most it could
  ever take: ``potentialAvailable`` (min(nominal + borrowingLimit, cohort quota)).
- Fit: pkg/scheduler/flavorassigner/flavorassigner.go ``fitsResourceQuota``: above the
  potential: "insufficient quota ... > maximum capacity" (never admitted); above what is
  available: "insufficient unused quota for %s in flavor %s, %s more needed" (waits); the
  scheduler writes it as the Workload's QuotaReserved=False reason Pending (pkg/scheduler/
  scheduler.go, UnsetQuotaReservationWithCondition "Pending"), wrapped as "couldn't assign
  flavors to pod set %s: %s" (flavorassigner.go Assignment.Message).
- Order with fair sharing: pkg/scheduler/fair_sharing_iterator.go: each ClusterQueue offers
  its head; ``entryComparer.less`` puts a head that does not borrow first
  (FairSharingPrioritizeNonBorrowing, on by default since 0.17, pkg/features/
  kube_features.go), then the lower dominant resource share *with* the head's request
  (``computeDRS``; pkg/cache/scheduler/fair_sharing.go ``dominantResourceShare``: borrowed
  × 1000 / the cohort's lendable chips, divided by the weight), then higher priority, then
  the older. Each pop recomputes the shares with what this cycle admitted so far, and a head
  that no longer fits is skipped (scheduler.go ``fits``).
- A head that does not fit leaves the heap for this cycle and the next one in its queue
  (BestEffortFIFO, pkg/cache/queue/cluster_queue.go) gets its turn; a ClusterQueue's heap
  is ordered by priority, then creation (pkg/workload/ordering).
- On admission: QuotaReserved=True ("Quota reserved in ClusterQueue %s") then Admitted=True
  (no admission checks: pkg/workload/admissionchecks.go SyncAdmittedCondition); the
  ClusterQueue's status.flavorsUsage gets total and borrowed (apis/kueue/v1beta2/
  clusterqueue_types.go ResourceUsage: "borrowed ... the used quota that is over the
  nominalQuota").

Not modelled: preemption (reclaimWithinCohort), lending limits, nested cohorts, several
flavors or resources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TPU = "google.com/tpu"


@dataclass
class Queue:
    name: str
    nominal: int
    borrowing_limit: int | None
    weight: float = 1.0
    usage: int = 0


@dataclass
class Pending:
    name: str
    queue: str
    chips: int
    priority: int = 0
    order: int = 0
    conditions: list[dict[str, str]] = field(default_factory=list)
    admitted: bool = False


@dataclass
class Cohort:
    flavor: str
    queues: dict[str, Queue]
    workloads: list[Pending] = field(default_factory=list)
    admissions: list[str] = field(default_factory=list)  # workload names, in order

    @classmethod
    def from_cluster_queues(cls, objects: list[dict[str, Any]], flavor: str) -> Cohort:
        """The cohort Kueue builds from ClusterQueue objects as applied (the rendered
        documents, not the numbers behind them): each queue's ``google.com/tpu`` quota in
        ``flavor`` (clusterqueue_types.go ResourceQuota: nominalQuota, borrowingLimit unset
        meaning no limit) and its ``spec.fairSharing.weight`` (unset: 1)."""
        queues: dict[str, Queue] = {}
        for cq in objects:
            if cq.get("kind") != "ClusterQueue":
                continue
            spec, name = cq["spec"], cq["metadata"]["name"]
            for group in spec.get("resourceGroups") or []:
                for fq in group.get("flavors") or []:
                    if fq["name"] != flavor:
                        continue
                    for resource in fq.get("resources") or []:
                        if resource["name"] == TPU:
                            limit = resource.get("borrowingLimit")
                            weight = (spec.get("fairSharing") or {}).get("weight", 1)
                            queues[name] = Queue(name, int(resource["nominalQuota"]),
                                                 None if limit is None else int(limit),
                                                 float(weight))
        return cls(flavor, queues)

    @property
    def quota(self) -> int:
        return sum(q.nominal for q in self.queues.values())

    @property
    def used(self) -> int:
        return sum(q.usage for q in self.queues.values())

    def available(self, q: Queue) -> int:
        """resource_node.go available (clamped at 0 as ClusterQueueSnapshot.Available)."""
        parent = self.quota - self.used
        if q.borrowing_limit is not None:
            parent = min(q.nominal - q.usage + q.borrowing_limit, parent)
        return max(0, parent)

    def potential(self, q: Queue) -> int:
        """resource_node.go potentialAvailable."""
        most = self.quota
        if q.borrowing_limit is not None:
            most = min(q.nominal + q.borrowing_limit, most)
        return most

    def share(self, q: Queue, extra: int) -> tuple[bool, float]:
        """(borrowing, weighted share) with ``extra`` chips added: fair_sharing.go."""
        borrowed = q.usage + extra - q.nominal
        if borrowed <= 0:
            return False, 0.0
        return True, borrowed * 1000.0 / self.potential_of_cohort() / q.weight

    def potential_of_cohort(self) -> int:
        return self.quota  # calculateLendable: potentialAvailable of the root cohort

    def submit(self, name: str, queue: str, chips: int, priority: int = 0) -> Pending:
        wl = Pending(name, queue, chips, priority, len(self.workloads))
        self.workloads.append(wl)
        return wl

    def finish(self, name: str) -> None:
        wl = next(w for w in self.workloads if w.name == name)
        if wl.admitted:
            self.queues[wl.queue].usage -= wl.chips
        self.workloads.remove(wl)

    def _heads(self, tried: set[str]) -> list[Pending]:
        heads = []
        for q in self.queues:
            waiting = sorted((w for w in self.workloads if w.queue == q and not w.admitted
                              and w.name not in tried), key=lambda w: (-w.priority, w.order))
            if waiting:
                heads.append(waiting[0])
        return heads

    def _key(self, wl: Pending) -> tuple[bool, float, int, int]:
        borrowing, share = self.share(self.queues[wl.queue], wl.chips)
        return borrowing, share, -wl.priority, wl.order

    def schedule(self, fair_sharing: bool = True) -> list[str]:
        """Scheduling cycles until one admits nothing; the names admitted, in order."""
        admitted: list[str] = []
        tried: set[str] = set()
        while heads := self._heads(tried):
            while heads:
                wl = min(heads, key=self._key) if fair_sharing else heads[0]
                heads.remove(wl)
                q = self.queues[wl.queue]
                if wl.chips > self.potential(q):
                    self._pending(wl, f"insufficient quota for {TPU} in flavor {self.flavor}, "
                                  f"previously considered podsets requests (0) + current "
                                  f"podset request ({wl.chips}) > maximum capacity "
                                  f"({self.potential(q)})")
                    tried.add(wl.name)
                elif wl.chips > (free := self.available(q)):
                    self._pending(wl, f"insufficient unused quota for {TPU} in flavor "
                                  f"{self.flavor}, {wl.chips - free} more needed")
                    tried.add(wl.name)
                else:
                    q.usage += wl.chips
                    wl.admitted = True
                    wl.conditions = [
                        _condition("QuotaReserved", "True", "QuotaReserved",
                                   f"Quota reserved in ClusterQueue {q.name}"),
                        _condition("Admitted", "True", "Admitted",
                                   "The workload is admitted")]
                    admitted.append(wl.name)
                    self.admissions.append(wl.name)
        return admitted

    def _pending(self, wl: Pending, why: str) -> None:
        wl.conditions = [_condition("QuotaReserved", "False", "Pending",
                                    f"couldn't assign flavors to pod set workers: {why}")]

    def workload_object(self, wl: Pending) -> dict[str, Any]:
        """The Workload as Kueue writes it (spec.queueName: its LocalQueue)."""
        return {"metadata": {"name": wl.name}, "spec": {"queueName": wl.queue},
                "status": {"conditions": list(wl.conditions)}}

    def cluster_queue_objects(self, cohort: str) -> list[dict[str, Any]]:
        """The ClusterQueues with spec quotas and status.flavorsUsage as Kueue reports."""
        out = []
        for q in self.queues.values():
            resource: dict[str, Any] = {"name": TPU, "nominalQuota": q.nominal}
            if q.borrowing_limit is not None:
                resource["borrowingLimit"] = q.borrowing_limit
            out.append({
                "metadata": {"name": q.name},
                "spec": {"cohortName": cohort, "resourceGroups": [{
                    "coveredResources": [TPU],
                    "flavors": [{"name": self.flavor, "resources": [resource]}]}]},
                "status": {"flavorsUsage": [{"name": self.flavor, "resources": [
                    {"name": TPU, "total": str(q.usage),
                     "borrowed": str(max(0, q.usage - q.nominal))}]}]}})
        return out


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}
