"""The Kueue configuration and CPU pool the deploy creates, as the objects pre-flight reads
from a live cluster: so ``tpurl plan --check`` before the first deploy evaluates our pods
against what will exist, with the same functions it uses afterwards."""

from __future__ import annotations

from typing import Any

import yaml

from flows.backends.gke.infra.kueue_objects import KUEUE_TEMPLATE, kueue_configuration_text, render_template
from flows.backends.gke.infra.settings import InfraSettings

__all__ = ["KUEUE_TEMPLATE", "planned_kueue", "render_template", "toolkit_cpu_pool"]


def planned_kueue(s: InfraSettings) -> dict[str, Any]:
    """{"local_queue", "cluster_queue", "flavors"} as the blueprint's kubectl-apply module
    would create them from what the blueprint stages for the profile's capacity chain (its
    config_template_vars: tpu_quota = every chip of the run, per TPU flavor)."""
    text = render_template(kueue_configuration_text(s.gke, shape=s.shape), {
        "tpu_quota": str(s.gke.total_chips), "accelerator_type": s.gke.machine.accelerator_label,
        "namespace": s.gke.namespace})
    docs = [d for d in yaml.safe_load_all(text) if d]
    by_kind: dict[str, dict[str, Any]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    lq = by_kind.get("LocalQueue", {}).get(s.queue)
    cq = by_kind.get("ClusterQueue", {}).get(lq["spec"]["clusterQueue"]) if lq else None
    return {"local_queue": lq, "cluster_queue": cq, "flavors": by_kind.get("ResourceFlavor", {})}


def toolkit_cpu_pool(s: InfraSettings) -> dict[str, Any]:
    """cpu-np as modules/scheduler/gke-cluster creates it (google_container_node_pool.cpu_np:
    n4-standard-64, autoscaling 0–100, no disk size, so GKE's default 100 GB boot disk)."""
    return {"name": s.gke.cpu_pool, "config": {"machineType": "n4-standard-64",
                                               "diskSizeGb": 100},
            "autoscaling": {"enabled": True, "totalMinNodeCount": 0, "totalMaxNodeCount": 100}}
