"""Several autoscaled TPU pools, one per (capacity mode, zone), with the cluster autoscaler
choosing among them, on FakeKube.

nodepools.Autoscaler is the one-pool autoscaler (its docstring has the events and their
sources); this extends it to a regional cluster the way the cluster autoscaler handles many
node groups (kubernetes/autoscaler, cluster-autoscaler, commit bdef0a7):
- core/scaleup/orchestrator/orchestrator.go ``ScaleUp``: the node groups are filtered
  (``filterValidScaleUpNodeGroups``, which skips a group ``IsNodeGroupReadyToScaleUp``
  refuses: "in backoff after failed scale-up", skippedreasons.go ``BackoffReason``), an
  expansion option is computed for each group the pending pods fit on (the scheduler's
  predicates on the group's template node: node selector, taints), and
  ``ExpanderStrategy.BestOption`` picks one. The default ``--expander`` is ``random``
  (config/autoscaling_options.go); ``expander="priority"`` is expander/priority, here
  ordered by the groups' order (the profile's zone order). ``allOrNothing`` (a multi-host
  TPU slice): a group that cannot take every pod of the slice is no option.
- clusterstate/clusterstate.go ``RegisterFailedScaleUp`` → ``backoffNodeGroup``: a failed
  scale-up (GCE's stockout, "out of resources") backs the one node group off, exponential
  per group (utils/backoff/exponential_backoff.go ``Backoff``: initial 5 min, doubled while
  it keeps failing, at most 30 min; reset after 3 h without failure). The next loop then
  picks another group that fits, in another zone or mode, which is what brings a slice up
  wherever there is capacity.
- A multi-host TPU slice is one node group that scales 0 → hosts at once (GKE creates a
  multi-host slice's VMs atomically), so the slice is whole in one zone, or not there.

Stockouts are windows of the autoscaler's clock per group (``NodeGroup.stockouts``): GKE's
``FailedScaleUp`` "GCE out of resources" lasts hours for a zone and mode; the tests scale the
hours down to fractions of a second. ``history`` per group is what GCP billed.
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.kube_api import tpu_nodes
from tests.fakes.kube_api.nodepools import TPU_SELECTOR, Autoscaler, TpuPool
from tests.fakes.kube_api.reclaim import Reclaim
from tests.fakes.kube_api.store import FakeKube, now_iso
from tests.fakes.kube_api.tpu_nodes import NODEPOOL_LABEL, TPU_TAINT, ZONE_LABEL

Obj = dict[str, Any]
__all__ = ["NODEPOOL_LABEL", "TPU_SELECTOR", "ZONE_LABEL", "ClusterAutoscaler", "NodeGroup",
           "fits", "regional_groups"]


@dataclass
class NodeGroup(TpuPool):
    """One autoscaled TPU pool: a capacity mode in a zone, with the labels and taints its
    nodes carry (GKE's: ``cloud.google.com/gke-spot``, ``gke-flex-start``, the
    ``cloud.google.com/gke-queued`` taint, ``topology.kubernetes.io/zone``)."""

    mode: str = "on-demand"
    # (from, until) on the autoscaler's clock: no capacity for this group then
    stockouts: list[tuple[float, float]] = field(default_factory=list)
    failures: int = 0  # failed scale-ups, for the tests
    backoff_s: float = 0.0  # the current back-off (doubles while it keeps failing)
    backoff_until: float | None = None

    def out_of_stock(self, now: float) -> bool:
        return self.stockout or any(start <= now < end for start, end in self.stockouts)


def fits(pod: Obj, group: NodeGroup) -> bool:
    """The scheduler's predicates on the group's template node, which the autoscaler runs in
    its simulation of a scale-up (tpu_nodes.fits)."""
    return tpu_nodes.fits(pod, group.node_labels(), group.taints)


class ClusterAutoscaler(Autoscaler):
    """The cluster autoscaler over ``groups``; ``self.pool`` is the group that holds the
    slice now (or held it last), so the one-pool behaviour (binding, scale-down, preemption,
    flex-start's maximum run) applies to it unchanged."""

    def __init__(self, kube: FakeKube, groups: list[NodeGroup], tick_s: float = 0.05,
                 clock: Callable[[], float] = time.monotonic, expander: str = "priority",
                 initial_backoff_s: float = 0.2, max_backoff_s: float = 1.2,
                 seed: int = 0, delay_after_add_s: float = 0.0) -> None:
        self.groups, self.expander = groups, expander
        self.initial_backoff_s, self.max_backoff_s = initial_backoff_s, max_backoff_s
        self._random = random.Random(seed)
        self.attempt: NodeGroup | None = None  # the group being scaled up now
        self.scale_ups: list[tuple[float, str, bool]] = []  # (time, group, succeeded)
        # groups only a ProvisioningRequest scales (queued provisioning: provisioning.py)
        self.excluded: set[str] = set()
        self.refused: set[str] = set()  # pods the scheduler would not bind to the slice
        for group in groups:
            if group is not groups[0]:
                group.history.append((clock(), 0))
        super().__init__(kube, groups[0], tick_s, clock, delay_after_add_s)

    # --- what tests ask -------------------------------------------------------------------
    def group(self, mode: str, zone: str) -> NodeGroup:
        return next(g for g in self.groups if g.mode == mode and g.zone == zone)

    def tpu_nodes(self) -> list[Obj]:
        with self.kube.cond:
            return [n for n in self.kube.find("nodes", "")
                    if TPU_SELECTOR in (n["metadata"].get("labels") or {})]

    def node_seconds(self) -> float:
        saved, total = self.pool, 0.0
        for group in self.groups:
            self.pool = group
            total += super().node_seconds()
        self.pool = saved
        return total

    @property
    def peak_nodes(self) -> int:
        return max(n for g in self.groups for _, n in g.history)

    # --- the scale-up ----------------------------------------------------------------------
    def _scale_up(self, pods: list[Obj], now: float) -> None:
        """One loop of ScaleUp: pick a group (not backed off, fitting every pod: all or
        nothing), trigger it, and after ``provision_s`` either create the slice's nodes or
        register the failure and back the group off."""
        if self.attempt is None:
            group = self._best_option(pods, now)
            if group is None:
                self._no_option(pods, now)
                return
            self.attempt, self.pool = group, group
            self.provisioning_until = now + group.provision_s
            self.last_scale_up = now  # static_autoscaler.go: ScaleUpSuccessful, the resize
            self._triggered(pods, group)
            return
        group = self.attempt
        if self.provisioning_until is None or now < self.provisioning_until:
            return
        self.attempt, self.provisioning_until = None, None
        if group.out_of_stock(now):
            self._failed(group, pods, now)
            return
        self.scale_ups.append((now, group.name, True))
        group.backoff_s = 0.0  # a success resets the group's back-off
        self.provide(group, now)

    def provide(self, group: NodeGroup, now: float) -> None:
        """The whole slice's nodes at once, in ``group`` (GKE creates a multi-host slice's
        VMs together; a ProvisioningRequest's too)."""
        self.pool = group
        self.generation += 1
        self.nodes = [f"{group.name}-{self.generation:04x}-node-{i}" for i in range(group.hosts)]
        self.nodes_since = now
        for node in self.nodes:
            self.kube.create("nodes", "", {"metadata": {
                "name": node, "creationTimestamp": now_iso(), "labels": group.node_labels()},
                "spec": group.node_spec(node)}, self._stamp())
        group.history.append((now, len(self.nodes)))

    def _refused(self, pods: list[Obj]) -> list[Obj]:
        """None here: the expander picks a group every pod fits (``_best_option``) and
        ``_bind`` refuses a pod the slice's group does not fit."""
        return []

    def _bind(self, pod: Obj) -> None:
        """kube-scheduler binds a pod only to a node it fits (tpu_nodes.fits): a pod whose
        nodeSelector or tolerations the slice's nodes do not meet stays Pending,
        Unschedulable, however many nodes are idle."""
        if not fits(pod, self.pool):
            self.refused.add(pod["metadata"]["name"])
            self._unschedulable(pod)
            return
        super()._bind(pod)

    def _best_option(self, pods: list[Obj], now: float) -> NodeGroup | None:
        options = [g for g in self.groups if g.name not in self.excluded
                   and not (g.backoff_until is not None and now < g.backoff_until)
                   and not g.mismatch and all(fits(p, g) for p in pods)]
        if not options:
            return None
        if self.expander == "random":
            return self._random.choice(options)
        return options[0]  # priority: the groups' order

    def _failed(self, group: NodeGroup, pods: list[Obj], now: float) -> None:
        """clusterstate RegisterFailedScaleUp → backoffNodeGroup (exponential per group),
        and GKE's FailedScaleUp on the pods."""
        group.failures += 1
        self.scale_ups.append((now, group.name, False))
        # concurrent failures while backed off do not lengthen it (exponential_backoff.go)
        in_backoff = group.backoff_until is not None and now < group.backoff_until
        if not group.backoff_s:
            group.backoff_s = self.initial_backoff_s
        elif not in_backoff:
            group.backoff_s = min(2 * group.backoff_s, self.max_backoff_s)
        group.backoff_until = now + group.backoff_s
        for pod in pods:
            self._event(pod, "Warning", "FailedScaleUp",
                        f"Node scale up in zones {group.zone} associated with this pod "
                        "failed: GCE out of resources. Pod is at risk of not being scheduled.",
                        again=True)

    def _no_option(self, pods: list[Obj], now: float) -> None:
        """Every group that fits is backed off (or none fits): NotTriggerScaleUp with the
        skipped reason (processors/status/eventing_scale_up_processor.go ReasonsMessage)."""
        fitting = [g for g in self.groups if g.name not in self.excluded
                   and all(fits(p, g) for p in pods)]
        if fitting:
            message = (f"pod didn't trigger scale-up: {len(fitting)} in backoff after "
                       "failed scale-up")
        else:
            message = (f"pod didn't trigger scale-up: {len(self.groups)} node(s) didn't "
                       "match Pod's node affinity/selector")
        for pod in pods:
            self._event(pod, "Normal", "NotTriggerScaleUp", message, again=True)


    def _event(self, pod: Obj, kind: str, reason: str, message: str,
               again: bool = False) -> None:
        """As the one-pool autoscaler's, but one Event per distinct message: client-go's
        correlator aggregates only events equal but for count and time
        (staging/src/k8s.io/client-go/tools/record/events_cache.go getEventKey includes the
        message), so a failure in another zone is a new Event."""
        name = pod["metadata"]["name"]
        key = f"{name}.{reason.lower()}.{zlib.crc32(message.encode()):08x}"
        if (key, reason) in self._told:
            if again:
                def seen_again(event: Obj) -> None:
                    event.update(count=int(event.get("count") or 1) + 1,
                                 lastTimestamp=now_iso())
                self.kube.mutate("events", "default", key, seen_again)
            return
        self._told.add((key, reason))
        self.kube.create("events", "default", {
            "metadata": {"name": key},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": name,
                               "uid": pod["metadata"].get("uid")},
            "reason": reason, "message": message, "type": kind,
            "source": {"component": "cluster-autoscaler"}, "count": 1,
            "firstTimestamp": now_iso(), "lastTimestamp": now_iso()})


def regional_groups(zones: list[str], modes: list[str], hosts: int = 8,
                    machine_type: str = "ct6e-standard-4t", topology: str = "4x8",
                    labels: Callable[[str, str], dict[str, str]] | None = None,
                    taints: Callable[[str], list[Obj]] | None = None,
                    reclaim: Reclaim | None = None, **settings: Any) -> list[NodeGroup]:
    """One group per (mode, zone), modes first in the chain's order, zones in the
    profile's order (the priority expander's order); its nodes carry the labels GKE sets for
    the pool's machine type and topology (tpu_nodes.py) and the TPU taint, GKE's on every TPU
    node (the JobSet's pods tolerate it: flows/backends/gke/jobs/common.py
    tpu_pod_scheduling)."""
    return [NodeGroup(name=f"tpu-{mode}-{zone}", zone=zone, mode=mode, hosts=hosts,
                      machine_type=machine_type, topology=topology,
                      labels=(labels or (lambda m, z: {}))(mode, zone),
                      taints=[TPU_TAINT, *(taints or (lambda m: []))(mode)],
                      reclaim=reclaim if mode == "spot" else None, **settings)
            for mode in modes for zone in zones]
