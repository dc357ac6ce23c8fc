"""The state of the fake Kubernetes API (tests/fakes/kube_api/server.py serves it over HTTP).

Objects, one cluster-wide resourceVersion counter, the event history that watches replay
(with a floor below which a watch gets 410 Gone), fault switches, request accounting, pod
logs, and the scenario scripts that play when a JobSet is created.
"""

from __future__ import annotations

import base64
import copy
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.fakes.kube_api import scheduler
from tests.fakes.kube_api.kueue_workloads import create_workload, script_may_go

Obj = dict[str, Any]
KINDS = {"pods": ("v1", "Pod"), "secrets": ("v1", "Secret"), "configmaps": ("v1", "ConfigMap"),
         "jobs": ("batch/v1", "Job"),
         "jobsets": ("jobset.x-k8s.io/v1alpha2", "JobSet"),
         "workloads": ("kueue.x-k8s.io/v1beta1", "Workload"), "events": ("v1", "Event"),
         "nodes": ("v1", "Node"),
         # cluster-autoscaler apis/provisioningrequest (queued provisioning: provisioning.py)
         "provisioningrequests": ("autoscaling.x-k8s.io/v1", "ProvisioningRequest"),
         # Kueue's queue objects, read by pre-flight (infra/cloud.py kueue_objects);
         # clusterqueues and resourceflavors are cluster-scoped (namespace "" here)
         "localqueues": ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
         "clusterqueues": ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
         "resourceflavors": ("kueue.x-k8s.io/v1beta2", "ResourceFlavor")}
Script = list[tuple[float, Callable[["FakeKube", str], None]]]


# kubernetes pkg/apis/core/validation/validation.go: ValidateConfigMap sums the values'
# lengths against core.MaxSecretSize; ValidateConfigMapUpdate forbids changing the data (or
# unsetting immutable) of an immutable ConfigMap or Secret
CONFIGMAP_MAX = 1024 * 1024


def configmap_size(obj: Obj) -> int:
    return sum(len(str(v).encode()) for v in (obj.get("data") or {}).values()) + sum(
        len(base64.b64decode(v)) for v in (obj.get("binaryData") or {}).values())


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def terminated(exit_code: int, reason: str, before: Obj | None = None) -> Obj:
    """A container's state once it ended, as the kubelet writes it (k8s.io/api core/v1
    ContainerStateTerminated): exit code, reason, and when it started (from its running
    state, if it had one) and finished."""
    started = ((before or {}).get("running") or {}).get("startedAt")
    return {"terminated": {"exitCode": exit_code, "reason": reason, "finishedAt": now_iso(),
                           **({"startedAt": started} if started else {})}}


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None
                 ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details

    def status(self) -> Obj:
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": self.message, "reason": self.reason, "code": self.code}
        return status | ({"details": self.details} if self.details is not None else {})


def matches(obj: Obj, labels: str | None, fields: str | None) -> bool:
    have = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, (labels or "").split(",")):
        key, _, value = term.partition("=")
        if (value and have.get(key) != value) or (not value and key not in have):
            return False
    for term in filter(None, (fields or "").split(",")):
        key, _, value = term.partition("=")
        if _field(obj, key) != value:
            return False
    return True


# Event fields an API server selects on (kubernetes pkg/apis/core/v1/conversion.go,
# AddFieldLabelConversionsForEvent): "source" is source.component; the rest are paths.
_FIELD_ALIASES = {"source": "source.component"}


def _field(obj: Obj, key: str) -> str:
    node: Any = obj
    for part in _FIELD_ALIASES.get(key, key).split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return "" if node is None else str(node)


