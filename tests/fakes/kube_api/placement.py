"""Where the fake JobSet controller's pods land: one node pool per Job of a replicated job
placed exclusively per node pool (a slice each), the cpu-np pool for the rest."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

NODE_POOL = "cloud.google.com/gke-nodepool"
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"


def exclusive_pool(rjob: Obj, replica: int) -> str | None:
    """The node pool a Job of an exclusive-per-node-pool replicated job lands on: one pool
    per Job, never shared (jobset v0.10.1 pkg/webhooks/pod_mutating_webhook.go: the leader
    pod, completion index 0, gets a podAffinity to its own Job and a podAntiAffinity to
    every other Job in the topology domain; each follower a nodeSelector for the leader's
    domain). For a multi-slice JobSet each worker Job is one slice on its own TPU pool, as
    the blueprint creates one pool per slice (num_slices)."""
    annotations = ((rjob.get("template") or {}).get("metadata") or {}).get("annotations") or {}
    return f"tpu-slice-{replica}" if annotations.get(EXCLUSIVE) == NODE_POOL else None


def slice_of(pod: Obj) -> int | None:
    """The slice (worker Job index) of a pod on a slice, None for the head."""
    labels = pod["metadata"]["labels"]
    if labels["jobset.sigs.k8s.io/replicatedjob-name"] == "pathways-head":
        return None
    return int(labels["jobset.sigs.k8s.io/job-index"])
