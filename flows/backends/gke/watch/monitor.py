"""Watch one submitted JobSet to a terminal verdict: JobSet + Kueue Workload + pods + log.

Three watches (flows/backends/gke/watch/stream.py) keep the objects current and wake the loop on every
change; the loop asks the pure diagnosis (flows/backends/gke/watch/verdict.py) what the state means. It
also wakes every ``tick_s`` with no API call, so the budgets (time queued, time running) are
enforced even when nothing changes. Kueue's pending reason is logged when it changes, so the
UI says why a run waits.

Budgets are separate on purpose: waiting for quota costs nothing and may legitimately take
hours; running costs chips and is bounded by how long the job should take. Every budget is
kept on the wall clock whatever the API does: before the first list arrives the JobSet's
phase is unknown, so the budget of the phase it was created or found in applies (queue while
suspended, run otherwise), and a budget that runs out while the watches fail is diagnosed
as the API's failure (infrastructure), naming the error, not as a queue timeout. A 403 on
any read is none of these: the flow's identity lacks a grant, which no wait cures, so the
stage ends at the next tick with the permission and the fix (watch/forbidden.py).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from flows.backends.gke.jobs.common import WORKLOAD_CONTAINER
from flows.backends.gke.watch.client import (
    JOBSET_GROUP,
    JOBSET_VERSION,
    JOBSETS,
    KUEUE_GROUP,
    KUEUE_VERSIONS,
    WORKLOADS,
    Cluster,
)
from flows.backends.gke.watch.forbidden import Denied, denied_by, forbidden_diagnosis
from flows.backends.gke.watch.kueue import DEACTIVATED_CODE
from flows.backends.gke.watch.kueue_cohort import cohort_wait
from flows.backends.gke.watch.logs import LogFollower, LogSink, container_state
from flows.backends.gke.watch.lost_nodes import LostNodes, unfinished
from flows.backends.gke.watch.monitor_verdicts import api_down, deleted_from_outside, stalled
from flows.backends.gke.watch.queued import PR_GROUP, PR_PLURAL, PR_VERSION, queued_diagnosis
from flows.backends.gke.watch.scaling import AUTOSCALER_EVENTS
from flows.backends.gke.watch.served import Served, served_by, tpu_node_names
from flows.backends.gke.watch.spend import BoundPods, SpendMeter
from flows.backends.gke.watch.stream import ObjectWatch, WatchSettings
from flows.backends.gke.watch.verdict import Observation, Phase, Verdict, diagnose, disruption_of
from flows.common.api_objects import Obj, condition
from flows.core.budgets import Budgets
from flows.core.failures import Diagnosis, FailureCategory
from flows.core.stage import StageLogger

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# jobset v0.10.1 pkg/constants/constants.go RestartsKey: labelAndAnnotateObject puts the
# JobSet's status.restarts at creation on each Job and its pod template (jobset_controller.go)
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"


def is_finished(jobset: Obj | None) -> bool:
    return bool(condition(jobset, "Completed") or condition(jobset, "Failed"))


def coordinator_pod(pods: list[Obj], replicated_job: str) -> Obj | None:
    """The pod whose workload-container is the program: index 0 of the coordinator job."""
    found = [p for p in pods
             if (p["metadata"].get("labels") or {}).get(REPLICATED_JOB) == replicated_job
             and (p["metadata"]["labels"].get(JOB_INDEX, "0") == "0")
             and (p["metadata"]["labels"].get(COMPLETION_INDEX, "0") == "0")
             and not p["metadata"].get("deletionTimestamp")]
    return max(found, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)


class Monitor:
    """Runs until the JobSet ``jobset`` (as created or found) reaches a terminal verdict."""

    def __init__(self, cluster: Cluster, jobset: Obj, sink: LogSink, logger: StageLogger,
                 budgets: Budgets, settings: WatchSettings, coordinator_job: str,
                 log_read_timeout_s: float = 300.0, spend: SpendMeter | None = None,
                 kueue_version: str = KUEUE_VERSIONS[0],
                 health: Callable[[], Diagnosis | None] | None = None) -> None:
        self.cluster, self.sink, self.logger = cluster, sink, logger
        self.spend = spend  # the stage's spend cap (watch/spend.py), charged every tick
        # the training sentinel (watch/health.py): a stop-policy finding ends it like a cap
        self.health = health
        self.bound = BoundPods()  # TPU pods seen bound, deleted ones too (spend.py)
        self.budgets, self.settings = budgets, settings
        meta = jobset["metadata"]
        self.name, self.namespace, self.uid = meta["name"], meta["namespace"], meta["uid"]
        self.coordinator_job = coordinator_job
        self.last_jobset: Obj | None = jobset
        self.noticed_at: float | None = None  # monotonic time the terminal verdict was seen
        self.pull_errors: dict[str, str] = {}  # "pod/container" → last ErrImagePull text
        # pod → (the restart attempt the pod belongs to, why): disruptions as the watch saw them
        self.disruptions: dict[str, tuple[int, str]] = {}
        # seen running since Kueue last admitted it (an eviction un-admits it): a suspension
        # then is a stop, not a start (verdict.diagnose ran_since_admitted)
        self._ran_since_admitted = False
        # the autoscaler's events as seen, kept after the API drops them (1 h event TTL)
        self.scaling_events: dict[str, Obj] = {}
        self.lost_nodes = LostNodes(cluster, self.namespace, settings)  # asked after a failure
        self._requests: list[Obj] = []  # ProvisioningRequests (queued provisioning)
        self._requests_version = ""  # of the Workload they were listed for
        self._kueue_version = kueue_version
        self._cohort_line: str | None = None  # who borrows the chips it waits for
        self._cohort_version = ""  # of the Workload the ClusterQueues were listed for
        self._denied: list[tuple[str, Denied]] = []  # the loop's own reads refused (403)
        self.served: Served | None = None  # where the slice came up (watch/served.py)
        self.served_at: float | None = None  # monotonic time its TPU pods were all bound
        self._memory = threading.Lock()  # what the watch threads remember, read by the loop
        self._changed = threading.Event()
        self._log_wake = threading.Event()
        custom, core, ns = cluster.custom, cluster.core, self.namespace
        warn = functools.partial(logger.warning, "%s")
        self.jobsets = ObjectWatch("jobset", functools.partial(
            custom.list_namespaced_custom_object, JOBSET_GROUP, JOBSET_VERSION, ns, JOBSETS,
            field_selector=f"metadata.name={self.name}"), self._poke, settings, warn)
        self.workloads = ObjectWatch("kueue-workload", functools.partial(
            custom.list_namespaced_custom_object, KUEUE_GROUP, kueue_version, ns, WORKLOADS,
            label_selector=f"{KUEUE_JOB_UID}={self.uid}"), self._poke, settings, warn)
        self.pods = ObjectWatch("pods", functools.partial(
            core.list_namespaced_pod, ns, label_selector=f"{JOBSET_NAME}={self.name}"),
            self._poke, settings, warn, observe=self._observe_pod)
        self.autoscaler = ObjectWatch("autoscaler-events", functools.partial(
            core.list_namespaced_event, ns, field_selector=AUTOSCALER_EVENTS),
            self._poke, settings, warn, observe=self._observe_event)
        self.follower = LogFollower(core, ns, WORKLOAD_CONTAINER, self._coordinator, sink,
                                    self._log_wake, read_timeout_s=log_read_timeout_s)

    @property
    def watches(self) -> list[ObjectWatch]:
        return [self.jobsets, self.workloads, self.pods, self.autoscaler]

    def _poke(self) -> None:
        self._changed.set()
        self._log_wake.set()

    def _pods(self) -> list[Obj]:
        return self._mine(self.pods.snapshot())

    def _mine(self, pods: list[Obj]) -> list[Obj]:
        """Those of this JobSet (by uid), not of an earlier one of the same name."""
        return [p for p in pods
                if (p["metadata"].get("labels") or {}).get(JOBSET_UID, self.uid) == self.uid]

    def _observe_pod(self, pod: Obj) -> None:
        """Sees every version of every pod the watch delivers, not only the newest: what
        kubelet posts for an instant (a pull's cause) is kept here."""
        if self._mine([pod]):
            self.bound.note(pod)
        with self._memory:
            self._remember_pull_errors(pod)
            if (why := disruption_of(pod)) and pod["metadata"]["name"] not in self.disruptions:
                self.disruptions[pod["metadata"]["name"]] = (
                    _attempt_of(pod, self.last_jobset), why)

    def _observe_event(self, event: Obj) -> None:
        with self._memory:
            self.scaling_events[event["metadata"]["name"]] = event

    def _remember_pull_errors(self, pod: Obj) -> None:
        """kubelet replaces ErrImagePull's message (the cause) by "Back-off pulling image"
        within seconds: keep the cause for the diagnosis (watch/pulls.py)."""
        for status in ((pod.get("status") or {}).get("containerStatuses") or []):
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") == "ErrImagePull" and waiting.get("message"):
                self.pull_errors[f"{pod['metadata']['name']}/{status.get('name')}"] = \
                    str(waiting["message"])

    def _remembered(self, memory: dict[str, str]) -> dict[str, str]:
        with self._memory:
            return dict(memory)

    def _scaling_events(self) -> list[Obj]:
        with self._memory:
            return list(self.scaling_events.values())

    def scaling_events_seen(self) -> list[Obj]:
        """The autoscaler's events as seen, and as the API serves them now, for the spend
        meter after the watch: the event watch may lag a scale-up that a JobSet deleted at
        once still completes, whose nodes the meter then waits for (a busy run met it: the
        slice came after the stage and was charged nothing)."""
        for event in self.autoscaler.read_now() or []:
            self._observe_event(event)
        return self._scaling_events()

    def _failing(self) -> str:
        """The error of a watch that is failing now, or ""."""
        return next((f"{w.label}: {w.last_error}" for w in self.watches if w.last_error), "")

    def _coordinator(self) -> Obj | None:
        return coordinator_pod(self._pods(), self.coordinator_job)

    def run(self) -> Verdict:
        for watch in self.watches:
            watch.start()
        self.follower.start()
        try:
            return self._loop()
        finally:
            for watch in self.watches:
                watch.stop()
            self.follower.stop()

    def _loop(self) -> Verdict:
        last_reason, running_since, began = "", None, time.monotonic()
        created_suspended = bool((self.last_jobset or {}).get("spec", {}).get("suspend"))
        while True:
            self._changed.wait(self.budgets.tick_s)
            self._changed.clear()
            if (refused := self._refused()) is not None:
                return self._end_refused(refused)
            if not self.jobsets.synced.is_set():
                budget = self.budgets.queue_s if created_suspended else self.budgets.run_s
                if time.monotonic() - began > budget:
                    self.noticed_at = time.monotonic()
                    return api_down(self.name, budget, self._failing() or "no answer")
                continue
            verdict = self._observe()
            if (refused := self._refused()) is not None:
                return self._end_refused(refused)
            if self.spend and verdict.phase in (Phase.QUEUED, Phase.RUNNING) and \
                    (over := self._charge(self._pods())):
                verdict = Verdict(Phase.FAILED, over, over.summary)
            if self.health is not None and verdict.phase is Phase.RUNNING and \
                    (suspect := self.health()):
                verdict = Verdict(Phase.FAILED, suspect, suspect.summary)
            if verdict.phase is Phase.RUNNING:
                running_since = running_since or time.monotonic()
                if time.monotonic() - running_since > self.budgets.run_s:
                    verdict = stalled(self.name, self.budgets.run_s, self.sink.tail_lines())
            category = verdict.diagnosis.category if verdict.diagnosis else None
            if category in (FailureCategory.QUEUE_TIMEOUT, FailureCategory.STALLED) and \
                    (failing := self._failing()):
                budget = (self.budgets.queue_s if category is FailureCategory.QUEUE_TIMEOUT
                          else self.budgets.run_s)
                verdict = api_down(self.name, budget, failing)
            if verdict.reason != last_reason and verdict.phase in (Phase.QUEUED, Phase.RUNNING):
                self.logger.info("%s", verdict.reason)
                last_reason = verdict.reason
            if verdict.phase in (Phase.SUCCEEDED, Phase.FAILED):
                self.noticed_at = time.monotonic()
                self._last_charge()
                return self._settle(verdict)

    def _refused(self) -> Diagnosis | None:
        """The first read of this watch the API server refused with 403, diagnosed."""
        sources = [*((f"list and watch the run's {w.label}", w.denied) for w in self.watches),
                   ("read the program's log", self.follower.denied),
                   ("read the pods and nodes of a JobSet that failed", self.lost_nodes.denied),
                   *self._denied]
        return next((forbidden_diagnosis(what, denied) for what, denied in sources
                     if denied is not None), None)

    def _end_refused(self, refused: Diagnosis) -> Verdict:
        self.noticed_at = time.monotonic()
        self._last_charge()
        return Verdict(Phase.FAILED, refused, refused.summary)

    def _last_charge(self) -> None:
        """The submission's end: the slice is charged up to now from its pods as the API
        serves them (one read), with their record (spend.py). The ticks charge only while
        the JobSet runs, through the watch's copies, which a watch gap (dropped, the API
        answering 5xx) or a lagging pod watch can leave without the slice ever bound."""
        if self.spend is not None:
            live = self.lost_nodes.pods(f"{JOBSET_NAME}={self.name}")
            if live is not None and self.spend.slice_unseen:
                # a slice that came and went behind a lagging pod watch has its record only
                # in the versions the watch has yet to deliver (spend.py BoundPods)
                self.pods.catch_up(live, self.budgets.log_drain_s)
            self._charge(self._mine(live or []) or self._pods())

    def _charge(self, pods: list[Obj]) -> Diagnosis | None:
        """Charge the meter with the pods there are and those seen bound that are gone."""
        assert self.spend is not None
        return self.spend.charge(pods, self.bound.gone(pods))

    def _settle(self, verdict: Verdict) -> Verdict:
        """Let the log follower read the program's last lines, then diagnose again with them:
        a traceback's last line is what turns "exit 1" into a cause. Only a program that
        terminated has a log that ends; one still running (a worker crashed, the JobSet was
        deleted) would only run out ``log_drain_s``, so it gets one tick to be seen
        terminated (its pod's update may trail the JobSet's on another watch)."""
        category = verdict.diagnosis.category if verdict.diagnosis else None
        if category in (FailureCategory.PREEMPTED, FailureCategory.STALLED,
                        FailureCategory.CANCELLED) or not self._terminated_soon():
            return verdict
        self.follower.wait_drained(self.budgets.log_drain_s)
        if verdict.phase is Phase.SUCCEEDED:
            return verdict
        again = self._observe()
        return again if again.phase is Phase.FAILED else verdict

    def _terminated_soon(self) -> bool:
        deadline = time.monotonic() + self.budgets.tick_s
        while True:
            state = container_state(self._coordinator(), WORKLOAD_CONTAINER)
            if state == "terminated" or time.monotonic() >= deadline or state != "running":
                return state == "terminated"
            self._changed.wait(max(0.0, deadline - time.monotonic()))
            self._changed.clear()

    def _observe(self) -> Verdict:
        jobset = self.jobsets.get(self.name)
        if jobset is None or jobset["metadata"]["uid"] != self.uid:
            return deleted_from_outside(self.name, self.namespace, self.last_jobset)
        self.last_jobset = jobset
        disruptions = self._disruptions(jobset)
        workloads = self.workloads.snapshot()
        workload = max(workloads, key=lambda w: w["metadata"].get("creationTimestamp", ""),
                       default=None)
        if condition(workload, "Admitted") is None:
            self._ran_since_admitted = False
        verdict = diagnose(Observation(
            jobset, workload, self._pods(), self.sink.tail_lines(),
            pull_errors=self._remembered(self.pull_errors),
            autoscaler_events=self._scaling_events(), disruptions=disruptions,
            ran_since_admitted=self._ran_since_admitted), self.budgets, datetime.now(UTC))
        verdict = self._cohort(self._queued(verdict, workload), workload)
        if verdict.phase is Phase.RUNNING:
            self._ran_since_admitted = True
        if self.served is None and verdict.phase is not Phase.FAILED:
            self._note_served()
        return verdict

    def _queued(self, verdict: Verdict, workload: Obj | None) -> Verdict:
        """Queued provisioning (watch/queued.py): the ProvisioningRequests name why a
        JobSet waits, or why Kueue deactivated its Workload. Read (one list) only for a
        Workload with admission checks, again when the Workload changes."""
        waiting = verdict.phase is Phase.QUEUED or (verdict.diagnosis is not None and (
            verdict.diagnosis.code == DEACTIVATED_CODE
            or verdict.diagnosis.category is FailureCategory.QUEUE_TIMEOUT))
        if not waiting or not ((workload or {}).get("status") or {}).get("admissionChecks"):
            return verdict
        version = str((workload or {}).get("metadata", {}).get("resourceVersion"))
        if self._requests_version != version:
            try:
                listed = self.cluster.custom.list_namespaced_custom_object(
                    PR_GROUP, PR_VERSION, self.namespace, PR_PLURAL, _request_timeout=(
                        self.settings.connect_timeout_s, self.settings.read_timeout_s))
                assert isinstance(listed, dict)  # a list's JSON, typed `object` by the client
                self._requests = listed.get("items") or []
                self._requests_version = version
            except Exception as exc:  # the API failing: the ordinary verdict stands this tick
                if (denied := denied_by(exc)) is not None:  # refused: the loop ends on it
                    self._denied.append(("list the ProvisioningRequests of queued "
                                         "provisioning", denied))
                return verdict
        found = queued_diagnosis(self.name, workload, self._requests, datetime.now(UTC),
                                 self.budgets.queue_s)
        if found is None:
            return verdict
        line, diagnosis = found
        return (Verdict(Phase.FAILED, diagnosis, diagnosis.summary) if diagnosis
                else Verdict(Phase.QUEUED, None, line))

    def _cohort(self, verdict: Verdict, workload: Obj | None) -> Verdict:
        """A team's JobSet waiting for chips another team of its cohort borrows: the queued
        line names the borrower (watch/kueue_cohort.py). The ClusterQueues are listed (one
        cluster-scoped list) only for a Workload short of unused TPU quota, again when the
        Workload changes. A team's LocalQueue and ClusterQueue share their name
        (team_queues.py), so the Workload's queueName names its ClusterQueue."""
        message = verdict.reason
        if verdict.phase is not Phase.QUEUED or "insufficient unused quota" not in message:
            return verdict
        version = str((workload or {}).get("metadata", {}).get("resourceVersion"))
        if self._cohort_version != version:
            try:
                listed = self.cluster.custom.list_cluster_custom_object(
                    KUEUE_GROUP, self._kueue_version, "clusterqueues", _request_timeout=(
                        self.settings.connect_timeout_s, self.settings.read_timeout_s))
                assert isinstance(listed, dict)  # a list's JSON, typed `object` by the client
                queue = str(((workload or {}).get("spec") or {}).get("queueName") or "")
                self._cohort_line = cohort_wait(workload, queue, listed.get("items") or [])
                self._cohort_version = version
            except Exception as exc:  # the API failing: the ordinary verdict stands this tick
                if denied_by(exc) is not None:  # refused (a Role from before teams had
                    # queues): the line is a courtesy, not worth failing the stage for
                    self._cohort_version = version
                    self._cohort_line = None
                    self.logger.warning(
                        "%s: cannot list ClusterQueues (%s): re-apply deployments/work-pool/"
                        "rbac.yaml to see which team borrows the chips it waits for",
                        self.name, exc.__class__.__name__)
                return verdict
        if self._cohort_line is None:
            return verdict
        return Verdict(Phase.QUEUED, None, f"{self.name} is queued, {self._cohort_line} "
                       f"({message.removeprefix(f'{self.name} is queued: ')})")

    def _note_served(self) -> None:
        """Once every TPU pod is bound, read its nodes (one GET each, once) and log the
        zone, mode and pool the slice came up in."""
        names = tpu_node_names(self._pods())
        if not names:
            return
        read = []
        for node in sorted(names):
            try:
                read.append(self.cluster.core.read_node(node, _request_timeout=(
                    self.settings.connect_timeout_s, self.settings.read_timeout_s)))
            except Exception as exc:  # gone: says nothing; refused: the loop ends on it
                if (denied := denied_by(exc)) is not None:
                    self._denied.append(("read the nodes the slice came up on", denied))
                continue
        nodes = [n.to_dict() for n in read]
        self.served_at = time.monotonic()
        self.served = served_by(nodes) or Served("", "", "", len(names))
        self.logger.info("%s: %s", self.name, self.served.line())

    def _disruptions(self, jobset: Obj) -> dict[str, str]:
        """The disruptions of the JobSet's current attempt (one its failure policy restarted
        is over), and, once it failed with none seen, pods still bound to a node that no
        longer exists: the VM went before the kubelet could post anything and PodGC has
        not run yet (kubernetes pkg/controller/podgc/gc_controller.go waits 40 s).

        A pod counts only if a live read, made after its node was found gone, still shows it
        unfinished on that node: the watch's copy may be older than the node's absence. A
        program that failed on its own has its pods terminated by a live kubelet and removed
        before the autoscaler's scale-down removes their nodes (10 min later by default), so
        reading in that order never mistakes the slice's tidy end for its loss."""
        if (found := self._seen_disrupted(jobset)) or not condition(jobset, "Failed"):
            return found
        # the pod watch is a stream of its own and may lag the JobSet's: the pods as they
        # are now, read once the JobSet failed, may carry the disruption it has not delivered
        read = self.lost_nodes.pods(f"{JOBSET_NAME}={self.name}")
        live = self._mine(read or [])
        for pod in live:
            self._observe_pod(pod)
        if found := self._seen_disrupted(jobset):
            return found
        if read is not None and (deleted := self._deleted_since(live)):
            # PodGC deletes the pods a lost node left behind: only the versions the watch
            # has yet to deliver hold their DisruptionTarget (watch/lost_nodes.py)
            self.pods.await_gone(deleted, self.budgets.log_drain_s)
            if found := self._seen_disrupted(jobset):
                return found
        for pod in live or self._pods():
            node = (pod.get("spec") or {}).get("nodeName")
            if node and unfinished(pod) and self.lost_nodes.outlived(pod, node):
                found[pod["metadata"]["name"]] = f"node {node} no longer exists"
        return found

    def _deleted_since(self, live: list[Obj]) -> set[str]:
        """The pods the watch still holds unfinished on a node that a live read no longer
        finds: deleted behind the watch."""
        there = {p["metadata"]["name"] for p in live}
        return {p["metadata"]["name"] for p in self._pods() if unfinished(p)
                and (p.get("spec") or {}).get("nodeName") and p["metadata"]["name"] not in there}

    def _seen_disrupted(self, jobset: Obj) -> dict[str, str]:
        restarts = _restarts(jobset)
        with self._memory:
            return {pod: why for pod, (at, why) in self.disruptions.items() if at == restarts}


def _restarts(jobset: Obj | None) -> int:
    return int(((jobset or {}).get("status") or {}).get("restarts") or 0)


def _attempt_of(pod: Obj, jobset: Obj | None) -> int:
    """The restart attempt a pod was created for, from its own label: an old attempt's pod
    is still stopping after ``status.restarts`` grew (the JobSet deletes the old Jobs only
    in a later reconcile), and a disruption it reports then is that attempt's, not the new
    one's. The JobSet's count is the guess only for a pod without the label."""
    label = ((pod.get("metadata") or {}).get("labels") or {}).get(RESTART_ATTEMPT)
    try:
        return int(label) if label is not None else _restarts(jobset)
    except ValueError:
        return _restarts(jobset)