class FakeKube:
    """The cluster state, its event history, fault injection and request accounting."""

    def __init__(self, history_limit: int = 10_000, deletion_delay_s: float = 0.1) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.rv = 1000
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.history: list[tuple[int, str, str, Obj]] = []
        self.history_floor = 0  # watches from an RV below this get 410 Gone
        self.history_limit, self.deletion_delay_s = history_limit, deletion_delay_s
        self.requests: list[tuple[float, str, str]] = []
        # (plural, labelSelector) of every list served, a watch from "now" included: what a
        # client has seen from (its state was read under the lock, after the write before it)
        self.listed: set[tuple[str, str]] = set()
        self.created: Counter[tuple[str, str]] = Counter()
        self.logs: dict[tuple[str, str, str], list[tuple[datetime, str]]] = {}
        self.scripts: list[Script] = []  # one per JobSet creation, run in order
        # bursts of 5xx/429: (remaining, status, Retry-After, the path fragment of the
        # requests they refuse, None: any request)
        self.failures: list[tuple[int, int, float | None, str | None]] = []
        self.drop_watch_every: int | None = None
        self.drop_log_every: int | None = None
        self.log_cut_at: dict[str, int] = {}  # pod → index of the last line a cut followed
        self.cut_generation = 0  # bumped by cut_watches(): every open watch is dropped
        self.action_times: dict[str, float] = {}  # action name → monotonic time it happened
        # Asked before each scenario action, outside the lock: False holds the script (the
        # fake autoscaler holds a JobSet's containers until its pods have nodes).
        self.action_gate: Callable[[str, str], bool] | None = None
        # the TPU-pool fake (nodepools.py) binds TPU pods itself, to the nodes it makes
        self.tpu_pool_binds = False
        self.closed = False
        # Kueue's reconciler creates a queued JobSet's Workload this long after the JobSet
        # (tests/fakes/kube_api/kueue_workloads.py); 0: in the JobSet's own write
        self.workload_delay_s = 0.0
        self.workloads_pending: set[str] = set()  # JobSet uids whose Workload is not made yet
        # The garbage collector's lag and a pod's termination (tests/fakes/kube_api/
        # garbage_collector.py); 0: a delete removes the object and its dependents at once
        # (a Foreground JobSet delete after deletion_delay_s), as before
        self.gc_delay_s = 0.0
        self.pod_grace_s = 0.0
        self.gc_removing: set[str] = set()  # uids of pods whose removal is planned
        # kube-scheduler binds a new pod this long after the Job controller made it
        # (tests/fakes/kube_api/scheduler.py); 0: created bound, as before
        self.binding_delay_s = 0.0
        self.binding_pending: set[str] = set()  # uids of pods not bound yet
        # Watches of these plurals deliver nothing until released (a watch stream that lags
        # the API server's state, as a client's cache may): reads still see the present.
        self.held_watches: set[str] = set()
        # RBAC (tests/fakes/kube_api/rbac.py): None serves everyone, as before; a Role's rules
        # refuse what they do not grant with a 403. ``calls`` records every request's (group,
        # resource[/subresource], verb) either way, ``denied`` those refused.
        self.rbac_rules: list[dict[str, Any]] | None = None
        # a ClusterRole's rules (bound by a ClusterRoleBinding): with RBAC on, they grant in
        # every namespace and are the only grant of a cluster-scoped request
        self.rbac_cluster_rules: list[dict[str, Any]] = []
        self.rbac_user = "system:serviceaccount:default:tpurl-flow"
        self.calls: set[tuple[str, str, str]] = set()
        self.denied: set[tuple[str, str, str]] = set()
        # The versions each API group serves (discovery, and a 404 for any other): Kueue 0.15
        # serves v1beta2 and v1beta1 (kubernetes-sigs/kueue#7304); later Kueue only v1beta2
        # (kubernetes-sigs/kueue#14558). JobSet 0.10 serves v1alpha2.
        self.served: dict[str, tuple[str, ...]] = {"kueue.x-k8s.io": ("v1beta2", "v1beta1"),
                                                   "jobset.x-k8s.io": ("v1alpha2",), "batch": ("v1",),
                                                   "autoscaling.x-k8s.io": ("v1",)}

    # --- store ---------------------------------------------------------------------------
    def _bump(self, plural: str, kind: str, obj: Obj) -> Obj:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, plural, kind, copy.deepcopy(obj)))
        if len(self.history) > self.history_limit:
            drop = len(self.history) - self.history_limit
            self.history_floor = self.history[drop - 1][0] + 1
            del self.history[:drop]
        self.cond.notify_all()
        return obj

    def compact(self) -> None:
        """Forget all history, as etcd compaction does: every older RV now gets 410 Gone."""
        with self.cond:
            self.history.clear()
            self.history_floor = self.rv + 1

    def cut_watches(self) -> None:
        """Drop every open watch stream now, without an event (a restarted API server)."""
        with self.cond:
            self.cut_generation += 1
            self.cond.notify_all()

    def create(self, plural: str, ns: str, body: Obj, created: str | None = None) -> Obj:
        """``created``: the creationTimestamp, for an object a fake makes in a test's moved
        time (the API server sets it to now)."""
        with self.cond:
            obj = copy.deepcopy(body)
            meta = obj.setdefault("metadata", {})
            name = meta.get("name")
            if not name:
                raise ApiError(422, "Invalid", "metadata.name: Required value")
            if (plural, ns, name) in self.objects:
                raise ApiError(409, "AlreadyExists", f'{plural} "{name}" already exists')
            if plural == "configmaps" and (size := configmap_size(obj)) > CONFIGMAP_MAX:
                raise ApiError(422, "Invalid", f'ConfigMap "{name}" is invalid: []: Too long: '
                               f"must have at most {CONFIGMAP_MAX} bytes ({size})")
            api_version, kind = KINDS[plural]
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
            meta.update(namespace=ns, uid=str(uuid.uuid4()),
                        creationTimestamp=created or now_iso())
            if plural == "secrets" and "stringData" in obj:
                data = obj.setdefault("data", {})
                for key, value in obj.pop("stringData").items():
                    data[key] = base64.b64encode(value.encode()).decode()
            self.objects[(plural, ns, name)] = obj
            self.created[(plural, name)] += 1
            self._bump(plural, "ADDED", obj)
            if plural == "jobsets":
                self._on_jobset_created(obj)
            return copy.deepcopy(obj)

    def get(self, plural: str, ns: str, name: str) -> Obj:
        with self.cond:
            if (plural, ns, name) not in self.objects:
                raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
            return copy.deepcopy(self.objects[(plural, ns, name)])

    def find(self, plural: str, ns: str = "default", labels: str | None = None) -> list[Obj]:
        with self.cond:
            return [copy.deepcopy(o) for (p, n, _), o in sorted(self.objects.items())
                    if p == plural and n == ns and matches(o, labels, None)]

    def replace(self, plural: str, ns: str, name: str, body: Obj) -> Obj:
        with self.cond:
            old = self.get(plural, ns, name)
            if plural in ("configmaps", "secrets") and old.get("immutable") and (
                    body.get("data") != old.get("data") or not body.get("immutable")):
                raise ApiError(422, "Invalid", f'{KINDS[plural][1]} "{name}" is invalid: data: '
                               "Forbidden: field is immutable when `immutable` is set")
            sent = body.get("metadata", {}).get("resourceVersion")
            if sent and sent != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", "the object has been modified")
            obj = copy.deepcopy(body)
            obj["metadata"] = {**old["metadata"], **{k: v for k, v in obj["metadata"].items()
                                                    if k in ("labels", "annotations")}}
            obj.setdefault("apiVersion", old["apiVersion"])
            obj.setdefault("kind", old["kind"])
            if plural == "secrets" and "stringData" in obj:
                data = obj.setdefault("data", {})
                for key, value in obj.pop("stringData").items():
                    data[key] = base64.b64encode(value.encode()).decode()
            self.objects[(plural, ns, name)] = obj
            self._bump(plural, "MODIFIED", obj)
            return copy.deepcopy(obj)

    def mutate(self, plural: str, ns: str, name: str, fn: Callable[[Obj], None]) -> Obj | None:
        """What a controller does: change an object in place (status, spec.suspend)."""
        with self.cond:
            obj = self.objects.get((plural, ns, name))
            if obj is None:
                return None
            fn(obj)
            return copy.deepcopy(self._bump(plural, "MODIFIED", obj))

    def delete(self, plural: str, ns: str, name: str, policy: str = "Background") -> Obj:
        with self.cond:
            obj = self.objects.get((plural, ns, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
            if self.gc_delay_s > 0:
                from tests.fakes.kube_api import garbage_collector

                return copy.deepcopy(garbage_collector.delete(self, (plural, ns, name), policy))
            if policy == "Foreground" and plural == "jobsets":
                if not obj["metadata"].get("deletionTimestamp"):
                    obj["metadata"]["deletionTimestamp"] = now_iso()
                    self._bump(plural, "MODIFIED", obj)
                    timer = threading.Timer(self.deletion_delay_s, self._finish_delete,
                                            (plural, ns, name))
                    timer.daemon = True
                    timer.start()
                return copy.deepcopy(obj)
            self._finish_delete(plural, ns, name)
            return copy.deepcopy(obj)

    def _finish_delete(self, plural: str, ns: str, name: str) -> None:
        with self.cond:
            obj = self.objects.pop((plural, ns, name), None)
            if obj is None:
                return
            uid = obj["metadata"]["uid"]
            for key, child in list(self.objects.items()):
                owners = child["metadata"].get("ownerReferences") or []
                if any(o.get("uid") == uid for o in owners):
                    self._finish_delete(*key)
            self._bump(plural, "DELETED", obj)

    # --- requests, faults ----------------------------------------------------------------
    def fail_next(self, count: int, status: int = 503, retry_after: float | None = None,
                  matching: str | None = None) -> None:
        """The next ``count`` requests fail with ``status``; ``retry_after`` adds the header
        the API server sends with 429 (k8s.io/apiserver pkg/server/filters/maxinflight.go
        and priority-and-fairness.go write ``Retry-After: 1``). ``matching``: only requests
        whose path holds it, as API Priority and Fairness rejects only the flows of a
        saturated priority level, each FlowSchema matching verbs and resources
        (kubernetes/website concepts/cluster-administration/flow-control.md)."""
        with self.cond:
            self.failures.append((count, status, retry_after, matching))

    def take_failure(self, path: str = "") -> tuple[int, float | None] | None:
        """The failure the request to ``path`` meets, if any: the first burst that matches
        it, one request fewer left in it."""
        with self.cond:
            index = next((i for i, (_, _, _, matching) in enumerate(self.failures)
                          if matching is None or matching in path), None)
            if index is None:
                return None
            count, status, retry_after, matching = self.failures[index]
            self.failures[index] = (count - 1, status, retry_after, matching)
            if count - 1 <= 0:
                self.failures.pop(index)
                if not self.failures:  # the next request succeeds: when the benchmark's
                    self.action_times["api_recovered"] = time.monotonic()  # clock starts
            return status, retry_after

    def requests_between(self, start: float, end: float) -> list[tuple[float, str, str]]:
        with self.cond:
            return [r for r in self.requests if start <= r[0] < end]

    # --- logs ------------------------------------------------------------------------------
    def append_log(self, ns: str, pod: str, container: str, lines: list[str]) -> None:
        with self.cond:
            entries = self.logs.setdefault((ns, pod, container), [])
            for line in lines:
                stamp = datetime.now(UTC)
                if entries and stamp <= entries[-1][0]:
                    stamp = entries[-1][0] + timedelta(microseconds=1)
                entries.append((stamp, line))
            self.cond.notify_all()

    # --- scenario scripts ---------------------------------------------------------------------
    def _on_jobset_created(self, jobset: Obj) -> None:
        """Kueue's webhook suspends a queued JobSet and creates its Workload; then the next
        script of the scenario plays, as long as this very JobSet (by uid) exists."""
        meta = jobset["metadata"]
        if "kueue.x-k8s.io/queue-name" in (meta.get("labels") or {}):
            jobset["spec"]["suspend"] = True
            # the JobSet controller's first reconcile of a suspended JobSet (jobset v0.10.1
            # pkg/controllers/jobset_controller.go suspendJobs → setJobSetSuspendedCondition)
            jobset.setdefault("status", {})["conditions"] = [condition(
                "Suspended", "True", "SuspendedJobs", "jobset is suspended")]
            create_workload(self, jobset)
        if self.scripts:
            script = self.scripts.pop(0)
            thread = threading.Thread(target=self._play, args=(script, meta["namespace"],
                                                              meta["name"], meta["uid"]),
                                      daemon=True)
            thread.start()

    def _play(self, script: Script, ns: str, name: str, uid: str) -> None:
        for delay, action in script:
            time.sleep(delay)
            label = getattr(action, "__name__", "action")
            while not script_may_go(self, uid) or not scheduler.may_go(self, uid, label) or (
                    self.action_gate is not None and not self.action_gate(name, label)):
                with self.cond:
                    current = self.objects.get(("jobsets", ns, name))
                    if self.closed or current is None or current["metadata"]["uid"] != uid:
                        return
                time.sleep(0.02)
            with self.cond:
                current = self.objects.get(("jobsets", ns, name))
                if self.closed or current is None or current["metadata"]["uid"] != uid:
                    return
                action(self, name)
                self.action_times[getattr(action, "__name__", "action")] = time.monotonic()


def condition(kind: str, status: str, reason: str, message: str = "") -> Obj:
    return {"type": kind, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now_iso()}


# jobset v0.10.1 pkg/constants/constants.go: the Failed condition's reasons and messages,
# which pkg/controllers/failure_policy.go suffixes with messageWithFirstFailedJob
JOBSET_FAILED = {"FailJobSetFailurePolicyAction": "applying FailJobSet failure policy action",
                 "ReachedMaxRestarts": "jobset failed due to reaching max number of restarts",
                 "FailedJobs": "jobset failed due to one or more job failures"}


def jobset_failed(reason: str, first_failed_job: str) -> Obj:
    return condition("Failed", "True", reason,
                     f"{JOBSET_FAILED[reason]} (first failed job: {first_failed_job})")
