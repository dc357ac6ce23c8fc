"""The GKE backend against a Kueue that creates the Workload later than the JobSet, as its
reconciler does (tests/fakes/kube_api/kueue_workloads.py cites kueue's reconciler.go).

Before, the fake made the Workload in the JobSet's own write, so the monitor never saw a
queued JobSet without one: what it reads in that window (no Workload yet, no admission to
read) went untested."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.core.failures import StageFailed
from tests.fakes.gke_backend import jobsets_created, run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.scenarios import admit, say, scenario, start, succeed
from tests.support.profiles import fake_hf_token

WAITING = "waiting for Kueue to create its Workload"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("slowkueue"))
    with FakeApiServer(FakeKube()) as srv:
        yield srv


def test_a_workload_made_after_the_jobset_is_waited_for_then_followed(
        server: FakeApiServer, tmp_path: Path) -> None:
    """1.5 s without a Workload: the stage says it waits for Kueue to make one (not that it
    is queued for quota, nor admitted), then follows the Workload Kueue makes to the end."""
    server.kube.workload_delay_s = 1.5
    kube = scenario(server.kube, [(0.05, admit), (0.05, start), (0.05, say("step 1")),
                                  (0.1, succeed)])
    outcome, logger, _, _ = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    assert jobsets_created(kube) == 1 and outcome.submissions == 1
    said = [line for line in logger.lines if "is queued" in line or "is starting" in line
            or "is running" in line]
    assert said and WAITING in said[0], logger.lines  # the first thing it said
    assert "workload_created" in kube.action_times
    assert kube.created[("workloads", kube.find("workloads")[0]["metadata"]["name"])] == 1


def test_a_jobset_deleted_before_kueue_reconciled_it_leaves_no_workload(
        server: FakeApiServer) -> None:
    """The fake's Kueue, like the real one (the dropFinalizers path of ReconcileGenericJob),
    makes no Workload for a JobSet that is gone by the time it reconciles."""
    kube = server.kube
    kube.workload_delay_s = 0.3
    kube.create("jobsets", "default", {
        "metadata": {"name": "gone", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
        "spec": {"replicatedJobs": []}})
    assert kube.find("workloads") == []
    kube.delete("jobsets", "default", "gone")
    time.sleep(0.6)
    assert kube.find("workloads") == []
