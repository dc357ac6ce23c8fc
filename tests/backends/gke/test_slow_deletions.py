"""The GKE backend against deletions that take time, as the garbage collector and the
kubelet take it (tests/fakes/kube_api/garbage_collector.py cites both).

Before, the fake removed a JobSet's Jobs and pods in the JobSet's own delete, so nothing
tested that a resubmission starts only once the preempted attempt's pods are gone: pods that
still run hold the slice's TPUs (and write to the stage's directory) while the next attempt
is created."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.core.failures import StageFailed
from tests.fakes.gke_backend import jobsets_created, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.scenarios import (
    admit,
    disrupt_and_fail,
    operator_deletes,
    say,
    scenario,
    start,
    succeed,
)
from tests.support.polling import until
from tests.support.profiles import fake_hf_token


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("q7TzWm2KxR"))
    with FakeApiServer(FakeKube()) as srv:
        yield srv


def _added(kube: FakeKube, plural: str) -> list[tuple[int, dict]]:
    with kube.cond:
        return [(rv, obj) for rv, p, kind, obj in kube.history if p == plural and kind == "ADDED"]


def _deleted_at(kube: FakeKube, uid: str) -> int | None:
    with kube.cond:
        return next((rv for rv, _, kind, obj in kube.history
                     if kind == "DELETED" and obj["metadata"]["uid"] == uid), None)


def test_a_resubmission_starts_only_once_the_preempted_attempts_pods_are_gone(
        server: FakeApiServer, tmp_path: Path) -> None:
    """The garbage collector takes 0.3 s per level and a pod 0.5 s to terminate: the second
    JobSet is created after the last pod of the first was removed (the backend deletes in
    the foreground and waits for the JobSet to be gone, which the foreground delete makes
    the pods' going)."""
    server.kube.gc_delay_s, server.kube.pod_grace_s = 0.3, 0.5
    first = [(0.1, admit), (0.05, start), (0.05, say("step 1", "saved checkpoint 1")),
             (0.1, disrupt_and_fail)]
    second = [(0.1, admit), (0.05, start), (0.05, say("restored checkpoint 1")),
              (0.1, succeed)]
    kube = scenario(server.kube, first, second)
    outcome, _, _, _ = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    assert jobsets_created(kube) == 2 and outcome.submissions == 2
    (_, old), (resubmitted_at, _) = _added(kube, "jobsets")
    old_pods = [pod for _, pod in _added(kube, "pods")
                if pod["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-uid"]
                == old["metadata"]["uid"]]
    assert old_pods
    for pod in old_pods:  # each was stopped, then removed, before the resubmission
        gone = _deleted_at(kube, pod["metadata"]["uid"])
        assert gone is not None and gone < resubmitted_at, pod["metadata"]["name"]


def test_the_garbage_collector_removes_a_background_deleted_jobsets_pods_later(
        server: FakeApiServer) -> None:
    """The fake itself: after ``kubectl delete jobset`` (background) the JobSet is gone at
    once, its pods only after the collector's lag and their termination, stopped (143) and
    Failed in between."""
    kube = server.kube
    kube.gc_delay_s, kube.pod_grace_s = 0.2, 0.2
    scenario(kube, [(0.0, admit), (0.0, start), (0.3, operator_deletes)])
    kube.create("jobsets", "default", {
        "metadata": {"name": "bg", "labels": {}},
        "spec": {"replicatedJobs": [{"name": "main", "replicas": 1, "template": {"spec": {
            "parallelism": 1, "template": {"spec": {"containers": [
                {"name": "workload-container"}]}}}}}]}})
    assert until(lambda: kube.find("pods") == [] and kube.find("jobs") == [] and
                 kube.find("jobsets") == [] and bool(_added(kube, "pods")), 10.0)
    (_, js), = _added(kube, "jobsets")
    (_, pod), = _added(kube, "pods")
    with kube.cond:
        stopped = [(rv, obj) for rv, p, kind, obj in kube.history if p == "pods" and
                   kind == "MODIFIED" and obj["metadata"].get("deletionTimestamp")]
    assert stopped, "the pod was removed without terminating"
    stopped_at, last = stopped[0]
    assert _deleted_at(kube, js["metadata"]["uid"]) < stopped_at  # the JobSet went first
    assert stopped_at < _deleted_at(kube, pod["metadata"]["uid"])  # then the pod, stopped
    assert last["status"]["phase"] == "Failed"
    assert last["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143
