"""The Kueue Workload of a queued JobSet, made when Kueue's reconciler makes it.

Kueue's webhook only suspends the JobSet; the Workload comes from the job reconciler, after
the JobSet is in the API server and its watch event reached Kueue's controller:
kueue v0.15.2 pkg/controller/jobframework/reconciler.go ReconcileGenericJob (line 251) finds
no Workload (ensureOneWorkload, line 404; "3. handle workload is nil", line 476) and
handleJobWithNoWorkload (line 1391) creates it (``r.client.Create(ctx, wl)``, line 1423). So a
client that lists Workloads right after creating its JobSet may find none, for as long as
the controller's queue and its API round trips take.

``FakeKube.workload_delay_s`` (0 by default: in the JobSet's own write, as the fake did
before) sets that lag; a scenario's script waits for the Workload (Kueue cannot admit what
does not exist yet), held by ``script_may_go``.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.fakes.kube_api.store import FakeKube

Obj = dict[str, Any]


def workload_for(jobset: Obj) -> Obj:
    """The Workload Kueue constructs for ``jobset``: owned by it, labelled with its uid,
    pending (not admitted) until a scenario admits it."""
    from tests.fakes.kube_api.store import condition

    meta = jobset["metadata"]
    uid = meta["uid"]
    return {"metadata": {"name": f"jobset-{meta['name']}-{uid[:5]}",
                         "labels": {"kueue.x-k8s.io/job-uid": uid},
                         "ownerReferences": [{"kind": "JobSet", "name": meta["name"],
                                              "uid": uid}]},
            "spec": {"queueName": meta["labels"]["kueue.x-k8s.io/queue-name"]},
            "status": {"conditions": [condition("QuotaReserved", "False", "Pending",
                                                "couldn't assign flavors: insufficient quota "
                                                "for google.com/tpu")]}}


def create_workload(kube: FakeKube, jobset: Obj) -> None:
    """Now (no delay) or after ``kube.workload_delay_s``, unless the JobSet went meanwhile."""
    if kube.workload_delay_s <= 0:
        kube.create("workloads", jobset["metadata"]["namespace"], workload_for(jobset))
        return
    uid = jobset["metadata"]["uid"]
    kube.workloads_pending.add(uid)
    body = workload_for(jobset)
    timer = threading.Timer(kube.workload_delay_s, _reconcile,
                            (kube, jobset["metadata"]["namespace"], jobset["metadata"]["name"],
                             uid, body))
    timer.daemon = True
    timer.start()


def _reconcile(kube: FakeKube, ns: str, name: str, uid: str, body: Obj) -> None:
    with kube.cond:
        kube.workloads_pending.discard(uid)
        current = kube.objects.get(("jobsets", ns, name))
        if kube.closed or current is None or current["metadata"]["uid"] != uid:
            return  # deleted before Kueue reconciled it: no Workload (dropFinalizers path)
        kube.create("workloads", ns, body)
        kube.action_times["workload_created"] = time.monotonic()


def script_may_go(kube: FakeKube, uid: str) -> bool:
    """A scenario's actions follow Kueue's admission, which needs the Workload."""
    with kube.cond:
        return uid not in kube.workloads_pending
