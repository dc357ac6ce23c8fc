"""Which zone, capacity mode and node pool served a training's slice (hence ``served``), read
from the nodes its TPU pods were bound to (pure).

With several zones (``gke.zones``) and modes (``gke.capacity`` as a chain) the cluster
autoscaler decides where a slice comes up (flows/backends/gke/fallback.py), so the run says
where it trained. A node carries its zone as the well-known label
``topology.kubernetes.io/zone`` (kubernetes staging/src/k8s.io/api/core/v1/
well_known_labels.go LabelTopologyZone), its pool as ``cloud.google.com/gke-nodepool``, and
GKE marks the consumption mode on it: ``cloud.google.com/gke-spot`` (Spot VMs),
``cloud.google.com/gke-flex-start`` (flex-start), ``cloud.google.com/gke-queued`` (queued
provisioning), ``cloud.google.com/reservation-name`` (a consumed reservation); a node with
none of them is on-demand.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from flows.backends.gke.capacity_pools import mode_of_node
from flows.common.api_objects import Obj

TPU_ACCELERATOR = "cloud.google.com/gke-tpu-accelerator"
ZONE = "topology.kubernetes.io/zone"
NODE_POOL = "cloud.google.com/gke-nodepool"
# checked in this order: a queued or flex-start node may carry other marks too
MODE_LABELS = (("cloud.google.com/gke-queued", "queued"),
               ("cloud.google.com/gke-flex-start", "flex-start"),
               ("cloud.google.com/gke-spot", "spot"),
               ("cloud.google.com/reservation-name", "reservation"))


@dataclass(frozen=True)
class Served:
    zone: str
    mode: str
    pool: str
    nodes: int

    def line(self) -> str:
        """What the run log says. Nothing known: every read of the nodes failed (the API
        throttling or refusing them), which the line says rather than a row of blanks."""
        if not (self.zone or self.mode or self.pool):
            return (f"the slice came up on {self.nodes} node(s); reading them failed, so its "
                    "zone, capacity mode and node pool are not known")
        return (f"the slice came up in zone {self.zone or '?'} ({self.mode or '?'}, node pool "
                f"{self.pool or '?'}, {self.nodes} node(s))")


def tpu_node_names(pods: list[Obj]) -> set[str] | None:
    """The nodes the TPU pods (those selecting a TPU accelerator) are bound to, once every
    one of them is bound; None while any waits (or there is none)."""
    tpu = [p for p in pods if TPU_ACCELERATOR in ((p.get("spec") or {}).get("nodeSelector")
                                                  or {})
           and not (p.get("metadata") or {}).get("deletionTimestamp")]
    names = {(p.get("spec") or {}).get("nodeName") or "" for p in tpu}
    if not tpu or "" in names or not all(_scheduled(p) for p in tpu):
        return None
    return names


def _scheduled(pod: Obj) -> bool:
    """The scheduler's binding sets PodScheduled=True (kubernetes pkg/scheduler/
    schedule_one.go, the bind's condition); a nodeName alone may be a stale read."""
    return any(c.get("type") == "PodScheduled" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def mode_of(labels: dict[str, str]) -> str:
    """Our own pool label first (capacity_pools.CAPACITY_LABEL, on every pool the blueprint
    builds), GKE's marks for a pool deployed before it."""
    return mode_of_node(labels) or next(
        (mode for label, mode in MODE_LABELS if labels.get(label)), "on-demand")


def served_by(nodes: list[Obj]) -> Served | None:
    """The zone, mode and pool most of these nodes share (a slice is one pool, in one
    zone: the same for all)."""
    if not nodes:
        return None
    labels = [((n.get("metadata") or {}).get("labels") or {}) for n in nodes]
    zone = Counter(x.get(ZONE, "") for x in labels).most_common(1)[0][0]
    pool = Counter(x.get(NODE_POOL, "") for x in labels).most_common(1)[0][0]
    mode = Counter(mode_of(x) for x in labels).most_common(1)[0][0]
    return Served(zone, mode, pool, len(nodes))
