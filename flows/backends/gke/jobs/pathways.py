"""The Pathways training JobSet: a CPU head (proxy and resource-manager native sidecars, then
the training program) plus TPU workers, one replicated Job per slice.

As Cluster Toolkit's `gcluster job submit --pathways` builds it, with four deliberate
differences: the images are pinned (upstream defaults to :latest), the program talks to the
proxy at grpc://127.0.0.1:29000 as MaxText's own recipes do (the proxy is in the same pod,
so no DNS race with the headless service), the HF token is an env var from a Secret instead
of a command-line argument, and the head pod, which runs the team's program and reward
functions, is on the pod network as the team's Kubernetes service account, unprivileged
(google/pathways-job v0.1.4 MakePathwaysHeadPodSpec sets hostNetwork on it "for
performance"; on the host's network it would act as the node's account, which holds every
team's bucket: jobs/common.py team_identity, docs/decisions/0027-an-identity-per-team.md).
The workers, Pathways' own image, stay on the host's network as upstream builds them.

The head runs on the CPU pool, which spans the cluster's zones: left alone, the scheduler
may place it in another zone than its slice, and every call between the proxy, the resource
manager and the workers then crosses zones (slower, and inter-zone traffic is billed). So
when the slice's zone is known before it exists (a reservation's pool, a profile of one
zone: capacity_pools.slice_zone) the head selects it by ``topology.kubernetes.io/zone``;
when the zone is chosen per attempt (several slices over several zones, capacity_run.py)
the same pin is set on the head and the workers together.
"""

from __future__ import annotations

from typing import Any

from flows.backends.gke.capacity_pools import ZONE_LABEL, slice_zone
from flows.backends.gke.jobs.command import container_command
from flows.backends.gke.jobs.common import (
    API_VERSION,
    EXCLUSIVE,
    NODEPOOL,
    SLICE_TOPOLOGY,
    WORKLOAD_CONTAINER,
    Env,
    failure_policy,
    field_env,
    host_network,
    jobset_metadata,
    plain_env,
    pod_failure_policy,
    secret_env,
    team_identity,
    tpu_pod_scheduling,
)
from flows.backends.gke.jobs.options import GkeOptions
from flows.backends.gke.jobs.program_files import mounts, volumes
from flows.config.gke_section import gke_section
from flows.config.profile import Profile
from flows.config.timeline import KUBELET_MAX_BACKOFF_MIN
from flows.core.workload import Workload

HEAD = "pathways-head"
WORKER = "worker"
PROXY_PORT, RM_PORT, WORKER_PORT = 29000, 29001, 29005
PROGRAM_MEMORY = "190G"  # the checkpoint restore's need (runtime.py TRAIN_PREAMBLE says so)
COORDINATOR = "metadata.labels['jobset.sigs.k8s.io/coordinator']"
# On every Pathways container (proxy, resource manager, worker, program), as the tutorial.
SHARED_ENV = (
    ("GRPC_DNS_RESOLVER", "native"),
    ("FLAGS_pathways_enforce_subset_devices_form_subslice", "false"),
    ("ABSL_FLAGS", "--pathways_pipe_unreachable_timeout=60s"),
)


def scratch_location(profile: Profile) -> str:
    return f"gs://{gke_section(profile).bucket}/pathways/"


def instance_type(profile: Profile) -> str:
    gke = gke_section(profile)
    return f"{gke.machine.pathways_instance_prefix}:{gke.topology}"


def _head_env() -> Env:
    return [field_env("PATHWAYS_HEAD", COORDINATOR)]


def proxy_container(profile: Profile, opts: GkeOptions) -> dict[str, Any]:
    return {
        "name": "pathways-proxy",
        "image": opts.proxy_image,
        "restartPolicy": "Always",
        "args": [f"--server_port={PROXY_PORT}",
                 f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}",
                 f"--gcs_scratch_location={scratch_location(profile)}"],
        "env": [*_head_env(), *plain_env(SHARED_ENV)],
        "ports": [{"containerPort": PROXY_PORT, "protocol": "TCP"}],
        "resources": {"limits": {"cpu": "16", "memory": "100Gi"}},
    }


