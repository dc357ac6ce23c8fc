"""A TPU node pool that autoscales from zero, with GKE's cluster autoscaler, on FakeKube.

What it does, and where the real behaviour is decided:
- A pending pod whose Job asks for the TPU pool (nodeSelector
  cloud.google.com/gke-tpu-accelerator) and finds no node is unschedulable: PodScheduled
  False, reason Unschedulable, with the scheduler's message (kube-scheduler's "0/N nodes are
  available: ... didn't match Pod's node affinity/selector").
- The autoscaler scales the pool up for it, a multi-host slice all at once (GKE creates the
  slice's nodes atomically), and records ``TriggeredScaleUp`` "pod triggered scale-up:
  [{<group> 0->8 (max: 8)}]" on the pod; after ``provision_s`` the nodes exist and the pods
  are bound. Without capacity (``stockout``) it records the Warning ``FailedScaleUp`` "Node
  scale up in zones <zone> associated with this pod failed: GCE out of resources. Pod is at
  risk of not being scheduled." and then ``NotTriggerScaleUp`` "pod didn't trigger scale-up:
  1 in backoff after failed scale-up" (kubernetes/autoscaler cluster-autoscaler/FAQ.md,
  "What events are emitted by CA?"; texts as GKE clusters print them).
- Nodes no running pod needs are removed after ``unneeded_s`` (--scale-down-unneeded-time,
  10 min by default: kubernetes/autoscaler cluster-autoscaler/config/const.go
  DefaultScaleDownUnneededTime; seconds here), the whole slice together, and never within
  ``delay_after_add_s`` of the last scale-up anywhere in the cluster
  (--scale-down-delay-after-add, 10 min by default: cluster-autoscaler/main.go;
  core/static_autoscaler.go RunOnce sets ``lastScaleUpTime`` when a scale-up is
  triggered, keeps tracking the unneeded nodes every loop, and skips the removal while
  ``lastScaleUpTime + ScaleDownDelayAfterAdd`` is after now). ``scaled_up_elsewhere``
  is another node group's scale-up (cpu-np's for the next stage). Each node carries
  its creationTimestamp, and ``pool.history`` the clock time of every change, so a test can
  say what GCP billed: the nodes' lifetime. ``clock`` is the autoscaler's time (a test's
  clock moves "10 minutes" at once; wall time by default).
- A triggered scale-up is carried out even when its pods are gone by then (their JobSet
  deleted by a fallback, a cap or Ctrl-C): the autoscaler resized the node group
  (core/scaleup/orchestrator/executor.go executeScaleUp → NodeGroup.IncreaseSize, a GCE
  managed instance group resize) and nothing cancels it; the nodes come up idle and go
  as unneeded.
- ``preempt()`` (spot) and a flex-start node's ``max_run_s`` end the nodes: their pods get
  DisruptionTarget "Pod was terminated in response to imminent node shutdown." and the JobSet
  fails (as scenarios.disrupt_and_fail); the replacement pods wait for a new scale-up.
- When a JobSet has finished (Completed or Failed) the JobSet controller deletes its active
  child Jobs (kubernetes-sigs/jobset pkg/controllers/jobset_controller.go: "If JobSet is
  already completed or failed, clean up active child jobs"), so their pods terminate and the
  nodes they held become unneeded.
- With ``reclaim`` set (spot), the end of the slice races as on a cluster (``Reclaim``):
  the kubelet's graceful shutdown may or may not post its condition, PodGC force-deletes
  the orphaned pods after its quarantine, the Job controller replaces the worker pods, and
  the Pathways head gives up on its lost workers after its own timeout, which is what
  fails the JobSet.
- The nodes carry the labels and taint GKE gives a pool of the pool's machine type and
  topology (tpu_nodes.py), with the pool's own ``labels`` (its capacity mode's). A pod they
  do not fit (nodeSelector, tolerations) is never bound and never scales the pool up:
  NotTriggerScaleUp "didn't match Pod's node affinity/selector", as with ``mismatch``.
Containers do not start (the scenario script waits) until the JobSet's TPU pods are bound.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.fakes.kube_api.reclaim import (
    Reclaim,
    head_gives_up,
    later,
    pod_gc,
    replacement,
    shut_down_by_kubelet,
)
from tests.fakes.kube_api.scenarios import NS, _resumed, disrupt_and_fail, started

# the control plane's actions need no node; the program's wait for the pods to be bound
from tests.fakes.kube_api.scheduler import CONTROL_PLANE, TPU_SELECTOR
from tests.fakes.kube_api.store import FakeKube, condition, now_iso, terminated
from tests.fakes.kube_api.tpu_nodes import TPU_TAINT, fits, gke_tpu_labels

Obj = dict[str, Any]


@dataclass
class TpuPool:
    name: str = "gke-tpu-v6e-pool"
    hosts: int = 8
    zone: str = "us-east5-b"
    # what GKE labels the nodes by (tpu_nodes.gke_tpu_labels): the tutorial's slice
    machine_type: str = "ct6e-standard-4t"
    topology: str = "4x8"
    # the pool's further node labels (its capacity mode's: tpu_nodes.MODE_LABELS; the
    # blueprint's kubernetes_labels) and its nodes' taints (GKE's TPU taint)
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Obj] = field(default_factory=lambda: [dict(TPU_TAINT)])
    stockout: bool = False
    provision_s: float = 0.3
    scale_up_backoff_s: float = 0.2  # after a failed scale-up (5 min on a cluster)
    unneeded_s: float = 0.5
    max_run_s: float | None = None  # flex-start: the nodes' lifetime
    reclaim: Reclaim | None = None  # spot: the race of Reclaim; None: JobSet fails at once
    # the pool cannot hold the pods (another machine type or topology than they ask for):
    # the autoscaler never scales it up and says why on every loop
    mismatch: bool = False
    # what happened, for the tests: (monotonic time, node count) at every change
    history: list[tuple[float, int]] = field(default_factory=list)
    # the project GKE names in each node's spec.providerID, gce://PROJECT/ZONE/NODE (the
    # GCE cloud provider's makeProviderID; GKE names a node as its VM): None leaves it out,
    # as a node of another provider has none of that form (tests/fakes/cloud/instances.py
    # answers for the nodes that name one)
    gce_project: str | None = None

    def node_labels(self) -> dict[str, str]:
        """GKE's labels on a node of this pool (tpu_nodes.py), with the pool's own."""
        return {**gke_tpu_labels(self.machine_type, self.topology, self.name, self.zone),
                **self.labels}

    def node_spec(self, node: str) -> Obj:
        """A new node's spec: the pool's taints, and its VM when the pool names a project."""
        provider = {"providerID": f"gce://{self.gce_project}/{self.zone}/{node}"} \
            if self.gce_project else {}
        return {"taints": [dict(t) for t in self.taints], **provider}


class Autoscaler:
    """Ticks in a thread; ``stop()`` ends it. One TPU pool (the tutorial has one slice)."""

    def __init__(self, kube: FakeKube, pool: TpuPool, tick_s: float = 0.05,
                 clock: Callable[[], float] = time.monotonic,
                 delay_after_add_s: float = 0.0,
                 wall: Callable[[], float] | None = None) -> None:
        self.kube, self.pool, self.tick_s, self.clock = kube, pool, tick_s, clock
        # a test that moves ``clock`` gives the wall-clock time it stands for: the nodes'
        # creationTimestamp then says when they were made in the test's time
        self.wall = wall
        self.delay_after_add_s = delay_after_add_s  # --scale-down-delay-after-add, scaled
        self.last_scale_up: float | None = None  # lastScaleUpTime, the cluster's
        self.nodes: list[str] = []
        self.nodes_since = 0.0
        self.provisioning_until: float | None = None
        self.backoff_until: float | None = None  # after a failed scale-up
        self.unneeded_since: float | None = None
        self.preemptions = 0
        self.late_s = 0.0  # the latest a tick came beyond its interval (see _run)
        self.generation = 0  # slices created so far
        self.lost: set[str] = set()  # nodes reclaimed; pods bound to them await PodGC
        self._told: set[tuple[str, str]] = set()  # (pod, reason) already recorded
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="fake-autoscaler")
        kube.action_gate = self._gate
        kube.tpu_pool_binds = True  # its TPU pods are created unbound (scheduler.unbound)
        pool.history.append((clock(), 0))
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.kube.action_gate = None
        self.kube.tpu_pool_binds = False

    # --- what tests ask -----------------------------------------------------------------
    @property
    def peak_nodes(self) -> int:
        return max(n for _, n in self.pool.history)

    def node_seconds(self) -> float:
        """Node-seconds the pool's nodes existed so far (what GCP bills per VM)."""
        total, history = 0.0, [*self.pool.history, (self.clock(), 0)]
        for (since, count), (until, _) in itertools.pairwise(history):
            total += count * (until - since)
        return total

    def scaled_up_elsewhere(self) -> None:
        """Another node group of the cluster scaled up now (cpu-np for the next stage):
        lastScaleUpTime is the cluster's, so the TPU nodes wait out the delay after it."""
        with self.kube.cond:
            self.last_scale_up = self.clock()

    def preempt(self) -> None:
        """Spot: GCE reclaims the slice now."""
        with self.kube.cond:
            self._end_nodes("preempted")

    # --- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self.tick_s):
            with self.kube.cond:
                if self.kube.closed:
                    return
                # how much later than its interval this tick came (a busy machine's thread
                # scheduling): the nodes it adds or removes live that much longer than the
                # fake's timings say; a test that compares a meter with them allows for it
                self.late_s = max(self.late_s, time.monotonic() - last - self.tick_s)
                self._tick(self.clock())
                last = time.monotonic()

    def _tick(self, now: float) -> None:
        self._clean_up_finished_jobsets()
        self._kubelet_removes_deleted_pods()
        pods = [p for p in self.kube.find("pods", NS) if self._wants_tpu(p) and not
                _finished(p) and not p["metadata"].get("deletionTimestamp")
                and p["spec"].get("nodeName") not in self.lost]  # orphans never move
        unbound = [p for p in pods if not p["spec"].get("nodeName")
                   or p["spec"]["nodeName"] not in self.nodes]
        if self.nodes and self.pool.max_run_s is not None and \
                now - self.nodes_since > self.pool.max_run_s:
            self._end_nodes("reached max_run_duration")
            return
        for pod in unbound:
            self._unschedulable(pod)
        refused = unbound if self.pool.mismatch else self._refused(unbound)
        if refused:
            # cluster-autoscaler processors/status/eventing_scale_up_processor.go:
            # "pod didn't trigger scale-up: " + ReasonsMessage ("<count> <reason>"), the
            # reason being the scheduler's NodeAffinity predicate on the group's template;
            # kube-scheduler binds none of them to the pool's nodes either
            for pod in refused:
                self._event(pod, "Normal", "NotTriggerScaleUp", "pod didn't trigger "
                            "scale-up: 1 node(s) didn't match Pod's node affinity/selector")
            return
        if (unbound or self.provisioning_until is not None) and not self.nodes:
            self._scale_up(unbound, now)  # a triggered scale-up completes without its pods
        if self.nodes and unbound:
            for pod in unbound:
                self._bind(pod)
        self._scale_down(bool(pods), now)

    def _scale_up(self, pods: list[Obj], now: float) -> None:
        """One attempt: TriggeredScaleUp, then the VMs come up after ``provision_s``, or in
        a stockout GCE fails them: FailedScaleUp, and the node group backs off
        (kubernetes/autoscaler cluster-autoscaler --initial-node-group-backoff-duration,
        5 min doubling to --max-node-group-backoff-duration 30 min) with NotTriggerScaleUp
        "in backoff", then tries again. A repeated (reason, message) on the same pod
        updates the one Event (count, lastTimestamp), as client-go's event correlator does
        (staging/src/k8s.io/client-go/tools/record/events_cache.go)."""
        pool = self.pool
        if self.provisioning_until is None:
            if self.backoff_until is not None and now < self.backoff_until:
                return
            self.backoff_until = None
            self.provisioning_until = now + pool.provision_s
            self.last_scale_up = now
            self._triggered(pods, pool)
            return
        if now >= self.provisioning_until and pool.stockout:
            self.provisioning_until = None
            self.backoff_until = now + pool.scale_up_backoff_s
            for pod in pods:
                self._event(pod, "Warning", "FailedScaleUp",
                            f"Node scale up in zones {pool.zone} associated with this pod "
                            "failed: GCE out of resources. Pod is at risk of not being "
                            "scheduled.", again=True)
                self._event(pod, "Normal", "NotTriggerScaleUp",
                            "pod didn't trigger scale-up: 1 in backoff after failed scale-up",
                            again=True)
            return
        if now >= self.provisioning_until:
            self.provisioning_until = None
            # GKE names each VM of a new slice afresh (<pool>-<random>-<suffix>), so a
            # replacement slice never reuses a lost node's name
            self.generation += 1
            self.nodes = [f"{pool.name}-{self.generation:04x}-node-{i}"
                          for i in range(pool.hosts)]
            self.nodes_since = now
            for node in self.nodes:
                self.kube.create("nodes", "", {"metadata": {
                    "name": node, "creationTimestamp": now_iso(),
                    # GKE's TPU labels, its node pool and its zone (kubernetes
                    # well_known_labels.go): tpu_nodes.py
                    "labels": pool.node_labels()},
                    "spec": pool.node_spec(node)}, self._stamp())
            pool.history.append((now, len(self.nodes)))

    def _stamp(self) -> str | None:
        """A new node's creationTimestamp in the test's time, when it moves the clock."""
        if self.wall is None:
            return None
        return datetime.fromtimestamp(self.wall(), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _scale_down(self, needed: bool, now: float) -> None:
        if not self.nodes or needed:
            self.unneeded_since = None
            return
        self.unneeded_since = self.unneeded_since or now
        cooling = self.last_scale_up is not None and \
            now - self.last_scale_up < self.delay_after_add_s
        if now - self.unneeded_since >= self.pool.unneeded_s and not cooling:
            for node in self.nodes:
                self.kube.delete("nodes", "", node)
            self.nodes, self.unneeded_since = [], None
            self.pool.history.append((now, 0))

    def _end_nodes(self, why: str) -> None:
        """The slice's VMs are gone: their pods are disrupted and their JobSet fails."""
        if not self.nodes:
            return
        self.preemptions += why == "preempted"
        jobsets = {p["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name")
                   for p in self.kube.find("pods", NS)
                   if p["spec"].get("nodeName") in self.nodes and not _finished(p)}
        lost = list(self.nodes)
        if self.pool.reclaim is not None and why == "preempted":
            self._reclaim(self.pool.reclaim, lost, sorted(filter(None, jobsets)))
            return
        for node in lost:
            self.kube.delete("nodes", "", node)
        self.nodes = []
        self.pool.history.append((self.clock(), 0))
        for name in filter(None, jobsets):
            disrupt_and_fail(self.kube, name)

    def _reclaim(self, how: Reclaim, lost: list[str], jobsets: list[str]) -> None:
        """Spot reclaim as the controllers race it (Reclaim's docstring has the sources)."""
        kube = self.kube
        on_lost = [p for p in kube.find("pods", NS) if p["spec"].get("nodeName") in lost
                   and not _finished(p)]
        if how.kubelet_posts:
            for pod in on_lost:
                kube.mutate("pods", NS, pod["metadata"]["name"], shut_down_by_kubelet)
            for node in lost:
                kube.create("events", NS, {
                    "metadata": {"name": f"{node}.nodeshutdown"},
                    "involvedObject": {"kind": "Node", "name": node},
                    "reason": "NodeShutdown", "type": "Normal",
                    "message": "Shutdown manager detected shutdown event",
                    "source": {"component": "kubelet", "host": node}, "count": 1,
                    "firstTimestamp": now_iso(), "lastTimestamp": now_iso()})
        for node in lost:
            kube.delete("nodes", "", node)
        self.nodes = []
        self.lost |= set(lost)
        self.pool.history.append((self.clock(), 0))
        for pod in on_lost:  # the worker Job's controller replaces its lost pods
            kube.create("pods", NS, replacement(pod, kube.rv))
        gone = {p["metadata"]["name"] for p in on_lost}
        if how.pod_gc_s is not None:
            later(how.pod_gc_s, kube, lambda: pod_gc(kube, gone))
        for name in jobsets:
            later(how.program_gives_up_s, kube, lambda name=name: head_gives_up(kube, name))

    def _clean_up_finished_jobsets(self) -> None:
        for jobset in self.kube.find("jobsets", NS):
            conds = (jobset.get("status") or {}).get("conditions") or []
            if not any(c["type"] in ("Completed", "Failed") and c["status"] == "True"
                       for c in conds):
                continue
            name = jobset["metadata"]["name"]
            for pod in self.kube.find("pods", NS, f"jobset.sigs.k8s.io/jobset-name={name}"):
                if not _finished(pod) and not pod["metadata"].get("deletionTimestamp"):
                    self.kube.mutate("pods", NS, pod["metadata"]["name"], lambda o: o[
                        "metadata"].update(deletionTimestamp=now_iso()))

    def _kubelet_removes_deleted_pods(self) -> None:
        """A pod given a deletionTimestamp on a live node: its kubelet stops the containers
        and then deletes the pod for good (kubernetes pkg/kubelet/status/status_manager.go:
        once ``canBeDeleted``, a Delete with grace period 0). So the slice's nodes are empty
        before the autoscaler can find them unneeded (it runs in the same tick, after this).
        A pod on a lost node has no kubelet: it waits for PodGC (``Reclaim``)."""
        for pod in self.kube.find("pods", NS):
            if pod["metadata"].get("deletionTimestamp") and \
                    pod["spec"].get("nodeName") in self.nodes:
                if not _finished(pod):  # SIGTERM: the terminal phase is posted first
                    self.kube.mutate("pods", NS, pod["metadata"]["name"], _terminated)
                self.kube.delete("pods", NS, pod["metadata"]["name"])

    # --- pods ----------------------------------------------------------------------------
    def _refused(self, pods: list[Obj]) -> list[Obj]:
        """The pods the pool's nodes cannot take (tpu_nodes.fits on the pool's template node:
        its labels and taints), which neither the autoscaler nor the scheduler acts on."""
        return [p for p in pods if not fits(p, self.pool.node_labels(), self.pool.taints)]

    def _wants_tpu(self, pod: Obj) -> bool:
        labels = pod["metadata"].get("labels") or {}
        job = (f"{labels.get('jobset.sigs.k8s.io/jobset-name')}-"
               f"{labels.get('jobset.sigs.k8s.io/replicatedjob-name')}-"
               f"{labels.get('jobset.sigs.k8s.io/job-index')}")
        found = self.kube.objects.get(("jobs", NS, job))
        selector = ((found or {}).get("spec", {}).get("template", {}).get("spec", {})
                    .get("nodeSelector") or {})
        return TPU_SELECTOR in selector

    def _unschedulable(self, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        if (name, "Unschedulable") in self._told:
            return
        self._told.add((name, "Unschedulable"))

        def change(obj: Obj) -> None:
            obj["spec"]["nodeName"] = ""
            conds = obj["status"].setdefault("conditions", [])
            conds[:] = [c for c in conds if c["type"] != "PodScheduled"] + [condition(
                "PodScheduled", "False", "Unschedulable",
                "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector. "
                "preemption: 0/4 nodes are available: 4 Preemption is not helpful for "
                "scheduling.")]
        self.kube.mutate("pods", NS, name, change)

    def _bind(self, pod: Obj) -> None:
        index = int(pod["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index",
                                                  0))
        node = self.nodes[index % len(self.nodes)]

        def change(obj: Obj) -> None:
            obj["spec"]["nodeName"] = node
            conds = obj["status"].setdefault("conditions", [])
            conds[:] = [c for c in conds if c["type"] != "PodScheduled"] + [condition(
                "PodScheduled", "True", "Scheduled")]
        self.kube.mutate("pods", NS, pod["metadata"]["name"], change)
        self._kubelet_starts(pod["metadata"]["name"])

    def _kubelet_starts(self, pod: str) -> None:
        """A worker pod that an InOrder JobSet's start made (scenarios.start: the head ran,
        the workers' Jobs were resumed) starts once it is bound; with every pod running the
        JobSet's startup is complete."""
        obj = self.kube.objects.get(("pods", NS, pod))
        name = ((obj or {}).get("metadata", {}).get("labels") or {}).get(
            "jobset.sigs.k8s.io/jobset-name")
        js = self.kube.objects.get(("jobsets", NS, str(name)))
        if obj is None or js is None or not any(
                c["type"] == "StartupPolicyInProgress" and c["status"] == "True"
                for c in (js.get("status") or {}).get("conditions") or []):
            return

        def running(o: Obj) -> None:
            o["status"]["phase"] = "Running"
            for status in o["status"].get("containerStatuses") or []:
                status["state"] = {"running": {"startedAt": now_iso()}}
        self.kube.mutate("pods", NS, pod, running)
        if all(started(self.kube, str(name), r["name"]) for r in js["spec"]["replicatedJobs"]):
            _resumed(self.kube, str(name))

    def _triggered(self, pods: list[Obj], pool: Any) -> None:
        """The autoscaler's TriggeredScaleUp on every pending pod, naming the group it grows."""
        for pod in pods:
            self._event(pod, "Normal", "TriggeredScaleUp",
                        f"pod triggered scale-up: [{{{pool.name} 0->{pool.hosts} "
                        f"(max: {pool.hosts})}}]", again=True)

    def _event(self, pod: Obj, kind: str, reason: str, message: str,
               again: bool = False) -> None:
        name = pod["metadata"]["name"]
        if (name, reason) in self._told:
            if again:
                def seen_again(event: Obj) -> None:
                    event.update(count=int(event.get("count") or 1) + 1,
                                 lastTimestamp=now_iso())
                self.kube.mutate("events", NS, f"{name}.{reason.lower()}", seen_again)
            return
        self._told.add((name, reason))
        self.kube.create("events", NS, {
            "metadata": {"name": f"{name}.{reason.lower()}"},
            "involvedObject": {"kind": "Pod", "namespace": NS, "name": name,
                               "uid": pod["metadata"].get("uid")},
            "reason": reason, "message": message, "type": kind,
            "source": {"component": "cluster-autoscaler"}, "count": 1,
            "firstTimestamp": now_iso(), "lastTimestamp": now_iso()})

    def _gate(self, jobset: str, action: str) -> bool:
        """Hold the program's actions until the JobSet's TPU pods run on nodes."""
        if action in CONTROL_PLANE:
            return True
        with self.kube.cond:
            pods = [p for p in self.kube.find("pods", NS,
                                              f"jobset.sigs.k8s.io/jobset-name={jobset}")
                    if self._wants_tpu(p)]
            return all(p["spec"].get("nodeName") in self.nodes for p in pods)


def _terminated(pod: Obj) -> None:
    pod["status"]["phase"] = "Failed"
    for status in pod["status"].get("containerStatuses") or []:
        status["state"] = terminated(143, "Error", status.get("state"))


def _finished(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
