"""A pod's requests as Kubernetes and Kueue count them: sidecar init containers
(``restartPolicy: Always``) add to the pod's requests.

Upstream: kubernetes staging/src/k8s.io/component-helpers/resource/helpers.go
(PodRequests → aggregateContainerResourcesByFn: containers are summed; each restartable init
container is added to that sum; a regular init container needs its own request plus the
restartable ones started before it; the pod requests the larger of the sum and the largest
init-time need), which Kueue uses for a pod set's requests (kubernetes-sigs/kueue
pkg/workload/workload.go, totalRequestsFromPodSets → resourcehelpers.PodRequests)."""

from __future__ import annotations

from flows.backends.gke.infra.admission import pod_requests
from flows.backends.gke.infra.infra_stage import planned_for
from tests.support.profiles import tutorial_profile

GI = 2**30


def _c(cpu: str, memory: str, sidecar: bool = False) -> dict:
    out: dict = {"resources": {"requests": {"cpu": cpu, "memory": memory}}}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def test_the_pathways_head_counts_its_proxy_and_resource_manager_sidecars() -> None:
    """proxy 16/100Gi + resource manager 8/32Gi (sidecars) + the program's 2/8Gi."""
    head = [ps for ps in planned_for(tutorial_profile()).pod_sets
            if ps.stage == "train" and ps.name == "pathways-head"]
    assert [(ps.requests["cpu"], ps.requests["memory"] / GI) for ps in head] == [(26.0, 140.0)]


def test_sidecars_add_and_regular_init_containers_take_the_maximum() -> None:
    spec = {"containers": [_c("2", "8Gi")],
            "initContainers": [_c("1", "1Gi"), _c("4", "4Gi", sidecar=True)]}
    assert pod_requests(spec) == {"cpu": 6.0, "memory": 12.0 * GI}


def test_a_regular_init_after_a_sidecar_needs_both_at_once() -> None:
    """InitContainerUse(i) = restartable ones before i + the i-th: 4 + 10 = 14 > 2 + 4."""
    spec = {"containers": [_c("2", "1Gi")],
            "initContainers": [_c("4", "1Gi", sidecar=True), _c("10", "1Gi")]}
    assert pod_requests(spec)["cpu"] == 14.0
    before = {"containers": [_c("2", "1Gi")],
              "initContainers": [_c("10", "1Gi"), _c("4", "1Gi", sidecar=True)]}
    assert pod_requests(before)["cpu"] == 10.0