def resource_manager_container(profile: Profile, opts: GkeOptions) -> dict[str, Any]:
    gke = gke_section(profile)
    return {
        "name": "pathways-rm",
        "image": opts.server_image,
        "restartPolicy": "Always",
        "args": [f"--server_port={RM_PORT}",
                 f"--gcs_scratch_location={scratch_location(profile)}",
                 "--node_type=resource_manager",
                 f"--instance_count={gke.num_slices}",
                 f"--instance_type={instance_type(profile)}"],
        "env": [field_env("REPLICATED_JOB_NAME",
                          "metadata.annotations['jobset.sigs.k8s.io/replicatedjob-name']"),
                field_env("JOBSET_NAME", "metadata.annotations['jobset.sigs.k8s.io/jobset-name']"),
                field_env("HOST_ADDRESS", COORDINATOR),
                *plain_env([("TPU_SKIP_MDS_QUERY", "true"), *SHARED_ENV])],
        "ports": [{"containerPort": RM_PORT, "protocol": "TCP"}],
        "resources": {"limits": {"cpu": "8", "memory": "32Gi"}},
    }


def program_container(workload: Workload, opts: GkeOptions) -> dict[str, Any]:
    """The training program, with the team's reward functions: unprivileged (a privileged
    container can reach the node and its account), its memory limit the 190G the
    tutorial's preamble raised the cgroup to."""
    env = plain_env([("JAX_PLATFORMS", "proxy"), ("XCLOUD_ENVIRONMENT", "GCP"),
                     ("JAX_BACKEND_TARGET", f"grpc://127.0.0.1:{PROXY_PORT}"), *SHARED_ENV,
                     *workload.env])
    return {
        "name": WORKLOAD_CONTAINER,
        "image": workload.image,
        "command": container_command(workload),
        "env": [*_head_env(), *env, *secret_env(workload, opts)],
        "resources": {"limits": {"cpu": "24", "memory": PROGRAM_MEMORY},
                      "requests": {"cpu": "2", "memory": "8Gi"}},
        **({"volumeMounts": shipped} if (shipped := mounts(workload)) else {}),
    }


def worker_container(profile: Profile, opts: GkeOptions) -> dict[str, Any]:
    gke = gke_section(profile)
    labels = "metadata.labels['jobset.sigs.k8s.io/{}']"
    annotations = "metadata.annotations['jobset.sigs.k8s.io/{}']"
    return {
        "name": "pathways-worker",
        "image": opts.server_image,
        "args": [f"--server_port={WORKER_PORT}",
                 f"--resource_manager_address=$(PATHWAYS_HEAD):{RM_PORT}",
                 f"--gcs_scratch_location={scratch_location(profile)}"],
        "env": [*plain_env([("XCLOUD_ENVIRONMENT", "GCP"),
                            ("MEGASCALE_GRPC_ENABLE_XOR_TRACER", "false")]),
                field_env("MEGASCALE_NUM_SLICES", labels.format("replicatedjob-replicas")),
                field_env("MEGASCALE_SLICE_ID", labels.format("job-index")),
                field_env("JOBSET_NAME", annotations.format("jobset-name")),
                field_env("REPLICATED_JOB_NAME", annotations.format("replicatedjob-name")),
                *_head_env(),
                # $(PATHWAYS_HEAD) expands because PATHWAYS_HEAD is defined above it.
                {"name": "MEGASCALE_COORDINATOR_ADDRESS", "value": "$(PATHWAYS_HEAD)"},
                *plain_env(SHARED_ENV)],
        "ports": [{"containerPort": WORKER_PORT, "protocol": "TCP"}],
        "resources": {"limits": {"google.com/tpu": str(gke.chips_per_host)}},
    }


def startup_order(profile: Profile) -> str:
    """InOrder (the head ready, then the workers: jobset v0.10.1 jobset_controller.go
    resumeJobsIfNecessary, startup_policy.go allReplicasStarted), as google/pathways-job
    builds it, except when the JobSet's capacity is queued provisioning: then the slice's
    nodes exist before anything starts (Kueue admits only once the ProvisioningRequest is
    Provisioned: autoscaler apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go), so
    InOrder would leave the whole slice idle, billed, through the head's image pull; and if
    the booking lapsed before the workers were made and bound, Kueue, the Workload admitted,
    ignores BookingExpired and asks for nothing new (kueue v0.17.1 pkg/controller/
    admissionchecks/provisioning/controller.go syncOwnedProvisionRequest), while a queued
    pool gets nodes only through a request: the workers would wait for nodes that never
    come. AnyOrder makes the workers with the head, so they bind to the booked nodes at
    admission. The workers find the head by its DNS name, published before it is ready
    (``publishNotReadyAddresses``); a worker that gives up on a resource manager not yet up
    restarts in place (restartPolicy OnFailure), and ``worker_backoff_limit`` sizes the worker
    Job's limit for those restarts; how long a worker waits before it gives up is Pathways'
    and for the first queued run to read."""
    return "AnyOrder" if gke_section(profile).capacity_chain[0] == "queued" else "InOrder"


