"""The watch reads Kueue Workloads at the version the cluster serves, v1beta2 first: Kueue
serves v1beta2 since 0.15 and stops serving v1beta1 later (kubernetes-sigs/kueue#7304,
kubernetes-sigs/kueue#14558, kubernetes-sigs/kueue#13957); the fake API serves what ``served`` lists and
answers any other version with the API server's 404."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flows.core.failures import StageFailed
from tests.fakes.gke_backend import run_stage
from tests.fakes.kube_api import FakeApiServer, FakeKube
from tests.fakes.kube_api.scenarios import admit, evict, say, scenario, start, succeed
from tests.support.profiles import fake_hf_token

EVICTED = [(0.1, admit), (0.05, start), (0.05, say("step 1")), (0.1, evict), (0.3, admit),
           (0.05, start), (0.05, say("step 2")), (0.1, succeed)]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    monkeypatch.setenv("HF_TOKEN", fake_hf_token("CANARYkueue"))
    with FakeApiServer(FakeKube()) as srv:
        yield srv


def _workload_paths(kube: FakeKube) -> set[str]:
    return {path.split("?")[0].split("/namespaces/")[0] for _, _, path in kube.requests
            if "/workloads" in path}


@pytest.mark.parametrize("served", [("v1beta2",), ("v1beta2", "v1beta1"), ("v1beta1",)])
def test_the_watch_reads_workloads_at_the_served_version(server: FakeApiServer, tmp_path: Path,
                                                         served: tuple[str, ...]) -> None:
    server.kube.served["kueue.x-k8s.io"] = served
    kube = scenario(server.kube, EVICTED)
    outcome, logger, _, _ = run_stage(server, "train", tmp_path)
    assert not isinstance(outcome, StageFailed), outcome
    want = "v1beta2" if "v1beta2" in served else "v1beta1"
    assert _workload_paths(kube) == {f"/apis/kueue.x-k8s.io/{want}"}
    # the Workload was really read: its eviction is in the status line
    assert any("evicted by Kueue" in line for line in logger.lines), logger.lines


def test_the_preferred_order_is_v1beta2_then_v1beta1() -> None:
    from flows.backends.gke.watch.kueue import served_kueue_version

    assert served_kueue_version(["v1beta1", "v1beta2"]) == "v1beta2"
    assert served_kueue_version(["v1beta1"]) == "v1beta1"
    assert served_kueue_version(["v1alpha1"]) is None
