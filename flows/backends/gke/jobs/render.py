"""Workload + Profile → JobSet (jobset.x-k8s.io/v1alpha2), the shapes `gcluster job submit`
creates, with the differences this project needs (docs/architecture.md): pinned images,
secret-backed env, content-keyed names.

Pure: no clock, no environment, no cluster. The same inputs give byte-identical objects,
which is what lets a rerun recognise its own JobSet (name + spec digest) and what the golden
files pin down.

- ``cpu`` placement (conversion, export): by default one pod on the CPU pool, sized for a
  30B checkpoint; with ``conversion_placement="tpu-hosts"`` the tutorial's placement (every
  host of the slice, only index 0 works).
- ``tpu`` placement: a plain job on every host of the slice(s).
- ``pathways`` placement (training): see flows/backends/gke/jobs/pathways.py.
"""

from __future__ import annotations

from typing import Any

from flows.backends.gke.jobs.command import container_command
from flows.backends.gke.jobs.common import (
    API_VERSION,
    EXCLUSIVE,
    NODEPOOL,
    SLICE_TOPOLOGY,
    WORKLOAD_CONTAINER,
    failure_policy,
    jobset_metadata,
    plain_env,
    pod_failure_policy,
    secret_env,
    team_identity,
    tpu_pod_scheduling,
    with_spec_digest,
)
from flows.backends.gke.jobs.naming import jobset_name
from flows.backends.gke.jobs.options import GkeOptions, options_for
from flows.backends.gke.jobs.pathways import pathways_jobset
from flows.backends.gke.jobs.program_files import mounts, volumes
from flows.config.gke_section import gke_section
from flows.config.hf_scratch import XET_CHUNK_CACHE_ENV
from flows.config.profile import Profile
from flows.core.workload import Workload

MAIN_JOB = "main-job"


def render_jobset(workload: Workload, profile: Profile, *, run: str, stage: str,
                  options: GkeOptions | None = None) -> dict[str, Any]:
    """The JobSet for one stage of one run, named ``jobset_name(run, stage)``."""
    if profile.gke is None:
        raise ValueError(f"profile {profile.name!r} has no gke section; nothing to render")
    opts = options or options_for(profile)
    name = jobset_name(run, stage)
    kind = workload.placement.kind
    if kind == "pathways":
        jobset = pathways_jobset(workload, profile, opts, name=name, run=run, stage=stage)
    elif kind == "cpu" and opts.gke.conversion_placement == "cpu-pool":
        jobset = cpu_pool_jobset(workload, profile, opts, name=name, run=run, stage=stage)
    else:
        jobset = tpu_hosts_jobset(workload, profile, opts, name=name, run=run, stage=stage,
                                  leader_only=kind == "cpu")
    return with_spec_digest(jobset)


def _plain_spec(profile: Profile, opts: GkeOptions, *, parallelism: int, replicas: int,
                pod: dict[str, Any], pod_annotations: dict[str, str] | None = None
                ) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": pod}
    if pod_annotations:
        template = {"metadata": {"annotations": pod_annotations}, "spec": pod}
    return {
        "ttlSecondsAfterFinished": opts.gke.job_ttl_s,
        "failurePolicy": failure_policy(opts.gke.job_max_restarts),
        "replicatedJobs": [{
            "name": MAIN_JOB,
            "replicas": replicas,
            "template": {"spec": {
                "completionMode": "Indexed",
                "parallelism": parallelism,
                "completions": parallelism,
                "backoffLimit": 0,
                "podFailurePolicy": pod_failure_policy(WORKLOAD_CONTAINER),
                "template": template,
            }},
        }],
    }


def cpu_pool_jobset(workload: Workload, profile: Profile, opts: GkeOptions, *, name: str,
                    run: str, stage: str) -> dict[str, Any]:
    """One pod on the CPU pool: no TPU held, memory and disk for a 30B checkpoint.

    No exclusive-topology annotation: exclusivity per node pool would keep the converter off
    cpu-np while any other JobSet (e.g. a Pathways head) has a pod there. The HF cache and
    temporary files go to a memory-backed emptyDir (``conversion_scratch_memory``, counted in
    the memory limit): cpu-np's default 100 GB boot disk cannot hold a 30B download, its
    memory can (sizes: flows/config/gke.py GkeJobs).
    """
    scratch = opts.scratch_dir
    size = {"cpu": opts.gke.conversion_cpu, "memory": opts.gke.conversion_memory,
            "ephemeral-storage": opts.gke.conversion_ephemeral_storage}
    env = [*plain_env([("JAX_PLATFORMS", "cpu"), *workload.env,
                       ("HF_HOME", f"{scratch}/huggingface"), ("TMPDIR", scratch),
                       XET_CHUNK_CACHE_ENV]),
           *secret_env(workload, opts)]
    container = {
        "name": WORKLOAD_CONTAINER,
        "image": workload.image,
        "command": container_command(workload),
        "env": env,
        "resources": {"requests": dict(size), "limits": dict(size)},
        "volumeMounts": [{"name": "scratch", "mountPath": scratch},
                         *mounts(workload)],
    }
    pod = {
        **team_identity(opts),
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": opts.termination_grace_s,
        "nodeSelector": {NODEPOOL: opts.gke.cpu_pool},
        "containers": [container],
        "volumes": [{"name": "scratch",
                     "emptyDir": {"medium": "Memory",
                                  "sizeLimit": opts.gke.conversion_scratch_memory}},
                    *volumes(workload)],
    }
    return {"apiVersion": API_VERSION, "kind": "JobSet",
            "metadata": jobset_metadata(name, options=opts, stage=stage, run=run),
            "spec": _plain_spec(profile, opts, parallelism=1, replicas=1, pod=pod)}


def tpu_hosts_jobset(workload: Workload, profile: Profile, opts: GkeOptions, *, name: str,
                     run: str, stage: str, leader_only: bool) -> dict[str, Any]:
    """Every host of the slice(s), as the tutorial's plain job; ``leader_only`` makes hosts
    other than index 0 exit at once (the tutorial's CPU-only conversion on TPU hosts)."""
    gke = gke_section(profile)
    hosts = gke.hosts_per_slice
    container = {
        "name": WORKLOAD_CONTAINER,
        "image": workload.image,
        "command": container_command(workload, leader_only=leader_only),
        "env": [*plain_env(workload.env), *secret_env(workload, opts)],
        "resources": {"limits": {"google.com/tpu": str(gke.chips_per_host)}},
        **({"volumeMounts": shipped} if (shipped := mounts(workload)) else {}),
    }
    pod = {
        **team_identity(opts),
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": opts.termination_grace_s,
        "containers": [container],
        **tpu_pod_scheduling(profile, opts.team),
        **({"volumes": shipped} if (shipped := volumes(workload)) else {}),
    }
    metadata = jobset_metadata(name, options=opts, stage=stage, run=run,
                               annotations={EXCLUSIVE: NODEPOOL})
    return {"apiVersion": API_VERSION, "kind": "JobSet", "metadata": metadata,
            "spec": _plain_spec(profile, opts, parallelism=hosts, replicas=gke.num_slices,
                                pod=pod, pod_annotations={SLICE_TOPOLOGY: gke.topology})}
