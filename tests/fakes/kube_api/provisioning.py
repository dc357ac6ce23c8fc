"""Queued provisioning (``gke.capacity: queued``) on FakeKube: Kueue's provisioning admission
check and GKE's Dynamic Workload Scheduler behind a ProvisioningRequest.

Kueue's side (kubernetes-sigs/kueue v0.15.2 pkg/controller/admissionchecks/provisioning/):
- a Workload of a ClusterQueue whose AdmissionCheck has controllerName
  ``kueue.x-k8s.io/provisioning-request`` first reserves quota (QuotaReserved=True, not yet
  Admitted); the controller then creates one ProvisioningRequest per attempt, named
  ``<workload>-<check>-<attempt>`` (provisioning.go:55 ProvisioningRequestName), owned by the
  Workload, with the ProvisioningRequestConfig's class (``queued-provisioning.gke.io``) and
  the pod sets' counts (controller.go:270-310), and keeps the Workload's
  ``status.admissionChecks[].state`` in step with it (controller.go:531-680,
  syncCheckStates):
  - Failed: Retry while ``attempt <= retryStrategy.backoffLimitCount`` (default 3,
    apis/kueue/v1beta2/provisioningrequestconfig_types.go:137) with message "Retrying after
    failure: <the PR's message>", a new attempt after the back-off (base 60 s doubling to
    1800 s); past it Rejected with the PR's message;
  - CapacityRevoked on an active, unfinished Workload: Rejected (the nodes are gone);
  - BookingExpired before the Workload is admitted: retried like Failed; once admitted,
    ignored: no new request, no state change (kueue v0.17.1 pkg/controller/
    admissionchecks/provisioning/controller.go: syncOwnedProvisionRequest creates the next
    attempt only for ``isFailed(req) || (isBookingExpired(req) && !workload.IsAdmitted(wl))``
    and syncCheckStates acts on BookingExpired only ``if !workload.IsAdmitted(wl)``). A
    queued pool gets nodes only through a request, so pods of an admitted Workload whose
    booking lapsed before they were bound wait for nodes that never come;
  - Provisioned: Ready, with the pod annotations ``autoscaling.x-k8s.io/consume-provisioning-
    request`` and ``autoscaling.x-k8s.io/provisioning-class-name`` (podSetUpdates);
  - Accepted only: Pending, the Provisioned condition's message (GKE's ETA) copied.
  Each reconcile of an active Workload also deletes its ProvisioningRequests other than each
  check's newest attempt (kueue v0.17.1 pkg/controller/admissionchecks/provisioning/
  controller.go: Reconcile calls deleteUnusedProvisioningRequests with activeOrLastPRForChecks,
  the highest attempt per check; v0.15.2 controller.go:160 the same), so once attempt N+1
  exists attempt N is gone: a watch never sees the whole history (``_delete_superseded``).
  An evicted or finished Workload is not reconciled (the same Reconcile returns early), so a
  deactivated Workload keeps its last request.
  A Rejected check deactivates the Workload (pkg/controller/core/workload_controller.go:592
  ``SetDeactivationTarget(wl, "AdmissionCheck", "Admission check(s): [..], were rejected")``),
  which evicts it (Evicted=True, reason DeactivatedDueToAdmissionCheck) and stops the job.
- Kueue admits the Workload (Admitted=True) only when every check is Ready; that is the
  scenario's ``admit`` action, held here until then.

GKE's side (the ProvisioningRequest API, kubernetes/autoscaler cluster-autoscaler/apis/
provisioningrequest/autoscaling.x-k8s.io/v1/types.go:179-194: Accepted, Provisioned,
Failed, BookingExpired, CapacityRevoked; GKE's "Queued provisioning" documentation): the
request is Accepted, waits in DWS's queue while the zone has no capacity, then the whole
slice's nodes are created at once (all or nothing) in the queued pool and Provisioned=True.
A request that cannot be served within its wait is Failed; nodes booked but unused for
``booking_s`` (GKE: 10 min) after Provisioned (types.go: BookingExpired "had Provisioned
condition before and capacity reservation time is expired") are released, BookingExpired,
whether Kueue has admitted the Workload or not: the booking is the autoscaler's, which
knows nothing of admission, and is kept only by pods bound to the nodes (GKE: the pods
that consume the request); nodes taken back before the end
of ``maxRunDurationSeconds`` are CapacityRevoked. The queued pool's nodes carry the
``cloud.google.com/gke-queued`` taint, and the cluster autoscaler never scales that pool for
an ordinary pending pod (only for a ProvisioningRequest).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.kube_api.node_groups import ClusterAutoscaler, NodeGroup
from tests.fakes.kube_api.scenarios import NS, _set_condition
from tests.fakes.kube_api.store import FakeKube, condition, now_iso

Obj = dict[str, Any]
CHECK = "dws-prov"
QUEUED_LABEL = "cloud.google.com/gke-queued"
CLASS = "queued-provisioning.gke.io"
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
# The messages GKE writes are not documented word for word; these carry the condition's
# meaning, and the watch decides on the condition's type, never on the text.
FAILED_MESSAGE = "Provisioning Request could not be satisfied: no capacity in the zone"
REVOKED_MESSAGE = "Capacity of the Provisioning Request was revoked"
EXPIRED_MESSAGE = "Capacity booking for the Provisioning Request has expired"


@dataclass
class Request:
    workload: str
    attempt: int
    name: str
    created: float
    state: str = "Accepted"  # Accepted | Provisioned | Failed | BookingExpired | Revoked
    provisioned_at: float | None = None


@dataclass
class QueuedSettings:
    queue: str | None = None  # a LocalQueue all of whose Workloads go through the check
    fail_after_s: float = 5.0  # DWS gives up on a request it could not serve this long
    booking_s: float = 2.0  # booked nodes unused this long are released
    backoff_limit: int = 3  # retryStrategy.backoffLimitCount
    backoff_s: float = 0.2  # retryStrategy.backoffBaseSeconds (60 s), scaled
    requests: list[Request] = field(default_factory=list)


class QueuedProvisioning:
    """Runs beside ``scaler`` (which owns the queued group's nodes once provisioned)."""

    def __init__(self, kube: FakeKube, scaler: ClusterAutoscaler, group: NodeGroup,
                 settings: QueuedSettings | None = None, tick_s: float = 0.05) -> None:
        self.kube, self.scaler, self.group = kube, scaler, group
        self.settings = settings or QueuedSettings()
        self.tick_s = tick_s
        self.retry_at: dict[str, float] = {}  # workload → when Kueue creates the next attempt
        scaler.excluded.add(group.name)  # only a ProvisioningRequest scales it
        self._gate = kube.action_gate
        kube.action_gate = self._admit_gate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fake-dws")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    # --- faults the tests inject -------------------------------------------------------------
    def revoke(self) -> None:
        """GKE takes the provisioned nodes back: CapacityRevoked."""
        with self.kube.cond:
            for req in self.settings.requests:
                if req.state == "Provisioned":
                    req.state = "Revoked"
                    self._condition(req, "CapacityRevoked", "True", "CapacityRevoked",
                                    REVOKED_MESSAGE)
            self.scaler._end_nodes("capacity revoked")

    # --- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            with self.kube.cond:
                if self.kube.closed:
                    return
                self._tick(self.scaler.clock())

    def _tick(self, now: float) -> None:
        for wl in self.kube.find("workloads", NS):
            if not self._queued(wl) or wl["spec"].get("active") is False or _finished(wl):
                continue
            name = wl["metadata"]["name"]
            mine = [r for r in self.settings.requests if r.workload == name]
            self._delete_superseded(mine)
            if not mine:
                self._reserve(wl)
                self._create(name, 1, now)
                continue
            req = mine[-1]
            # syncOwnedProvisionRequest: a next attempt after Failed, or after BookingExpired
            # only while the Workload is not admitted ("if the workload is Admitted we don't
            # want to retry on BookingExpired")
            retried = req.state == "Failed" or (req.state == "BookingExpired" and
                                                _condition_true(wl, "Admitted") is None)
            if retried and now >= self.retry_at.get(name, 0):
                self._create(name, req.attempt + 1, now)
                continue
            self._serve(wl, req, now)

    def _delete_superseded(self, mine: list[Request]) -> None:
        """deleteUnusedProvisioningRequests: every request but the newest attempt goes."""
        for old in mine[:-1]:
            if ("provisioningrequests", NS, old.name) in self.kube.objects:
                self.kube.delete("provisioningrequests", NS, old.name)

    def _reserve(self, wl: Obj) -> None:
        def reserved(obj: Obj) -> None:
            _set_condition(obj, condition("QuotaReserved", "True", "QuotaReserved",
                                          "Quota reserved in ClusterQueue tpu-queued-cq"))
            obj["status"]["admissionChecks"] = [{"name": CHECK, "state": "Pending",
                                                 "message": "",
                                                 "lastTransitionTime": now_iso()}]
        self.kube.mutate("workloads", NS, wl["metadata"]["name"], reserved)

    def _create(self, workload: str, attempt: int, now: float) -> None:
        req = Request(workload, attempt, f"{workload}-{CHECK}-{attempt}", now)
        self.settings.requests.append(req)
        owner = self.kube.objects[("workloads", NS, workload)]["metadata"]
        self.kube.create("provisioningrequests", NS, {
            "metadata": {"name": req.name, "ownerReferences": [
                {"kind": "Workload", "name": workload, "uid": owner["uid"]}]},
            "spec": {"provisioningClassName": CLASS, "podSets": [
                {"podTemplateRef": {"name": f"ppt-{req.name}-workers"},
                 "count": self.group.hosts}]},
            "status": {"conditions": [condition("Accepted", "True", "Accepted",
                                                "Provisioning Request was accepted")]}})
        self._check(workload, "Pending", "")

    def _serve(self, wl: Obj, req: Request, now: float) -> None:
        settings, name = self.settings, wl["metadata"]["name"]
        if req.state == "Accepted":
            if not self.group.out_of_stock(now) and not self.scaler.nodes:
                self.scaler.last_scale_up = now  # the request's scale-up is one too
                self.scaler.provide(self.group, now)  # the whole slice, at once
                req.state, req.provisioned_at = "Provisioned", now
                self._condition(req, "Provisioned", "True", "Provisioned",
                                "Provisioning Request was successfully provisioned.")
                self._check(name, "Ready", "Provisioning Request was successfully "
                            "provisioned.", ready=req)
            elif now - req.created >= settings.fail_after_s:
                req.state = "Failed"
                self._condition(req, "Failed", "True", "FailedToProvision", FAILED_MESSAGE)
                self._failed(name, req, FAILED_MESSAGE, "failure", now)
            return
        if req.state == "Provisioned" and req.provisioned_at is not None and \
                now - req.provisioned_at >= settings.booking_s and not self._consumed():
            req.state = "BookingExpired"
            self._condition(req, "BookingExpired", "True", "BookingExpired", EXPIRED_MESSAGE)
            self.scaler._end_nodes("booking expired")
            if _condition_true(wl, "Admitted") is None:  # admitted: Kueue ignores it
                self._failed(name, req, EXPIRED_MESSAGE, "booking expired", now)
        if req.state == "Revoked" and _condition_true(wl, "Evicted") is None:
            self._check(name, "Rejected", REVOKED_MESSAGE)
            self._deactivate(name)

    def _failed(self, workload: str, req: Request, message: str, what: str,
                now: float) -> None:
        """syncCheckStates: Retry within the back-off limit, Rejected past it."""
        if req.attempt <= self.settings.backoff_limit:
            self.retry_at[workload] = now + self.settings.backoff_s * 2 ** (req.attempt - 1)
            self._check(workload, "Retry", f"Retrying after {what}: {message}")
            return
        self._check(workload, "Rejected", message)
        self._deactivate(workload)

    def _deactivate(self, workload: str) -> None:
        """workload_controller.go: a rejected check deactivates the Workload, which is
        evicted (its job stopped) and never re-queued unless reactivated."""
        def evicted(obj: Obj) -> None:
            obj["spec"]["active"] = False
            message = f"Admission check(s): [{CHECK}], were rejected"
            _set_condition(obj, condition("Evicted", "True",
                                          "DeactivatedDueToAdmissionCheck", message))
            _set_condition(obj, condition("QuotaReserved", "False", "Pending", message))
            _set_condition(obj, condition("Admitted", "False", "NoReservation", message))
        self.kube.mutate("workloads", NS, workload, evicted)
        owner = (self.kube.objects[("workloads", NS, workload)]["metadata"]
                 ["ownerReferences"][0]["name"])
        self.kube.mutate("jobsets", NS, owner, lambda o: o["spec"].update(suspend=True))

    def _consumed(self) -> bool:
        """A pod is bound to the booked nodes: the booking is used."""
        nodes = set(self.scaler.nodes) if self.scaler.pool is self.group else set()
        return any((p.get("spec") or {}).get("nodeName") in nodes
                   for p in self.kube.find("pods", NS))

    # --- objects ---------------------------------------------------------------------------
    def _condition(self, req: Request, kind: str, status: str, reason: str,
                   message: str) -> None:
        self.kube.mutate("provisioningrequests", NS, req.name, lambda o: _set_condition(
            o, condition(kind, status, reason, message)))

    def _check(self, workload: str, state: str, message: str,
               ready: Request | None = None) -> None:
        def change(obj: Obj) -> None:
            check = {"name": CHECK, "state": state, "message": message,
                     "lastTransitionTime": now_iso()}
            if ready is not None:
                check["podSetUpdates"] = [{"name": "workers", "annotations": {
                    CONSUME: ready.name, CLASS_ANNOTATION: CLASS}}]
            obj["status"]["admissionChecks"] = [check]
        self.kube.mutate("workloads", NS, workload, change)

    def _queued(self, wl: Obj) -> bool:
        """Does the Workload go through the check? Kueue runs a ClusterQueue's check for
        the flavors it names (admissionChecksStrategy onFlavors): here, the JobSet asks
        for the queued pools (its TPU pods select the queued label), or its queue is
        ``settings.queue``."""
        if self.settings.queue is not None and wl["spec"].get("queueName") == \
                self.settings.queue:
            return True
        owner = (wl["metadata"].get("ownerReferences") or [{}])[0].get("name")
        js = self.kube.objects.get(("jobsets", NS, str(owner)))
        return any(QUEUED_LABEL in ((r["template"]["spec"]["template"]["spec"]
                                     .get("nodeSelector")) or {})
                   for r in ((js or {}).get("spec") or {}).get("replicatedJobs") or [])

    def _admit_gate(self, jobset: str, action: str) -> bool:
        """Kueue admits a Workload only once every admission check is Ready."""
        if action == "admit":
            with self.kube.cond:
                js = self.kube.objects.get(("jobsets", NS, jobset))
                uid = (js or {}).get("metadata", {}).get("uid")
                for wl in self.kube.find("workloads", NS, f"kueue.x-k8s.io/job-uid={uid}"):
                    if not self._queued(wl):
                        continue
                    checks = wl["status"].get("admissionChecks") or []
                    if not checks or any(c["state"] != "Ready" for c in checks):
                        return False
        return self._gate is None or self._gate(jobset, action)


def _condition_true(obj: Obj, kind: str) -> Obj | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == kind and c["status"] == "True"), None)


def _finished(wl: Obj) -> bool:
    return _condition_true(wl, "Finished") is not None