# kubelet restarts a failed container after 10 s, doubling each time up to 300 s (kubernetes
# pkg/kubelet/kubelet.go backOffPeriod, MaxContainerBackOff), and the Job controller fails a
# Job whose pods' container restarts, summed over all its pods, reach its backoffLimit
# (pkg/controller/job/job_controller.go pastBackoffLimitOnFailure, restartPolicy OnFailure).
KUBELET_BACKOFF_S = (10.0, KUBELET_MAX_BACKOFF_MIN * 60.0)
# the head's image pull a queued run's workers may wait through, when the profile states no
# gke.train_timeline.image_pull: the tutorial timeline's 20 minutes, twice over
HEAD_WAIT_GUESS_S = 2 * 20 * 60.0


def restarts_within(wait_s: float, backoff: tuple[float, float] = KUBELET_BACKOFF_S) -> int:
    """At most how many times kubelet restarts one container that fails at once, within
    ``wait_s`` seconds: the most a worker can restart while the head is not yet up. Pure."""
    first, most = backoff
    count, elapsed, delay = 0, 0.0, first
    while elapsed + delay <= wait_s:
        elapsed += delay
        count += 1
        delay = min(delay * 2, most)
    return count


def worker_backoff_limit(profile: Profile, opts: GkeOptions) -> int:
    """The worker Job's backoffLimit. InOrder starts the workers once the head is ready, so
    the fixed limit stands for real failures. AnyOrder starts them with the head: each
    worker that gives up on a resource manager not yet up restarts in place, and every such
    restart counts against the one limit of all the slice's workers, so the limit is sized
    to let every worker restart through twice the head's image pull (the profile's
    gke.train_timeline.image_pull, else the tutorial's 20 minutes) before a real failure
    gets the fixed limit on top."""
    if startup_order(profile) != "AnyOrder":
        return opts.worker_backoff_limit
    gke = gke_section(profile)
    timeline = gke.train_timeline
    wait_s = 2 * timeline.image_pull * 60.0 if timeline is not None else HEAD_WAIT_GUESS_S
    return gke.hosts_per_slice * restarts_within(wait_s) + opts.worker_backoff_limit


def pathways_jobset(workload: Workload, profile: Profile, opts: GkeOptions, *, name: str,
                    run: str, stage: str) -> dict[str, Any]:
    gke = gke_section(profile)
    hosts = gke.hosts_per_slice
    zone = slice_zone(gke, gke.capacity_chain[0])
    head_pod = {
        **team_identity(opts),
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": opts.termination_grace_s,
        "nodeSelector": {NODEPOOL: opts.gke.cpu_pool, **({ZONE_LABEL: zone} if zone else {})},
        "initContainers": [proxy_container(profile, opts), resource_manager_container(profile, opts)],
        "containers": [program_container(workload, opts)],
        **({"volumes": shipped} if (shipped := volumes(workload)) else {}),
    }
    worker_pod = {
        **host_network(),
        "restartPolicy": "OnFailure",
        "terminationGracePeriodSeconds": opts.termination_grace_s,
        "containers": [worker_container(profile, opts)],
        **tpu_pod_scheduling(profile, opts.team),
    }
    head = {"name": HEAD, "replicas": 1, "template": {
        "metadata": {"annotations": {EXCLUSIVE: "kubernetes.io/hostname"}},
        "spec": {"completionMode": "Indexed", "parallelism": 1, "completions": 1,
                 "backoffLimit": 0, "podFailurePolicy": pod_failure_policy(WORKLOAD_CONTAINER),
                 "template": {"spec": head_pod}}}}
    worker = {"name": WORKER, "replicas": gke.num_slices, "template": {
        "metadata": {"annotations": {EXCLUSIVE: NODEPOOL}},
        "spec": {"completionMode": "Indexed", "parallelism": hosts, "completions": hosts,
                 "backoffLimit": worker_backoff_limit(profile, opts),
                 "template": {"metadata": {"annotations": {SLICE_TOPOLOGY: gke.topology}},
                              "spec": worker_pod}}}}
    spec = {
        "ttlSecondsAfterFinished": opts.gke.train_ttl_s,
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "coordinator": {"replicatedJob": HEAD},
        "startupPolicy": {"startupPolicyOrder": startup_order(profile)},
        "successPolicy": {"operator": "All", "targetReplicatedJobs": [HEAD]},
        "failurePolicy": failure_policy(opts.gke.train_max_restarts, "Recreate"),
        "replicatedJobs": [head, worker],
    }
    return {"apiVersion": API_VERSION, "kind": "JobSet",
            "metadata": jobset_metadata(name, options=opts, stage=stage, run=run),
            "spec": spec}
