"""Kueue's resource groups against a namespace LimitRange: every pod the pipeline submits is
admitted by the ClusterQueue the deploy stages, and lands where it can be scheduled, when a
LimitRange gives the TPU workers cpu/memory requests they do not ask for.

Upstream, kueue v0.17.1: pkg/workload/resources.go handlePodLimitRange merges a LimitRange's
container defaults into every container's resources (the container's own values first);
pkg/scheduler/flavorassigner/flavorassigner.go picks per resource group the first flavor the
pod's node selection (cut to the group's label keys) matches and whose quota fits;
pkg/podset/podset.go FromAssignment copies every assigned flavor's nodeLabels into the pods'
nodeSelector. The pre-flight (flows/backends/gke/infra/admission.py) models those three."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from flows.backends.gke.capacity_pools import flavor_name
from flows.backends.gke.infra.admission import (
    admission_problems,
    assigned_flavor,
    placement_problems,
    pod_sets,
)
from flows.backends.gke.infra.kueue_config import planned_kueue
from flows.backends.gke.infra.settings import settings_from_profile
from flows.backends.gke.jobs.manifests import render_all
from flows.config.gke_jobs import parse_quantity
from flows.operations.plan import planned_workloads
from tests.support.profiles import smoke_profile, tutorial_profile

# a LimitRange many clusters carry in their namespaces: type Container, defaultRequest
LIMIT_RANGE_DEFAULTS = {"cpu": "500m", "memory": "512Mi"}


def with_limit_range(jobset: dict[str, Any], defaults: dict[str, str]) -> dict[str, Any]:
    """handlePodLimitRange: the LimitRange's defaultRequest under each container's own."""
    out = copy.deepcopy(jobset)
    for job in out["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]["spec"]
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            resources = container.setdefault("resources", {})
            resources["requests"] = {**defaults, **(resources.get("requests") or {})}
    return out


def _sets(profile, defaults: dict[str, str] | None):
    workloads = planned_workloads(profile)
    jobsets = [o for o in render_all(profile, workloads) if o.get("kind") == "JobSet"]
    return [ps for stage, js in zip(workloads, jobsets, strict=True)
            for ps in pod_sets(stage, with_limit_range(js, defaults) if defaults else js)]


# The toolkit's Pathways shape: TPU in one resource group, cpu/memory in another
# (cluster-toolkit modules/management/kubectl-apply/kueue/kueue-configuration-pathways.yaml.tftpl
# at 104708037, v1.95.0), as our template had it.
def _two_groups(kueue: dict[str, Any], tpu_flavor: str) -> dict[str, Any]:
    tpu_quota = next(r["nominalQuota"] for g in kueue["cluster_queue"]["spec"]["resourceGroups"]
                     for f in g["flavors"] if f["name"] == tpu_flavor
                     for r in f["resources"] if r["name"] == "google.com/tpu")
    return {"spec": {"resourceGroups": [
        {"coveredResources": ["google.com/tpu"], "flavors": [
            {"name": tpu_flavor, "resources": [
                {"name": "google.com/tpu", "nominalQuota": tpu_quota}]}]},
        {"coveredResources": ["cpu", "memory", "ephemeral-storage"], "flavors": [
            {"name": "cpu-np-flavor", "resources": [
                {"name": "cpu", "nominalQuota": 6400}, {"name": "memory", "nominalQuota": "25600Gi"},
                {"name": "ephemeral-storage", "nominalQuota": "4500Gi"}]}]}]}}


@pytest.mark.parametrize("profile", [smoke_profile, tutorial_profile], ids=["smoke", "tutorial"])
def test_two_resource_groups_admit_a_defaulted_tpu_worker_but_pin_it_to_the_cpu_pool(
        profile) -> None:
    p = profile()
    kueue = planned_kueue(settings_from_profile(p))
    sets = _sets(p, LIMIT_RANGE_DEFAULTS)
    worker = next(ps for ps in sets if ps.name == "worker")
    assert worker.requests["cpu"] == parse_quantity("500m") and "google.com/tpu" in worker.requests
    tpu_flavor = flavor_name(p.gke.capacity_chain[0])
    two = _two_groups(kueue, tpu_flavor)
    assert admission_problems(sets, two, kueue["flavors"]) == []  # admitted
    (problem,) = placement_problems(sets, two, kueue["flavors"])
    assert "pod set worker is admitted with flavors cpu-np-flavor (cpu, memory), " \
        f"{tpu_flavor} (google.com/tpu)" in problem, problem
    assert "cloud.google.com/gke-nodepool=cpu-np" in problem and "never scheduled" in problem
    # without the LimitRange the worker asks only for chips: the two groups were fine
    assert placement_problems(_sets(p, None), two, kueue["flavors"]) == []


@pytest.mark.parametrize("profile", [smoke_profile, tutorial_profile], ids=["smoke", "tutorial"])
@pytest.mark.parametrize("defaults", [None, LIMIT_RANGE_DEFAULTS], ids=["bare", "limitrange"])
def test_the_shipped_template_admits_and_places_every_pod(profile, defaults) -> None:
    p = profile()
    kueue = planned_kueue(settings_from_profile(p))
    cq, flavors = kueue["cluster_queue"], kueue["flavors"]
    sets = _sets(p, defaults)
    assert admission_problems(sets, cq, flavors) == []
    assert placement_problems(sets, cq, flavors) == []
    (group,) = cq["spec"]["resourceGroups"]
    for ps in sets:  # one flavor per pod: the TPU pods the TPU's, the CPU-pool pods cpu-np's
        on_tpu = "cloud.google.com/gke-tpu-accelerator" in ps.node_selector
        assert assigned_flavor(ps, group, flavors) == (
            flavor_name(p.gke.capacity_chain[0]) if on_tpu else "cpu-np-flavor"), (
                ps.stage, ps.name)
