"""Pieces every rendered JobSet shares: metadata, env lists, TPU scheduling, failure policy.

Kept apart from the two JobSet shapes so the plain job and the Pathways job cannot drift on
the things that must be identical (queue label, ownership labels, TPU node selection).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from flows.backends.gke.capacity_pools import (
    TEAM_LABEL,
    job_node_selector,
    job_tolerations,
    provider_node_labels,
    team_toleration,
)
from flows.backends.gke.jobs.naming import label_value
from flows.backends.gke.jobs.options import GkeOptions
from flows.backends.gke.jobs.secret_objects import MANAGED_BY, secret_env_var
from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.core.workload import Workload

API_VERSION = "jobset.x-k8s.io/v1alpha2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
STAGE_LABEL = "tpurl/stage"
RUN_LABEL = "tpurl/run"
SPEC_DIGEST = "tpurl/spec-digest"
NODEPOOL = "cloud.google.com/gke-nodepool"
EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
SLICE_TOPOLOGY = "cloud.google.com/gke-tpu-slice-topology"
WORKLOAD_CONTAINER = "workload-container"
Env = list[dict[str, Any]]


def jobset_metadata(name: str, *, options: GkeOptions, stage: str, run: str,
                    annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """Labels a rerun and the watcher select on; the gcluster label keeps `gcluster job list`
    showing our JobSets next to the tutorial's. The queue is the profile's team's (and a
    priority by who started the run) or ``gke.kueue_queue`` (team_queues.py), as the run's
    facts decided them (``options.queue_labels``)."""
    return {
        "name": name,
        "namespace": options.gke.namespace,
        "labels": {
            "gcluster.google.com/workload": name,
            **options.queue_labels,
            "app.kubernetes.io/managed-by": MANAGED_BY,
            STAGE_LABEL: label_value(stage),
            RUN_LABEL: label_value(run),
        },
        "annotations": dict(annotations or {}),
    }


def with_spec_digest(jobset: dict[str, Any]) -> dict[str, Any]:
    """Stamp a digest of the spec, so reattaching to a same-named JobSet can tell whether it
    runs the same command (a rerun) or an older one (the profile changed under the name)."""
    digest = hashlib.sha256(json.dumps(jobset["spec"], sort_keys=True).encode()).hexdigest()
    jobset["metadata"]["annotations"][SPEC_DIGEST] = digest[:16]
    return jobset


def plain_env(pairs: Iterable[tuple[str, str]]) -> Env:
    """Env entries, last value winning, first position kept (no duplicate names)."""
    merged: dict[str, str] = {}
    for key, value in pairs:
        merged[key] = value
    return [{"name": key, "value": value} for key, value in merged.items()]


def field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def secret_env(workload: Workload, options: GkeOptions) -> Env:
    return [secret_env_var(name, ref, options.secret_owner, options.hf_token_key)
            for name, ref in workload.secret_env]


def tpu_pod_scheduling(profile: Profile, team: str | None = None) -> dict[str, Any]:
    """Node selection for TPU hosts, as gcluster writes it (never the default pool), in the
    pools of the profile's (first) capacity mode: with a chain of modes, the mode's label
    (capacity_pools.job_node_selector: ``tpurl/capacity`` and GKE's own), so the JobSet of
    each mode lands on that mode's pools, in whichever zone the autoscaler finds a slice;
    with one mode only GKE's own label of it (a cluster deployed before the chain existed
    has pools without ``tpurl/capacity``). The zone is never pinned: the autoscaler picks
    it (capacity_pools.py, fallback.py).

    A team's pod (``team``) selects its team's pools and its mode's, one mode or several
    (a team's pools carry both labels from their first deploy), and tolerates its team's
    taint only: it lands on no other team's pool, and no other team's pod on its own
    (docs/decisions/0036-a-node-pool-per-team.md)."""
    gke = gke_section(profile)
    chain = gke.capacity_chain
    mode = chain[0]
    selector = job_node_selector(mode) if len(chain) > 1 or team else provider_node_labels(mode)
    if team:
        selector = {**selector, TEAM_LABEL: team}
    return {
        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": gke.machine.accelerator_label,
                         "cloud.google.com/gke-tpu-topology": gke.topology, **selector},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": NODEPOOL, "operator": "NotIn", "values": ["default-pool"]}]}]}}},
        "tolerations": job_tolerations(mode) + ([team_toleration(team)] if team else []),
    }


def host_network() -> dict[str, Any]:
    """hostNetwork, as google/pathways-job builds its workers ("For performance"): only for
    pods of Pathways' own image, which run no team code. Such a pod acts as the node pool's
    service account, not its Kubernetes account (GKE's Workload Identity limits), so a pod
    that runs a team's code never takes it (team_identity.py)."""
    return {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"}


def team_identity(options: GkeOptions) -> dict[str, Any]:
    """The pod fields of a pod that runs the team's code: the team's Kubernetes service
    account (Workload Identity binds it to the team's principal, which writes the team's
    bucket only), on the pod network. A profile in no team: the namespace's default."""
    return {"serviceAccountName": options.service_account}


def failure_policy(max_restarts: int, restart_strategy: str | None = None) -> dict[str, Any]:
    """A job that failed through its podFailurePolicy (a non-zero exit of the program) fails
    the JobSet at once: restarting a user error only burns TPU time. Anything else (a lost
    host, a deleted pod) restarts the JobSet, up to ``max_restarts``."""
    policy: dict[str, Any] = {"maxRestarts": max_restarts}
    if restart_strategy:
        policy["restartStrategy"] = restart_strategy
    policy["rules"] = [{"name": "failOnProgramExit", "action": "FailJobSet",
                        "onJobFailureReasons": ["PodFailurePolicy"]}]
    return policy


def pod_failure_policy(container: str) -> dict[str, Any]:
    """Disruptions (preemption, node maintenance, eviction) do not count as failures; a
    non-zero exit of the program fails the Job with reason PodFailurePolicy."""
    return {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailJob", "onExitCodes": {"containerName": container, "operator": "NotIn",
                                              "values": [0]}},
    ]}
