"""A stage's spend meter fed by the run's TPU nodes: the node watch that charges their
lifetimes (watch/tpu_nodes.py) started for a stage and kept after it until the nodes are
gone or the teardown tail the plan counts has passed (flows/config/spend.py
SCALE_DOWN_TAIL_S).

A stage that ends while its slice scales up (its JobSet deleted by a fallback, the cap or
Ctrl-C) still gets the slice: the autoscaler resized the node group, and the VMs come up
idle and stay until removed as unneeded. So when the autoscaler's last TriggeredScaleUp for
the JobSet's pods (the monitor keeps its events) came after every node seen, the nodes are
waited for too, within the same bound."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from flows.backends.gke.watch.api_time import api_time
from flows.backends.gke.watch.client import Cluster
from flows.backends.gke.watch.spend import SpendMeter
from flows.backends.gke.watch.stream import WatchSettings
from flows.backends.gke.watch.tpu_nodes import NodeWatch, TpuNodes, belongs_to_run, run_node_selector
from flows.backends.gke.watch.vm_created import InstanceGet, RestInstances, VmCreations
from flows.config.capacity import SCALE_FROM_ZERO
from flows.config.gke_section import gke_section
from flows.config.profile import Profile


def watch_run_nodes(spend: SpendMeter | None, profile: Profile, cluster: Cluster,
                    settings: WatchSettings, warn: Callable[[str], None], flow_account: str,
                    instances: InstanceGet | None = None) -> NodeWatch | None:
    """Start charging ``spend`` by the run's TPU nodes, for a stage whose jobs bring TPU
    nodes up in a mode that scales from zero; None when there is nothing to watch. Each node
    is charged from its VM's creation, read through ``instances`` (Compute Engine's
    instances.get by default, watch/vm_created.py), or from its registration; when the VMs
    cannot be read, the warning names ``flow_account`` (the Google account id the flow runs
    as) as the one to grant."""
    gke = gke_section(profile)
    modes = frozenset(m for m in gke.capacity_chain if m in SCALE_FROM_ZERO)
    if spend is None or not spend.chips or not modes:
        return None
    vms = VmCreations(instances or RestInstances(gke.gcp_credentials_block), warn, flow_account)
    nodes = TpuNodes(functools.partial(belongs_to_run, modes=modes,
                                       unlabelled=gke.scales_from_zero), wall=spend.wall,
                     vm_created=vms.created)
    spend.attach_nodes(nodes, gke.chips_per_host, spend.node_prices)
    lister = functools.partial(cluster.core.list_node,
                               label_selector=run_node_selector(gke.machine.accelerator_label))
    return NodeWatch(nodes, lister, settings, warn, spend.charge_nodes).start()


def scale_up_triggered_at(events: list[dict[str, Any]], jobset: str) -> float | None:
    """When the autoscaler last triggered a scale-up for a pod of ``jobset`` (its
    TriggeredScaleUp event's lastTimestamp, wall-clock), or None."""
    times = []
    for event in events:
        pod = str((event.get("involvedObject") or {}).get("name") or "")
        stamp = event.get("lastTimestamp") or event.get("firstTimestamp")
        at = api_time(stamp)
        if event.get("reason") != "TriggeredScaleUp" or not pod.startswith(f"{jobset}-") or \
                at is None:
            continue
        times.append(at)
    return max(times, default=None)
